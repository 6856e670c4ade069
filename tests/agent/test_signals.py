"""Index freshness, cache hit rates and the full cost per query, end to end: the SDK sends index
events and queries to a real agent over OTLP, and /metrics carries the numbers the test computes
by hand. Two replicas on one PostgreSQL store agree on which documents are stale."""

from __future__ import annotations

import time

import pytest

import rag_monitor
from tests.services import wait_until

pytestmark = pytest.mark.integration
RV = {"release": "r1", "variant": "production"}
PRICES = """
models:
  gpt-4o-mini*: {input: 0.15, output: 0.60, cached_input: 0.075}
  text-embedding-3-small: {input: 0.02, output: 0}
calls:
  rerank-v3.5: {per_1k_calls: 2.00}
  support-kb: {per_call: 0.0005}
"""


@pytest.fixture
def prices(tmp_path) -> str:
    path = tmp_path / "prices.yaml"
    path.write_text(PRICES)
    return str(path)


def _ask(monitor, docs, *, cache=(), rerank=False, embed=False, data_source=None):
    with monitor.query("What is the refund window?", session_id="s1") as q:
        for kind, hit in cache:
            q.cache(kind, hit)
        if embed:
            q.embed(model="text-embedding-3-small", tokens=1000)
        with q.retrieve(data_source=data_source) as r:
            r.documents([{"id": d, "content": "policy text", "metadata": {"committed_at": t}} for d, t in docs])
        if rerank:
            with q.rerank(model="rerank-v3.5") as rr:
                rr.documents([{"id": d, "content": "policy text", "metadata": {"committed_at": t}} for d, t in docs])
        with q.generate(model="gpt-4o-mini") as g:
            g.tokens(prompt=1000, completion=100, cached_prompt=600)
        q.answer("30 days.")
    return q.trace_id


def test_freshness_cache_and_cost_by_component_from_the_sdk(start_agent, prices):
    agent = start_agent(price_table=prices, storage_usd_per_query=0.0001)
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1", batch=False)
    t0 = float(int(time.time()) - 86400)  # whole seconds: the ISO 8601 metadata below has no fraction
    try:
        monitor.index_event("doc-a", committed_at=t0, indexed_at=t0 + 90, source="confluence")
        monitor.index_event("doc-b", committed_at=t0 + 1000, indexed_at=t0 + 1030, source="confluence")
        monitor.index_event("doc-a", committed_at=t0 + 2000, indexed_at=t0 + 2600, source="confluence")
        monitor.index_event("doc-a", committed_at=t0 + 2000, indexed_at=t0 + 2700, source="confluence")  # re-indexed: not new
        monitor.index_event("doc-a", committed_at=t0 + 500, indexed_at=t0 + 2800, source="confluence")  # older: not new
        # served doc-a's first version although a newer one was searchable: stale
        _ask(monitor, [("doc-a", t0), ("doc-b", t0 + 1000)], cache=[("embedding", True), ("response", False)],
             rerank=True, embed=True, data_source="support-kb")
        # the newest versions (ISO 8601 in the metadata reads the same): checked, not stale
        _ask(monitor, [("doc-a", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + 2000)))],
             cache=[("embedding", False), ("embedding", False), ("retrieval", True)])
        _ask(monitor, [("doc-unknown", t0)])  # no index event for it: not checked
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.metric("rag_queries_total", {**RV, "intent": "unknown", "tenant": "unknown"}) == 3,
               timeout=20, what="three queries")

    # freshness lag: 90, 30 and 600 seconds; the re-indexed and the older version are not new
    lag = {"source": "confluence"}
    assert agent.metric("rag_index_freshness_lag_seconds_count", lag) == 3
    assert agent.metric("rag_index_freshness_lag_seconds_sum", lag) == pytest.approx(720)
    assert agent.metric("rag_index_freshness_lag_seconds_bucket", {**lag, "le": "60.0"}) == 1
    assert agent.metric("rag_index_freshness_lag_seconds_bucket", {**lag, "le": "120.0"}) == 2
    assert agent.metric("rag_index_freshness_lag_seconds_bucket", {**lag, "le": "600.0"}) == 3
    assert agent.metric("rag_index_events_total", {"outcome": "new_version"}) == 3
    assert agent.metric("rag_index_events_total", {"outcome": "not_newer"}) == 2
    # stale share: 1 of the 2 queries whose served versions are known
    assert agent.metric("rag_index_checked_queries_total", RV) == 2
    assert agent.metric("rag_index_stale_queries_total", RV) == 1
    assert agent.store.index_documents.count() == 2

    cache = lambda kind, outcome: agent.metric("rag_cache_requests_total", {**RV, "cache": kind, "outcome": outcome})  # noqa: E731
    assert (cache("embedding", "hit"), cache("embedding", "miss"), cache("response", "miss"), cache("retrieval", "hit")) == (1, 2, 1, 1)
    assert cache("response", "hit") is None

    # every query: 400 input + 600 cached + 100 output tokens of gpt-4o-mini
    generation = (400 * 0.15 + 600 * 0.075 + 100 * 0.60) / 1e6
    assert agent.metric("rag_cache_saved_usd_total", {**RV, "cache": "prompt"}) == pytest.approx(3 * 600 * (0.15 - 0.075) / 1e6)
    component = lambda name, stat: agent.metric(f"rag_query_component_cost_usd_{stat}", {**RV, "component": name})  # noqa: E731
    assert (component("generation", "count"), component("generation", "sum")) == (3, pytest.approx(3 * generation))
    assert (component("embedding", "count"), component("embedding", "sum")) == (1, pytest.approx(1000 * 0.02 / 1e6))
    assert (component("retrieval", "count"), component("retrieval", "sum")) == (1, pytest.approx(0.0005))
    assert (component("rerank", "count"), component("rerank", "sum")) == (1, pytest.approx(0.002))
    assert (component("storage", "count"), component("storage", "sum")) == (3, pytest.approx(0.0003))
    full = 3 * generation + 0.00002 + 0.0005 + 0.002 + 0.0003
    assert agent.metric("rag_query_cost_usd_sum", RV) == pytest.approx(full)
    scraped = agent.scrape()
    for name in ("rag_index_freshness_lag_seconds_bucket", "rag_index_stale_queries_total", "rag_cache_requests_total",
                 "rag_cache_saved_usd_total", "rag_query_component_cost_usd_bucket"):
        assert name in scraped


def test_replicas_agree_on_stale_documents_through_the_store(start_agent, postgres_url):
    a = start_agent(store_url=postgres_url)
    b = start_agent(store_url=postgres_url)
    t0 = time.time() - 3600
    on_a = rag_monitor.init(service_name="svc", endpoint=a.otlp_url, release="r1", batch=False)
    on_b = rag_monitor.init(service_name="svc", endpoint=b.otlp_url, release="r1", batch=False)
    try:
        on_a.index_event("doc-a", committed_at=t0, indexed_at=t0 + 10)
        on_a.index_event("doc-a", committed_at=t0 + 100, indexed_at=t0 + 130)
        on_b.index_event("doc-a", committed_at=t0 + 100, indexed_at=t0 + 130)  # the same event, resent to b
        _ask(on_b, [("doc-a", t0)])  # b never saw doc-a's events: the store says it is stale
    finally:
        on_a.shutdown()
        on_b.shutdown()
    wait_until(lambda: b.metric("rag_index_checked_queries_total", RV) == 1, timeout=20, what="the query on b")
    assert b.metric("rag_index_stale_queries_total", RV) == 1
    assert a.metric("rag_index_freshness_lag_seconds_count", {"source": "unknown"}) == 2
    # the resent event is not a new version on b: each version's lag is counted once across replicas
    assert b.metric("rag_index_freshness_lag_seconds_count", {"source": "unknown"}) is None
    assert b.metric("rag_index_events_total", {"outcome": "not_newer"}) == 1
