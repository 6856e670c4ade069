"""Counted once, whichever replica sees it: the same OTLP body sent to two replicas on one
PostgreSQL (an exporter's retry routed elsewhere by the Collector's load balancer) adds its
query, cost, latency and tokens once; the store's insert-once key decides which replica counts."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from tests.agent.test_agent_ingest import run_query
from tests.services import wait_until

pytestmark = pytest.mark.integration

QUERIES = 3
COUNTED = ("rag_queries_total", "rag_query_duration_seconds_count", "rag_query_cost_usd_count",
           "rag_stage_duration_seconds_count")


def sdk_body(n: int = QUERIES) -> bytes:
    """One OTLP body of ``n`` SDK-made queries (priced model calls, stages, documents)."""
    exporter = InMemorySpanExporter()
    monitor = rag_monitor.init(service_name="svc", span_exporter=exporter, batch=False, release="r1")
    for i in range(n):
        run_query(monitor, f"question {i}", session=f"s{i}")
    body = encode_spans(exporter.get_finished_spans()).SerializeToString()
    monitor.shutdown()
    return body


def totals(replicas, name: str, **match) -> float:
    return sum(r.metric_sum(name, **match) for r in replicas)


def test_the_same_body_sent_to_two_replicas_counts_once_in_every_metric(start_agent, postgres_url):
    replicas = [start_agent(store_url=postgres_url), start_agent(store_url=postgres_url)]
    body = sdk_body()
    # Once at the same moment (both transactions race for the key), once after (a plain retry).
    results: list[int] = []
    threads = [threading.Thread(target=lambda r=r: results.append(r.post(body)[0])) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.append(replicas[0].post(body)[0])
    assert results == [200, 200, 200]

    # What one agent of its own counts for the body sent once: the two replicas must add up to it.
    single = start_agent()
    assert single.post(body)[0] == 200
    assert single.metric_sum("rag_queries_total") == QUERIES
    for name in COUNTED:
        assert totals(replicas, name) == single.metric_sum(name), name
    assert totals(replicas, "rag_query_cost_usd_sum") == pytest.approx(single.metric_sum("rag_query_cost_usd_sum"))
    assert single.metric_sum("rag_query_cost_usd_sum") > 0
    assert totals(replicas, "rag_tokens_total", kind="prompt") == single.metric_sum("rag_tokens_total", kind="prompt") > 0
    # The race is decided by the store; the later retry to a replica that assembled the traces
    # itself is recognised by its own memory of completed traces (late spans) before the store.
    assert totals(replicas, "rag_agent_traces_duplicate_total") == QUERIES
    assert replicas[0].store.queue.depth()["queued"] == single.store.queue.depth()["queued"]


def test_a_retry_after_the_replica_that_stored_it_was_killed_counts_nothing_more(start_agent_process, postgres_url):
    import urllib.request

    replicas = [start_agent_process(store_url=postgres_url), start_agent_process(store_url=postgres_url)]
    body = sdk_body()
    request = urllib.request.Request(f"{replicas[0].otlp_url}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 200
    assert replicas[0].metric_sum("rag_queries_total") == QUERIES
    replicas[0].proc.kill()  # kill -9: as if the acknowledgement never reached the exporter
    replicas[0].proc.wait(timeout=30)

    request = urllib.request.Request(f"{replicas[1].otlp_url}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=30) as r:
        assert r.status == 200
    wait_until(lambda: replicas[1].metric_sum("rag_agent_traces_duplicate_total") == QUERIES, timeout=20,
               what="the retry recognised as stored")
    for name in ("rag_queries_total", "rag_query_duration_seconds_count", "rag_query_cost_usd_count",
                 "rag_tokens_total", "rag_feedback_total"):
        assert replicas[1].metric_sum(name) == 0, name
