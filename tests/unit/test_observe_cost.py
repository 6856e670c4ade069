"""Cost and tokens per model call, each call at its own model's price, exported by model."""

from __future__ import annotations


import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.observe import QueryObserver
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors import PriceTable
from rag_monitor.config_files import shipped_path
from rag_monitor.record import ModelCall, QueryRecord
from rag_monitor.store import Release

RV = {"release": "r1", "variant": "production"}


def _observe(record: QueryRecord) -> tuple[float | None, CollectorRegistry]:
    registry = CollectorRegistry()
    prices = PriceTable.load(shipped_path("price_table"))
    observer = QueryObserver(AgentMetrics(registry), prices.call_cost)
    observer.releases.apply([Release("unknown", "r1", 1.0)])  # what the store says is the newest release
    cost = observer.observe(record)
    return cost, registry


def _record(*calls: ModelCall) -> QueryRecord:
    return QueryRecord("1" * 32, "2" * 16, 0, 10**9, release="r1", model_calls=list(calls), llm_model="gpt-4o",
                       prompt_tokens=2000, completion_tokens=210, llm_calls=2)


def test_router_and_generator_billed_to_their_own_models():
    cost, registry = _observe(_record(ModelCall("llm", "gpt-4o-mini", 1000, 10), ModelCall("llm", "gpt-4o", 1000, 200)))
    by_model = lambda model: registry.get_sample_value("rag_cost_usd_total", {**RV, "model": model})  # noqa: E731
    assert by_model("gpt-4o") == pytest.approx(0.0045) and by_model("gpt-4o-mini") == pytest.approx(0.000156)
    assert cost == pytest.approx(0.004656)  # not 0.0071: every token at gpt-4o's price
    assert registry.get_sample_value("rag_query_cost_usd_sum", RV) == pytest.approx(0.004656)
    tokens = lambda kind, model: registry.get_sample_value("rag_tokens_total", {**RV, "kind": kind, "model": model})  # noqa: E731
    assert (tokens("prompt", "gpt-4o-mini"), tokens("completion", "gpt-4o-mini")) == (1000, 10)
    assert (tokens("prompt", "gpt-4o"), tokens("completion", "gpt-4o")) == (1000, 200)


def test_embedding_and_cached_tokens_are_priced():
    cost, registry = _observe(_record(ModelCall("embedding", "text-embedding-3-small", 50_000),
                                      ModelCall("llm", "gpt-4o", 1000, 200, cached_input_tokens=800)))
    assert registry.get_sample_value("rag_cost_usd_total", {**RV, "model": "text-embedding-3-small"}) == pytest.approx(0.001)
    assert registry.get_sample_value("rag_tokens_total", {**RV, "kind": "cached_prompt", "model": "gpt-4o"}) == 800
    assert cost == pytest.approx(0.001 + (200 * 2.5 + 800 * 1.25 + 200 * 10) / 1e6)


def test_one_unpriced_call_leaves_the_query_cost_unknown_but_prices_the_rest():
    cost, registry = _observe(_record(ModelCall("llm", "in-house-router", 100, 5), ModelCall("llm", "gpt-4o", 1000, 200)))
    assert cost is None and registry.get_sample_value("rag_query_cost_usd_count", RV) is None
    assert registry.get_sample_value("rag_unpriced_queries_total", {"model": "in-house-router"}) == 1
    assert registry.get_sample_value("rag_cost_usd_total", {**RV, "model": "gpt-4o"}) == pytest.approx(0.0045)


def test_the_shadow_report_prices_a_query_as_the_agent_does(tmp_path):
    """One cost per query: per-call prices (reranker, search API) and the storage share included in both."""
    import yaml

    from rag_monitor.review.shadow import side_stats

    (tmp_path / "prices.yaml").write_text(yaml.safe_dump({
        "models": {"gpt-4o-mini": {"input": 0.15, "output": 0.60}},
        "calls": {"hosted-reranker": {"per_1k_calls": 1.0}, "help-center": {"per_1k_calls": 0.4}}}))
    prices = PriceTable.load(tmp_path / "prices.yaml")
    record = QueryRecord("1" * 32, "2" * 16, 0, 10**9, release="r1", model_calls=[
        ModelCall("retrieval", "help-center"), ModelCall("rerank", "hosted-reranker"), ModelCall("llm", "gpt-4o-mini", 600, 80)])
    registry = CollectorRegistry()
    observer = QueryObserver(AgentMetrics(registry), prices.call_cost, storage_usd_per_query=0.00001)
    observer.releases.apply([Release("unknown", "r1", 1.0)])
    agent_cost = observer.observe(record)
    generation = (600 * 0.15 + 80 * 0.60) / 1e6
    assert agent_cost == pytest.approx(0.0004 + 0.001 + generation + 0.00001)
    assert registry.get_sample_value("rag_query_cost_usd_sum", RV) == pytest.approx(agent_cost)

    side = side_stats([record], {}, prices.call_cost, storage_usd_per_query=0.00001)
    assert side.cost_per_query_usd == pytest.approx(agent_cost)  # not the tokens alone (0.000138)
    assert side.cost_components_usd == pytest.approx(
        {"retrieval": 0.0004, "rerank": 0.001, "generation": generation, "storage": 0.00001})
    for component, usd in side.cost_components_usd.items():
        assert registry.get_sample_value("rag_query_component_cost_usd_sum", {**RV, "component": component}) == pytest.approx(usd)


def test_the_shadow_report_command_prices_with_the_agents_storage_share(tmp_path):
    """`rag-monitor shadow report --config agent.yaml`, from an empty directory: the production side's
    cost per query is the agent's rag_query_cost_usd for the same record (storage share included)."""
    import json

    import yaml

    from rag_monitor.settings import load_settings
    from rag_monitor.store import open_store
    from tests.unit.test_cli_first_run import run_cli

    (tmp_path / "prices.yaml").write_text(yaml.safe_dump({
        "models": {"gpt-4o-mini": {"input": 0.15, "output": 0.60}}, "calls": {"hosted-reranker": {"per_1k_calls": 1.0}}}))
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"), "price_table": str(tmp_path / "prices.yaml"), "storage_usd_per_query": 0.00002}))
    calls = [ModelCall("rerank", "hosted-reranker"), ModelCall("llm", "gpt-4o-mini", 600, 80)]
    production = QueryRecord("1" * 32, "2" * 16, 0, 10**9, release="r1", model_calls=calls)
    shadow = QueryRecord("3" * 32, "4" * 16, 0, 10**9, release="r1", variant="shadow", shadow_of=production.trace_id,
                         candidate="fixed", model_calls=calls[1:])
    (tmp_path / "data").mkdir()
    store = open_store(f"sqlite:///{tmp_path / 'data' / 'rag-monitor.db'}")
    try:
        store.queue.enqueue(production, stratum="shadow_pair", inclusion_prob=1.0, pair_trace_id=shadow.trace_id, pair_record=shadow)
    finally:
        store.close()

    settings = load_settings(tmp_path / "agent.yaml", environ={})
    observer = QueryObserver(AgentMetrics(CollectorRegistry()), PriceTable.load(settings.price_table).call_cost,
                             storage_usd_per_query=settings.storage_usd_per_query)
    observer.releases.apply([Release("unknown", "r1", 1.0)])
    agent_cost = observer.observe(production)

    (tmp_path / "cwd").mkdir()
    result = run_cli(tmp_path / "cwd", "shadow", "report", "--config", str(tmp_path / "agent.yaml"), "--json")
    assert result.returncode == 0, result.stderr
    (candidate,) = json.loads(result.stdout)["candidates"]
    side = candidate["sides"]["production"]
    assert side["cost_per_query_usd"] == pytest.approx(agent_cost)
    assert side["cost_components_usd"]["storage"] == pytest.approx(0.00002)
    assert candidate["sides"]["candidate"]["cost_components_usd"]["storage"] == pytest.approx(0.00002)
