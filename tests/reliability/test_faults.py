"""Faults (issue 8): kill -9 of the agent, the store going away, Phoenix down or slow, the agent
down or slow for the SDK. Real processes, real databases, real sockets on loopback."""

from __future__ import annotations

import gzip
import http.server
import inspect
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

import rag_monitor
from rag_monitor import semconv
from rag_monitor.agent.drift.runs import fire_interval_s, run_lease_s, run_profile, slot_of
from rag_monitor.agent.scoring import ScoringLoop
from rag_monitor.detectors.profiles import DriftProfile
from rag_monitor.store import open_store
from tests.services import PostgresServer, free_port, traversable_tmpdir, wait_until

# --- helpers -----------------------------------------------------------------------------------


def trace_id_of(i: int) -> str:
    return (0xFA << 120 | i + 1).to_bytes(16, "big").hex()


def query_request(i: int) -> bytes:
    """One finished query: a lone ``rag.query`` root span (the trace completes on arrival)."""
    tid = bytes.fromhex(trace_id_of(i))
    span = trace_pb2.Span(
        trace_id=tid, span_id=tid[8:], name=semconv.RAG_QUERY_SPAN_NAME,
        start_time_unix_nano=1_700_000_000_000_000_000, end_time_unix_nano=1_700_000_000_500_000_000,
    )
    attrs = {semconv.OPENINFERENCE_SPAN_KIND: "CHAIN", semconv.INPUT_VALUE: f"question {i}",
             semconv.OUTPUT_VALUE: f"answer {i}"}
    for key, value in attrs.items():
        span.attributes.append(common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value)))
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    return request.SerializeToString()


def post(otlp_url: str, body: bytes, timeout: float = 10):
    """(status, headers); status 0 when the connection failed (the agent is gone)."""
    request = urllib.request.Request(f"{otlp_url}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            r.read()
            return r.status, r.headers  # case-insensitive
    except urllib.error.HTTPError as e:
        return e.code, e.headers
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, {}


def sampling_all(tmp_path) -> str:
    path = tmp_path / "sampling-all.yaml"
    path.write_text("base_rate: 1.0\n")  # every finished query goes to review (and gets scored)
    return str(path)


class FakePhoenix(http.server.ThreadingHTTPServer):
    """A loopback OTLP endpoint that is slow (hangs until released) or answers 200; counts spans."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _PhoenixHandler)
        self.release = threading.Event()  # unset: every request hangs
        self.hanging = 0
        self.spans_received = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _PhoenixHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: FakePhoenix = self.server  # type: ignore[assignment]
        with server.lock:
            server.hanging += 1
        server.release.wait(60)
        with server.lock:
            server.hanging -= 1
        if self.path == "/v1/traces":
            if self.headers.get("Content-Encoding") == "gzip":  # the agent's exporter compresses
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with server.lock:
                server.spans_received += n
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


# --- kill -9 ----------------------------------------------------------------------------------


def test_kill_9_while_ingesting_and_scoring_loses_nothing_acknowledged_and_doubles_nothing(start_agent_process, tmp_path):
    db = tmp_path / "store.db"
    # The scorer takes at most one batch a tick, so a backlog larger than a batch outlives the next
    # tick: the kill lands mid-scoring unless the check and the kill are a second apart. (With
    # ticks 0.2 s apart and any backlog, it emptied between the two on a loaded machine.)
    settings = dict(store_url=f"sqlite:///{db}", sampling_config=sampling_all(tmp_path), score_interval_s=1.0,
                    detector_profiles="")
    one_batch = inspect.signature(ScoringLoop).parameters["batch"].default
    first = start_agent_process(**settings)
    store = open_store(f"sqlite:///{db}")
    acked: list[int] = []
    attempted: list[int] = []
    stop = threading.Event()

    def send() -> None:
        i = 0
        while not stop.is_set():
            attempted.append(i)
            status, _ = post(first.otlp_url, query_request(i), timeout=5)
            if status == 0:
                return  # the agent is dead
            assert status == 200, status
            acked.append(i)
            i += 1

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        # Kill while ingest is streaming and the scorer is between batches: some scored, and more
        # unscored than its next tick can take.
        wait_until(lambda: scored_ids(db) and store.scores.backlog() > one_batch and len(acked) >= 100, timeout=60,
                   what="the scorer to have scored part of the stream")
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
    finally:
        stop.set()
        sender.join(10)
    assert acked, "nothing was acknowledged before the kill"

    queued = store_ids(db)
    scored_before = scored_ids(db)
    # Durable on acknowledgement: every 2xx'd trace is already in the queue of the dead agent's store.
    missing = {trace_id_of(i) for i in acked} - queued
    assert not missing, f"{len(missing)} acknowledged traces lost by kill -9"
    assert scored_before and queued - scored_before, "the kill did not land mid-scoring"

    second = start_agent_process(**settings)
    # The exporter retries what got no answer, and may resend what was acknowledged (the ack was lost).
    unanswered = sorted(set(attempted) - set(acked))
    for i in unanswered + acked[-5:]:
        assert post(second.otlp_url, query_request(i))[0] == 200
    # After the dead holder's scoring lease (5 s) runs out, a batch a tick.
    wait_until(lambda: store.scores.backlog() == 0, timeout=120, what="the backlog scored after restart")

    expected = {trace_id_of(i) for i in attempted}
    with sqlite3.connect(db) as conn:
        per_trace = dict(conn.execute("SELECT trace_id, count(*) FROM review_items GROUP BY trace_id").fetchall())
        scores_per_trace = conn.execute("SELECT trace_id, scorer, count(*) FROM scores GROUP BY trace_id, scorer").fetchall()
    assert expected <= set(per_trace), "a retried trace is missing from the queue"
    assert set(per_trace.values()) == {1}, "a trace was queued twice"
    assert {n for _, _, n in scores_per_trace} == {1}
    assert {t for t, _, _ in scores_per_trace} == set(per_trace), "a queued trace has no score"
    # The restarted agent scored only the backlog: nothing scored before the kill was scored again.
    rescored = second.metric_sum("rag_faithfulness_scored_total")
    assert rescored == len(per_trace) - len(scored_before), (rescored, len(per_trace), len(scored_before))
    assert store.queue.depth()["queued"] == len(per_trace)
    store.close()
    print(f"\nkill -9: {len(acked)} acked, {len(unanswered)} unanswered, {len(scored_before)} scored before kill, "
          f"{rescored:.0f} scored after restart")


def test_kill_9_with_traces_waiting_for_their_root_keeps_every_acknowledged_span(start_agent_process, tmp_path):
    from tests.traces import body, child_spans, root_span
    from tests.traces import trace_id_of as waiting_trace

    db = tmp_path / "store.db"
    settings = dict(store_url=f"sqlite:///{db}", sampling_config=sampling_all(tmp_path), detector_profiles="")
    first = start_agent_process(**settings)
    traces = [waiting_trace(i, prefix=0xD0) for i in range(5)]
    for trace_id in traces:  # acknowledged: each trace's stages, documents and filter, its root still to come
        assert post(first.otlp_url, body(child_spans(trace_id)))[0] == 200
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)

    second = start_agent_process(**settings)
    for trace_id in traces:
        assert post(second.otlp_url, body([root_span(trace_id)]))[0] == 200
    store = open_store(f"sqlite:///{db}")
    try:
        for trace_id in traces:
            for record in (store.recent.get(trace_id), store.queue.item_for_trace(trace_id).query_record):
                assert {s.name for s in record.stages} >= {"filter", "retrieve"}, trace_id
                assert [d.id for d in record.retrieved] == ["doc-1", "doc-2"]
                assert record.filters and record.filters[0].excluded_ids == ["doc-9"]
        assert store.ingest.pending_span_rows() == 0
        assert second.metric_sum("rag_queries_total") == len(traces)
        assert second.metric_sum("rag_stage_duration_seconds_count", stage="retrieve") == len(traces)
    finally:
        store.close()


def store_ids(db) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT trace_id FROM review_items")}


def scored_ids(db) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT trace_id FROM scores")}


# --- drift runs interrupted -------------------------------------------------------------------

PROFILE = DriftProfile(name="intent-chi", signal="intent", detector="chi_square", reference_size=5,
                       current_size=5, min_current=5, interval_s=600, reference_days=None)


def test_drift_run_of_a_dead_holder_is_reclaimed_after_its_lease_and_finished_once(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    t0 = 1_800_000_000.0
    # A replica claims the run and dies before finishing it.
    assert store.drift_runs.claim("p", t0, "dead", lease_s=60, now=t0)
    # While its lease is valid nobody else runs it (no double run) ...
    assert not store.drift_runs.claim("p", t0, "live", lease_s=60, now=t0 + 59)
    # ... once it lapses, the run is re-claimed and counted as a second attempt.
    assert store.drift_runs.claim("p", t0, "live", lease_s=60, now=t0 + 61)
    run = store.drift_runs.get("p", t0)
    assert (run.holder, run.attempts, run.status) == ("live", 2, "running")
    # The dead holder coming back (a paused VM) cannot overwrite the live holder's result.
    assert not store.drift_runs.finish("p", t0, "dead", result={"status": "done", "by": "dead"})
    assert store.drift_runs.finish("p", t0, "live", result={"status": "done", "by": "live"})
    # Finished runs are never claimed again, however late.
    assert not store.drift_runs.claim("p", t0, "third", lease_s=60, now=t0 + 10_000)
    runs = store.drift_runs.list("p")
    assert len(runs) == 1 and runs[0].result["by"] == "live" and runs[0].status == "ok"
    store.close()


def test_run_profile_skips_a_slot_another_holder_is_running_and_finishes_its_own_once(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    now = 1_800_000_123.0
    slot = slot_of(PROFILE, now)
    assert store.drift_runs.claim(PROFILE.name, slot, "other", lease_s=600, now=now)
    assert run_profile(store, PROFILE, "me", now=now + 1) is None  # held: not run twice
    result = run_profile(store, PROFILE, "me", now=now + 600)  # the next slot is ours
    assert result is not None and result["status"] == "skipped"  # empty windows: stored, not raised
    assert run_profile(store, PROFILE, "again", now=now + 601) is None  # done: not again
    assert store.drift_runs.get(PROFILE.name, slot + 600).status == "ok"
    store.close()


def test_run_killed_midway_is_redone_in_its_slot(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    start = 1_800_000_000.0 + 10  # a scheduler fire, 10 s into a slot
    slot = slot_of(PROFILE, start)
    # What run_profile claims before it dies (its own lease), simulated by the same call it makes.
    assert store.drift_runs.claim(PROFILE.name, slot, "dead", signal=PROFILE.signal, detector=PROFILE.detector,
                           lease_s=run_lease_s(PROFILE), now=start)
    # A live replica tries the slot at its scheduler's pace for the rest of the slot.
    t = start + fire_interval_s(PROFILE)
    while slot_of(PROFILE, t) == slot:
        run_profile(store, PROFILE, "live", now=t)
        t += fire_interval_s(PROFILE)
    run = store.drift_runs.get(PROFILE.name, slot)
    assert run.status == "ok" and run.holder == "live" and run.attempts == 2


# --- the store unavailable --------------------------------------------------------------------


def pg_restart(server: PostgresServer) -> None:
    """``pg_ctl start`` on the existing cluster (``PostgresServer.start`` would initdb again)."""
    subprocess.run(
        [*server._as_user, f"{server.bindir}/pg_ctl", "-D", str(server.datadir), "-l", str(server.root / "pg.log"),
         "-w", "start", "-o", f"-h 127.0.0.1 -p {server.port} -k {server.root} -c fsync=off"],
        check=True, capture_output=True,
    )


def test_postgresql_stopped_mid_run_is_503_then_full_recovery(start_agent):
    import shutil

    root = traversable_tmpdir("rag-monitor-pg-faults-")
    server = PostgresServer(root)
    server.start()
    try:
        agent = start_agent(store_url=server.url(), store_timeout_s=1.0, sampling_config="")
        acked: set[int] = set()
        for i in range(10):
            assert post(agent.otlp_url, query_request(i))[0] == 200
            acked.add(i)

        server.stop()  # immediate: connections die mid-pool
        refused = []
        for i in range(10, 15):
            status, headers = post(agent.otlp_url, query_request(i))
            assert status == 503, status
            assert int(headers["Retry-After"]) > 0
            refused.append(i)
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"{agent.otlp_url}/readyz", timeout=10)
        assert not_ready.value.code == 503

        pg_restart(server)
        # New traffic succeeds again (pooled connections to the old server are replaced) ...
        wait_until(lambda: post(agent.otlp_url, query_request(20))[0] == 200, timeout=20, what="200 after restart")
        acked.add(20)
        # ... and the exporter's retries of the refused requests are kept.
        for i in refused:
            assert post(agent.otlp_url, query_request(i))[0] == 200
            acked.add(i)
        for i in acked:
            record = agent.store.recent.get(trace_id_of(i))
            assert record is not None and record.query == f"question {i}", i
        assert agent.metric_sum("rag_queries_total") == len(acked)  # counted once each, the refused too
        assert agent.metric("rag_agent_ingest_errors_total", {"reason": "store_unavailable"}) == len(refused)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_sqlite_locked_sdk_exporter_retries_and_every_query_arrives_once(start_agent):
    agent = start_agent(store_timeout_s=0.3)
    db_path = agent.agent.settings.resolved_store_url().removeprefix("sqlite:///")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, export_timeout_s=30, schedule_delay_s=0.1)
    blocker = sqlite3.connect(db_path, timeout=1, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock past the busy timeout
    trace_ids = []
    try:
        for i in range(20):
            with monitor.query(f"locked question {i}") as q:
                with q.retrieve() as r:
                    r.documents([{"id": f"d{i}", "content": "some context"}])
                q.answer(f"answer {i}")
            trace_ids.append(q.trace_id)
        wait_until(lambda: agent.metric("rag_agent_ingest_errors_total", {"reason": "store_unavailable"}),
                   timeout=20, what="a 503 while the store is locked")
        assert agent.metric_sum("rag_queries_total") == 0
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    # The exporter honours Retry-After and sends the same spans again; the agent re-assembles them.
    assert monitor.force_flush(timeout_s=40)
    stats = monitor.stats()
    monitor.shutdown()
    assert (stats.failed, stats.dropped) == (0, 0), stats
    for trace_id in trace_ids:
        record = agent.store.recent.get(trace_id)
        assert record is not None and len(record.delivered or record.retrieved or [None]) >= 1, trace_id
    assert agent.metric_sum("rag_queries_total") == len(trace_ids)  # once each, despite the retry


# --- Phoenix down or slow ---------------------------------------------------------------------


def test_phoenix_down_ingest_and_metrics_unaffected_failures_counted(start_agent, tmp_path):
    agent = start_agent(phoenix_url=f"http://127.0.0.1:{free_port()}", sampling_config=sampling_all(tmp_path),
                        score_interval_s=0.2)  # nothing listens there: connection refused
    for i in range(30):
        assert post(agent.otlp_url, query_request(i))[0] == 200
    assert agent.metric_sum("rag_queries_total") == 30
    assert all(agent.store.recent.get(trace_id_of(i)) for i in range(30))
    wait_until(lambda: agent.metric_sum("rag_agent_forwarded_spans_total", outcome="failed") == 30, timeout=20,
               what="the failed forwards counted")
    assert agent.metric_sum("rag_agent_forwarded_spans_total", outcome="sent") == 0
    # Scoring is not held up by the failed annotations either.
    wait_until(lambda: agent.metric_sum("rag_faithfulness_scored_total") == 30, timeout=20, what="every answer scored")


def test_phoenix_slow_ingest_and_metrics_unaffected_drops_counted_then_recovery(start_agent, tmp_path):
    phoenix = FakePhoenix()
    try:
        agent = start_agent(phoenix_url=phoenix.url, forward_queue_spans=10, sampling_config=sampling_all(tmp_path),
                            score_interval_s=0.2)
        wait_times = []
        for i in range(40):
            t = time.perf_counter()
            assert post(agent.otlp_url, query_request(i))[0] == 200
            wait_times.append(time.perf_counter() - t)
            if i == 0:
                wait_until(lambda: phoenix.hanging, timeout=10, what="the forwarder to be stuck in Phoenix")
        # Every request was answered while the forwarder's first post still hangs in Phoenix.
        assert phoenix.hanging and phoenix.spans_received == 0
        assert agent.metric_sum("rag_queries_total") == 40
        assert all(agent.store.recent.get(trace_id_of(i)) for i in range(40))
        # The bounded forward queue (10 spans) overflowed: the oldest were dropped and counted. On a
        # busy machine the hanging post may time out (5 s) before the 40th request: that batch
        # (at most 10 spans) is counted failed, and the next one hangs in its place.
        forwarded = lambda outcome: agent.metric_sum("rag_agent_forwarded_spans_total", outcome=outcome)  # noqa: E731
        wait_until(lambda: forwarded("dropped") + forwarded("failed") + agent.agent.forwarder.pending() == 40,
                   timeout=10, what="every span dropped, failed or pending")
        dropped = forwarded("dropped")
        assert dropped >= 40 - 2 * 10 - forwarded("failed") and dropped > 0, (dropped, forwarded("failed"))
        # Faithfulness metrics keep up although annotating in Phoenix hangs.
        wait_until(lambda: agent.metric_sum("rag_faithfulness_scored_total") == 40, timeout=20,
                   what="every answer scored while Phoenix hangs")

        phoenix.release.set()  # Phoenix recovers
        wait_until(lambda: agent.metric_sum("rag_agent_forwarded_spans_total", outcome="sent") > 0, timeout=20,
                   what="spans sent again")
        for i in range(40, 45):
            assert post(agent.otlp_url, query_request(i))[0] == 200
        wait_until(lambda: phoenix.spans_received >= 5 and agent.agent.forwarder.pending() == 0, timeout=20,
                   what="new spans forwarded after recovery")
        sent = agent.metric_sum("rag_agent_forwarded_spans_total", outcome="sent")
        failed = agent.metric_sum("rag_agent_forwarded_spans_total", outcome="failed")
        assert sent + failed + dropped == 45, (sent, failed, dropped)  # every span accounted for
        print(f"\nPhoenix slow: ingest median {statistics.median(wait_times) * 1000:.1f} ms, "
              f"max {max(wait_times) * 1000:.1f} ms; sent {sent:.0f} failed {failed:.0f} dropped {dropped:.0f}")
    finally:
        phoenix.close()


# --- the agent down or slow, seen from the app ---------------------------------------------


def app_request(i: int) -> str:
    time.sleep(0.003)  # the app's own work (retrieval, generation): what the user waits for
    return f"answer {i}"


def traced_request(monitor, i: int) -> str:
    with monitor.query(f"question {i}") as q:
        with q.retrieve() as r:
            r.documents([{"id": "d", "content": "c"}])
        answer = app_request(i)
        q.answer(answer)
    return answer


def test_agent_hanging_app_latency_unchanged_and_drops_counted():
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepts connections, never answers: an agent stuck
    try:
        monitor = rag_monitor.init(service_name="app", endpoint=f"http://127.0.0.1:{hung.getsockname()[1]}",
                                   export_timeout_s=1, max_queue_size=64, max_export_batch_size=16,
                                   schedule_delay_s=0.05)
        n = 150
        untraced, traced = [], []
        for i in range(n):  # interleaved, so background noise hits both alike
            t = time.perf_counter()
            app_request(i)
            untraced.append(time.perf_counter() - t)
            t = time.perf_counter()
            traced_request(monitor, i)
            traced.append(time.perf_counter() - t)
        ratio = statistics.median(traced) / statistics.median(untraced)
        assert ratio < 1.5, f"traced median {statistics.median(traced) * 1000:.2f} ms vs untraced {statistics.median(untraced) * 1000:.2f} ms"
        wait_until(lambda: monitor.stats().failed > 0, timeout=20, what="the hanging export counted as failed")
        stats = monitor.stats()
        assert stats.exported == 0
        # 300 spans recorded, a 64-span queue: the rest were dropped or failed, all counted.
        assert stats.dropped > 0 and stats.dropped + stats.failed + stats.queued + 16 >= 2 * n, stats
        monitor.shutdown(timeout_s=0.5)
        print(f"\nagent hanging: traced/untraced median latency {ratio:.3f}; {stats}")
    finally:
        hung.close()
