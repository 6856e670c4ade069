"""What Phoenix sustains on its SQLite or PostgreSQL store, in spans/s: the forwarding budget's basis.

Phoenix (``phoenix serve``, started as the tests start it: ``rag_monitor.demo.services.PhoenixServer``)
accepts OTLP/HTTP posts into an in-memory queue and writes them through one bulk inserter; what
it *accepts* per second says little, what it *stores* per second is its capacity. The spans are
the agent's forwarded spans: benchmarks/ingest_decode.py's SDK-shaped traces (8 spans: root,
rewrite, embed with a 384-d vector, filter, retrieve with 5 documents of ~500 characters,
rerank, context, generate), decoded by the agent, converted by ``ReadableSpans`` and encoded by
the OTel exporter's own encoder, gzip, 512 spans a post (the forwarder's batch), fresh ids each.

- ``saturate``: posts for ``--saturate-s`` seconds while keeping at most 1,024 spans posted and
  not yet stored (Phoenix always has work, never a long queue); the stored count is read from
  Phoenix's store; capacity = stored spans / elapsed seconds, and / Phoenix's own CPU
  seconds (``/proc``): what one core given to Phoenix sustains, whatever else the machine runs.
- ``paced``: after Phoenix drained, ``--paced-s`` seconds at half the measured rate in posts of
  16 spans; ``keeps_up`` when the backlog (posted - stored) at the end is under 2 s of the rate
  (strict: Phoenix's inserter writes in batches, so a few posts may wait at any moment).

The recommended forwarding budget is half the per-core rate; ``AgentSettings.forward_budget_spans_s``'s
default is the PostgreSQL run's (``tests/agent/test_forward_tail_sampling.py`` checks they agree).
``--store postgresql`` runs Phoenix on its own PostgreSQL cluster on loopback (``asyncpg``
installed) and writes ``phoenix_capacity_postgresql.json``, with PostgreSQL's CPU beside Phoenix's.
Run under ``nice`` (the machine is shared); about 4-6 minutes with Phoenix's start:

    nice -n 10 .venv/bin/python benchmarks/phoenix_capacity.py [--saturate-s 90] [--paced-s 40] [--store postgresql]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest_decode import build_payloads  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402

from rag_monitor.agent.forwarder import ReadableSpans  # noqa: E402
from rag_monitor.collectors import IngestLimits, decode_export_request  # noqa: E402
from rag_monitor.collectors.otlp import CONTENT_TYPE_PROTOBUF  # noqa: E402
from rag_monitor.demo.services import PhoenixServer  # noqa: E402

OUT = Path(__file__).with_name("results") / "phoenix_capacity.json"
BATCH = 512
BACKLOG = 1024
"""Spans posted but not yet stored during the saturate phase: Phoenix always has work, never a long queue."""
PACED_BATCH = 16
PACED_SHARE = 0.5
"""The paced phase's rate, and the default budget, as a share of the measured capacity."""
PROJECT = "capacity"


def template_spans() -> list:
    spans = []
    for payload in build_payloads():
        spans += decode_export_request(payload, CONTENT_TYPE_PROTOBUF, limits=IngestLimits()).spans
    return spans


def templates(spans: list, batch: int = BATCH) -> list:
    """The template spans as the forwarder encodes them, in posts of ``batch`` spans (whole traces)."""
    convert = ReadableSpans(project=PROJECT)
    return [encode_spans(convert(spans[i:i + batch])) for i in range(0, len(spans) - batch + 1, batch)]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bodies(requests: list, n_spans: int, seed: int, batch: int = BATCH) -> list[bytes]:
    """Gzipped posts totalling at least ``n_spans``, every trace and span id fresh (Phoenix keys spans by id)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(seed)
    out = []
    while len(out) * batch < n_spans:
        request = ExportTraceServiceRequest()
        request.CopyFrom(requests[len(out) % len(requests)])
        traces: dict[bytes, bytes] = {}
        ids: dict[bytes, bytes] = {}
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = traces.setdefault(span.trace_id, rng.randbytes(16))
                    span.span_id = ids.setdefault(span.span_id, rng.randbytes(8))
                    if span.parent_span_id:
                        span.parent_span_id = ids.setdefault(span.parent_span_id, rng.randbytes(8))
        out.append(gzip.compress(request.SerializeToString()))
    return out


def sqlite_spans(db: Path) -> Callable[[], int]:
    def count() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                return conn.execute("SELECT count(*) FROM spans").fetchone()[0]
        except sqlite3.Error:  # not created yet, or locked for a moment by the writer
            return -1
    return count


def postgresql_spans(conn) -> Callable[[], int]:
    import psycopg

    def count() -> int:
        try:
            return conn.execute("SELECT count(*) FROM spans").fetchone()[0]
        except psycopg.errors.UndefinedTable:  # Phoenix's migrations have not created it yet
            return -1
    return count


class Poster:
    """Posts bodies to Phoenix; counts spans accepted and 503s (Phoenix at capacity), retrying those."""

    def __init__(self, url: str, stop: threading.Event | None = None):
        self.url = url + "/v1/traces"
        self.stop = stop or threading.Event()
        self.accepted = 0
        self.rejected_503 = 0
        self.lock = threading.Lock()

    def post(self, body: bytes, n: int) -> None:
        while not self.stop.is_set():
            request = urllib.request.Request(self.url, data=body, method="POST", headers={
                "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    response.read()
                with self.lock:
                    self.accepted += n
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 503:
                    raise
                with self.lock:
                    self.rejected_503 += 1
                time.sleep(0.2)


def watch(stored: Callable[[], int], until: Callable[[int], bool], interval: float = 0.5) -> list[tuple[float, int]]:
    """(seconds, stored spans) samples until ``until(stored)``."""
    t0 = time.monotonic()
    samples = []
    while True:
        n = stored()
        samples.append((round(time.monotonic() - t0, 2), n))
        if until(n):
            return samples
        time.sleep(interval)


def saturate(url: str, stored: Callable[[], int], payloads: list[bytes], base: int, cpu: Callable[[], float],
             cap_s: float) -> dict:
    """Keep Phoenix's insert queue busy but short (at most ``BACKLOG`` spans posted and not stored)."""
    poster = Poster(url)
    t0, cpu0 = time.monotonic(), cpu()
    samples, posted = [], 0
    for body in payloads:
        while True:
            now = stored() - base
            samples.append((round(time.monotonic() - t0, 2), now))
            if posted - now <= BACKLOG or time.monotonic() - t0 > cap_s:
                break
            time.sleep(0.25)
        if time.monotonic() - t0 > cap_s:
            break
        poster.post(body, BATCH)
        posted += BATCH
    elapsed, used, done = time.monotonic() - t0, cpu() - cpu0, stored() - base
    return {"posted": posted, "stored": done, "seconds": round(elapsed, 1), "responses_503": poster.rejected_503,
            "stored_spans_per_s": round(done / elapsed, 1), "phoenix_cpu_s": round(used, 1),
            "stored_spans_per_cpu_s": round(done / used, 1) if used else None,
            "samples": samples[:: max(1, len(samples) // 40)]}


def paced(url: str, stored: Callable[[], int], payloads: list[bytes], sizes: list[int], rate: float, seconds: float, base: int) -> dict:
    poster = Poster(url)
    t0 = time.monotonic()
    sent = 0
    backlog = []
    for body, n in zip(payloads, sizes):
        elapsed = time.monotonic() - t0
        if elapsed >= seconds:
            break
        wait = sent / rate - elapsed
        if wait > 0:
            time.sleep(wait)
        poster.post(body, n)
        sent += n
        now = stored()
        if now >= 0:
            backlog.append((round(time.monotonic() - t0, 1), sent - (now - base)))
    end_backlog = backlog[-1][1] if backlog else 0
    return {"rate_spans_per_s": rate, "seconds": round(time.monotonic() - t0, 1), "posted": sent,
            "responses_503": poster.rejected_503, "end_backlog_spans": end_backlog,
            "max_backlog_spans": max((b for _, b in backlog), default=0),
            "keeps_up": end_backlog < 2 * rate, "backlog": backlog[:: max(1, len(backlog) // 30)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saturate-s", type=float, default=90.0, help="seconds of the saturate phase")
    parser.add_argument("--paced-s", type=float, default=40.0, help="seconds of the paced phase")
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                        help="Phoenix's store: its default SQLite file, or PostgreSQL on loopback (needs asyncpg)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        postgres = stack.enter_context(phoenix_postgres()) if args.store == "postgresql" else None
        phoenix = PhoenixServer(Path(tmp), database_url=postgres.phoenix_url if postgres else None)
        starting = threading.Thread(target=phoenix.start, kwargs={"timeout": 300.0})
        starting.start()  # about 10 s idle, minutes on a busy machine: build the posts meanwhile
        template = template_spans()
        requests, small = templates(template), templates(template, PACED_BATCH)
        sat_bodies = bodies(requests, 40_000, seed=1)
        starting.join()
        stored = postgres.spans if postgres else sqlite_spans(Path(tmp) / "phoenix.db")
        try:
            Poster(phoenix.url).post(bodies(requests, BATCH, seed=3)[0], BATCH)  # the project and first rows
            watch(stored, lambda n: n >= BATCH)
            print("phoenix up; saturate", flush=True)
            pg_cpu0 = postgres.cpu_s() if postgres else 0.0
            result_sat = saturate(phoenix.url, stored, sat_bodies, stored(), lambda: cpu_s(phoenix.proc.pid),
                                  args.saturate_s)
            if postgres:
                used = postgres.cpu_s() - pg_cpu0
                result_sat["postgres_cpu_s"] = round(used, 1)
                result_sat["stored_spans_per_postgres_cpu_s"] = round(result_sat["stored"] / used, 1) if used else None
            print("saturate:", {k: v for k, v in result_sat.items() if k != "samples"}, flush=True)
            base = stored() + result_sat["posted"] - result_sat["stored"]
            t0 = time.monotonic()
            watch(stored, lambda n: n >= base or time.monotonic() - t0 > 120)  # Phoenix's queue drained
            rate = round(PACED_SHARE * result_sat["stored_spans_per_s"], 1)
            pace_bodies = bodies(small, int(rate * args.paced_s) + PACED_BATCH, seed=2, batch=PACED_BATCH)
            result_paced = paced(phoenix.url, stored, pace_bodies, [PACED_BATCH] * len(pace_bodies), rate, args.paced_s,
                                 base=stored())
        finally:
            phoenix.stop()
    import phoenix as px

    per_core = result_sat["stored_spans_per_cpu_s"]
    recommended = float(f"{PACED_SHARE * per_core:.2g}")
    result = {
        "script": "benchmarks/phoenix_capacity.py",
        "command": "nice -n 10 .venv/bin/python benchmarks/phoenix_capacity.py " + " ".join(sys.argv[1:]),
        "phoenix_version": px.__version__,
        "store": "sqlite (Phoenix default)" if args.store == "sqlite" else "postgresql (loopback, its own cluster)",
        "batch_spans": BATCH,
        "spans_per_trace": round(len(template) / len({s.trace_id for s in template}), 2),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "note": "2 cores shared with other work, under nice: the wall-clock rate is this machine's, "
                            "the per-CPU-second rate is what one core given to Phoenix sustains"},
        "saturate": result_sat,
        "paced": result_paced,
        "stored_spans_per_s_here": result_sat["stored_spans_per_s"],
        "stored_spans_per_phoenix_cpu_s": per_core,
        "paced_share": PACED_SHARE,
        "recommended_budget_spans_s": recommended,
    }
    out = OUT if args.store == "sqlite" else OUT.with_name(f"phoenix_capacity_{args.store}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("saturate", "paced")}, indent=2))
    print("paced:", {k: v for k, v in result_paced.items() if k != "backlog"})


class PhoenixPostgres:
    """A PostgreSQL cluster on loopback for Phoenix alone: its URL, its span count and its CPU."""

    def __init__(self, server, database: str):
        from scale import Postgres

        self.phoenix_url = server.create_database(database).replace("postgresql+psycopg://", "postgresql://")
        self.cluster = Postgres(server, database)
        # Counted on the cluster's own connection: the CPU of every server process but that one is Phoenix's.
        self.spans = postgresql_spans(self.cluster.conn)

    def cpu_s(self) -> float:
        return self.cluster.cpu_s()


@contextmanager
def phoenix_postgres():
    from tests.services import PostgresServer, traversable_tmpdir

    root = traversable_tmpdir("rag-monitor-phoenix-pg-")
    server = PostgresServer(root)
    server.start()
    try:
        yield PhoenixPostgres(server, "phoenix")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
