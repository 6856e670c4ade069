"""Two agent replicas on one PostgreSQL behave as one agent: traffic split by trace id (as the
Collector's load-balancing exporter does), Prometheus sums across replicas equal the traffic,
review items are never claimed twice, and each scheduled drift run happens once."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import rag_monitor
from rag_monitor.store import open_store
from tests.services import free_port, require_binary, stop_process, wait_until

pytestmark = pytest.mark.integration

QUERIES = 60
REFERENCE = 20  # the count reference: the first queries sent
INTENTS = ["billing", "cards", "loans"]


class TraceIdRouter(SpanExporter):
    """Sends each span to the replica its trace id hashes to, like a load-balancing gateway."""

    def __init__(self, endpoints: list[str]):
        self.exporters = [OTLPSpanExporter(endpoint=f"{e}/v1/traces") for e in endpoints]

    def export(self, spans):
        groups: dict[int, list] = {}
        for span in spans:
            groups.setdefault(span.context.trace_id % len(self.exporters), []).append(span)
        results = [self.exporters[i].export(group) for i, group in groups.items()]
        return SpanExportResult.SUCCESS if all(r == SpanExportResult.SUCCESS for r in results) else SpanExportResult.FAILURE

    def shutdown(self):
        for exporter in self.exporters:
            exporter.shutdown()


def promql(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def test_two_replicas_on_postgresql_behave_as_one(start_agent_process, postgres_url, tmp_path):
    prometheus = require_binary("prometheus")
    (tmp_path / "profiles.yaml").write_text(
        f"profiles:\n  - {{name: intent-chi, signal: intent, detector: chi_square, reference_size: {REFERENCE},"
        " current_size: 20, min_current: 20, interval_s: 1, reference_days: null}\n"
    )
    (tmp_path / "sampling.yaml").write_text("base_rate: 1.0\n")
    common = dict(store_url=postgres_url, detector_profiles=str(tmp_path / "profiles.yaml"),
                  sampling_config=str(tmp_path / "sampling.yaml"), drift_feed_interval_s=0.5, score_interval_s=0.5)
    replicas = [start_agent_process(**common), start_agent_process(**common)]
    store = open_store(postgres_url)

    monitor = rag_monitor.init(service_name="svc", release="r1",
                               span_exporter=TraceIdRouter([r.otlp_url for r in replicas]))
    try:
        # Windows never overlap the reference (a count reference ends at its newest item), and each
        # replica fills the shared reference from its own batches: traffic sent while it is being
        # captured may land past its end on one replica and before it on the other. So the test
        # fills the reference first, then sends the traffic the drift windows test.
        for phase in (range(REFERENCE), range(REFERENCE, QUERIES)):
            for i in phase:
                with monitor.query(f"question {i}", intent=INTENTS[i % 3]) as q:
                    q.answer("answer")
            assert monitor.force_flush(10)
            if phase.start == 0:
                wait_until(lambda: getattr(store.reservoirs.info("intent", "reference"), "size", 0) == REFERENCE,
                           timeout=20, what="the reference captured")
    finally:
        monitor.shutdown()
    wait_until(lambda: sum(r.metric_sum("rag_queries_total") for r in replicas) == QUERIES, timeout=20, what="every query counted")
    per_replica = [r.metric_sum("rag_queries_total") for r in replicas]
    assert sum(per_replica) == QUERIES and all(n > 0 for n in per_replica), per_replica

    # Prometheus scraping both replicas sums them to the traffic sent.
    port = free_port()
    targets = ", ".join(f"'127.0.0.1:{r.http_port}'" for r in replicas)
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: agents, static_configs: [{{targets: [{targets}]}}]}}]\n"
    )
    proc = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        expr = 'sum(rag_queries_total) and on() count(up{job="agents"} == 1) == 2'
        wait_until(lambda: promql(port, expr), timeout=30, what="both replicas scraped")
        assert float(promql(port, "sum(rag_queries_total)")[0]["value"][1]) == QUERIES
    finally:
        stop_process(proc)

    # One replica at a time holds the scoring lease: every sampled answer is scored and counted once.
    wait_until(lambda: sum(r.metric_sum("rag_faithfulness_scored_total") for r in replicas) == QUERIES, timeout=30,
               what="every answer scored once")
    assert store.scores.backlog("lexical-v1") == 0

    # Reviewers on both replicas drain the shared queue: every item exactly once.
    wait_until(lambda: store.queue.depth().get("queued") == QUERIES, timeout=20, what="every query queued")
    claimed: list[list[int]] = [[], []]

    def drain(i: int) -> None:
        replica_store = open_store(postgres_url)  # each reviewer through its own connection pool
        while (item := replica_store.review.claim(f"reviewer-{i}", 60)) is not None:
            claimed[i].append(item.id)
        replica_store.close()

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not set(claimed[0]) & set(claimed[1])
    assert len(claimed[0]) + len(claimed[1]) == QUERIES

    # Both replicas schedule the drift job every second; each slot runs once.
    # A slot is tested once it is ``root_timeout_s`` old (queries still arriving join it): the first
    # runs are skipped while the window fills.
    wait_until(lambda: any((r.result or {}).get("status") == "done" for r in store.drift_runs.list("intent-chi")),
               timeout=60, what="a finished drift run")
    runs = store.drift_runs.list("intent-chi")
    assert len({r.scheduled_for for r in runs}) == len(runs)
    assert all(any(r.holder.endswith(p.instance_suffix) for p in replicas) for r in runs)
    done = [r.result for r in runs if (r.result or {}).get("status") == "done"]
    assert done, [r.result for r in runs]
    verdicts = [r.metric_sum("rag_drift_p_value", signal="intent", detector="chi_square") for r in replicas]
    assert verdicts[0] == verdicts[1] == pytest.approx(done[0]["p_value"])
    store.close()


def test_a_reask_routed_to_the_other_replica_counts_as_a_regeneration(start_agent, postgres_url):
    replicas = [start_agent(store_url=postgres_url), start_agent(store_url=postgres_url)]
    monitors = [rag_monitor.init(service_name="svc", endpoint=r.otlp_url, release="r1") for r in replicas]
    try:
        for monitor, question in zip(monitors, ["How do I cancel my plan?", "how do i cancel my plan"]):
            with monitor.query(question, session_id="s-42") as q:
                q.answer("Settings > Billing.")
            assert monitor.force_flush(timeout_s=10)
            wait_until(lambda q=q: replicas[0].store.recent.get(q.trace_id) is not None, timeout=10, what="the query stored")
    finally:
        for monitor in monitors:
            monitor.shutdown()
    inferred = lambda: [r.metric_sum("rag_regenerations_total", source="inferred") for r in replicas]  # noqa: E731
    wait_until(lambda: inferred() == [0, 1], timeout=10, what="the second replica to see the first one's query")
    time.sleep(1.5)  # and nothing more after the next ticks
    assert inferred() == [0, 1]


def test_a_click_on_one_replica_and_its_reask_on_the_other_are_one_regenerated_query(start_agent, postgres_url):
    """The regenerate feedback goes with its query's trace to one replica, the re-ask (a new trace)
    to the other: the store's claim makes them one regenerated query across replicas."""
    replicas = [start_agent(store_url=postgres_url, regeneration_check_interval_s=0.1) for _ in range(2)]
    monitors = [rag_monitor.init(service_name="svc", endpoint=r.otlp_url, release="r1") for r in replicas]
    total = lambda name, **match: sum(r.metric_sum(name, **match) for r in replicas)  # noqa: E731
    try:
        with monitors[0].query("Why was I charged twice?", session_id="s-7") as first:
            first.answer("A pending authorisation.")
        monitors[0].feedback(first, "regenerate")
        assert monitors[0].force_flush(timeout_s=10)
        wait_until(lambda: total("rag_regenerations_total", source="explicit") == 1, timeout=10, what="the click")
        clicked = time.time()  # the first replica's regeneration job has put the query in the session window
        wait_until(lambda: replicas[0].metric_sum("rag_agent_job_last_success_timestamp_seconds", job="regeneration") > clicked,
                   timeout=10, what="a regeneration check after the click")
        with monitors[1].query("why was i charged twice", session_id="s-7") as again:
            again.answer("Your card was charged once; the other is a hold.")
        assert monitors[1].force_flush(timeout_s=10)
    finally:
        for monitor in monitors:
            monitor.shutdown()
    wait_until(lambda: total("rag_regenerations_total", source="inferred") == 1, timeout=10, what="the re-ask")
    time.sleep(1.5)  # and nothing more after the next ticks
    assert total("rag_regenerated_queries_total") == 1
    assert [r.metric_sum("rag_regenerated_queries_total") for r in replicas] == [1, 0]  # the click claimed it first
