"""Overload of a real agent process: above capacity it answers 503 + Retry-After, never queues
without bound, never crashes, and an SDK app counts what it could not send.

Capacity is made small and deterministic with a real slow store rather than sheer volume (2
shared cores cannot out-run the agent reliably): another connection holds SQLite's write
lock, within the agent's busy timeout, so each accepted request waits for the store. The
receiver admits ``max_concurrent`` requests; the rest must be refused at once.
benchmarks/load.py measures the same behaviour under real volume.
"""

from __future__ import annotations

import sqlite3
import threading
import urllib.error
import urllib.request

import psutil
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from rag_monitor.settings import AgentSettings
from tests.agent.test_agent_ingest import run_query
from tests.services import wait_until

MAX_CONCURRENT = AgentSettings().max_concurrent_requests
TRACES_PER_BODY = 4


def bodies(n: int) -> tuple[list[bytes], int]:
    """``n`` OTLP bodies of TRACES_PER_BODY SDK-made queries each, all with distinct trace ids."""
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="overload", span_exporter=exporter, batch=False, release="r1")
    out, spans_per_body = [], 0
    for i in range(n):
        for j in range(TRACES_PER_BODY):
            run_query(monitor, f"question {i}-{j}", session=f"s{i}")
        spans = exporter.get_finished_spans()
        spans_per_body = len(spans)
        out.append(encode_spans(spans).SerializeToString())
        exporter.clear()
    monitor.shutdown()
    return out, spans_per_body


def post(url: str, body: bytes) -> tuple[int, str | None]:
    request = urllib.request.Request(f"{url}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.headers.get("Retry-After")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After")


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        r.read()
        return r.status


def test_saturated_agent_refuses_with_retry_after_stays_bounded_and_recovers(start_agent_process, tmp_path):
    db = tmp_path / "overload.db"
    # A busy timeout longer than the test: requests wait for the store instead of failing (slow, not down).
    agent = start_agent_process(store_url=f"sqlite:///{db}", store_timeout_s=60, detector_profiles="")
    rss = lambda: psutil.Process(agent.proc.pid).memory_info().rss  # noqa: E731
    n = MAX_CONCURRENT + 16
    payloads, spans_per_body = bodies(n)
    monitor = rag_monitor.init(service_name="app", endpoint=agent.otlp_url, export_timeout_s=1, schedule_delay_s=0.1)

    blocker = sqlite3.connect(db, timeout=1, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the slow store: nothing the agent accepts can complete
    results: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def send(body: bytes) -> None:
        answer = post(agent.otlp_url, body)
        with lock:
            results.append(answer)

    threads = [threading.Thread(target=send, args=(b,)) for b in payloads]
    try:
        for t in threads:
            t.start()
        # Exactly the requests beyond max_concurrent are refused, at once, while the others wait.
        wait_until(lambda: len(results) >= n - MAX_CONCURRENT, timeout=30, what="the refusals")
        with lock:
            refused = list(results)
        assert len(refused) == n - MAX_CONCURRENT, refused
        assert all(status == 503 and retry_after and int(retry_after) > 0 for status, retry_after in refused), refused
        assert agent.metric_sum("rag_agent_ingest_errors_total", reason="saturated") == n - MAX_CONCURRENT

        # Saturated but alive: the event loop and /metrics still answer.
        assert get(f"{agent.otlp_url}/healthz") == 200
        assert agent.metric_sum("rag_agent_spans_received_total") == 0

        # Refused bodies are not kept (RSS flat after 128 MiB of them), and each refusal reaches
        # its client: refusing with a large body unread used to reset the connection instead.
        before = rss()
        big = payloads[0] * ((4 << 20) // len(payloads[0]))  # ~4 MiB, under max_body_bytes (8 MiB)
        flood: list[int] = []

        def flood_worker() -> None:
            for _ in range(4):
                try:
                    flood.append(post(agent.otlp_url, big)[0])
                except OSError:  # connection reset / broken pipe: the client never saw the 503
                    flood.append(-1)

        workers = [threading.Thread(target=flood_worker) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert flood.count(503) == len(flood) == 32, flood
        growth_mib = (rss() - before) / 2**20
        assert growth_mib < 48, f"agent RSS grew {growth_mib:.0f} MiB for 128 MiB of refused requests"

        # An SDK app meanwhile: its export is refused (Retry-After beyond its timeout), counted, never raised.
        with monitor.query("during overload") as q:
            q.answer("a")
        assert monitor.force_flush() is False
        assert monitor.stats().failed >= 1 and monitor.stats().dropped == 0
        assert agent.proc.poll() is None
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        for t in threads:
            t.join(60)

    # The admitted requests all complete once the store moves; each is counted once.
    assert sorted(status for status, _ in results) == [200] * MAX_CONCURRENT + [503] * (n - MAX_CONCURRENT)
    assert agent.metric_sum("rag_agent_spans_received_total") == MAX_CONCURRENT * spans_per_body
    assert agent.metric_sum("rag_queries_total") == MAX_CONCURRENT * TRACES_PER_BODY
    # And the app's next export goes through.
    run_query(monitor, "after overload")
    assert monitor.force_flush(timeout_s=10)
    stats = monitor.stats()
    monitor.shutdown()
    assert stats.exported >= 7, stats
    assert agent.proc.poll() is None
