"""Query metrics from records: bounded labels, regenerations, filter exclusions, cost."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from rag_monitor.agent.observe import QueryObserver, RegenerationDetector
from rag_monitor.alerts.metrics import AgentMetrics, LabelFolder
from rag_monitor.record import Document, FilterApplied, QueryRecord, StageTiming
from rag_monitor.store import Release


def record(i: int, **fields) -> QueryRecord:
    base = dict(trace_id=f"{i:032x}", root_span_id="1" * 16, start_ns=i * 10**9, end_ns=i * 10**9 + 5 * 10**8, release="r1")
    return QueryRecord(**{**base, **fields})


def observer(**kwargs) -> tuple[QueryObserver, CollectorRegistry]:
    registry = CollectorRegistry()
    obs = QueryObserver(AgentMetrics(registry), lambda call: 0.001 if call.model == "known" else None, **kwargs)
    obs.releases.apply([Release("unknown", "r1", 1.0)])  # what the store says is the newest release
    return obs, registry


def test_unbounded_label_values_fold_into_other():
    obs, registry = observer(top_tenants=2, top_intents=1)
    for i, tenant in enumerate(["t1", "t2", "t3", "t4", "t1"]):
        obs.observe(record(i, tenant=tenant, intent=f"intent-{i}", variant="made-up"))
    value = lambda tenant, intent: registry.get_sample_value(  # noqa: E731
        "rag_queries_total", {"release": "r1", "variant": "other", "intent": intent, "tenant": tenant})
    assert value("t1", "intent-0") == 1 and value("t1", "other") == 1
    assert value("other", "other") == 2  # t3 and t4
    folder = LabelFolder(1)
    assert [folder("a"), folder("b"), folder(None)] == ["a", "other", "unknown"]


def test_stage_names_outside_the_known_set_fold():
    obs, registry = observer()
    obs.observe(record(1, stages=[StageTiming("retrieve", "a", 0, 10**8), StageTiming("my-custom-step", "b", 0, 10**8)]))
    labels = {"release": "r1", "variant": "production"}
    assert registry.get_sample_value("rag_stage_duration_seconds_count", {**labels, "stage": "retrieve"}) == 1
    assert registry.get_sample_value("rag_stage_duration_seconds_count", {**labels, "stage": "other"}) == 1


def test_inferred_regeneration_needs_same_session_similar_query_within_window():
    detector = RegenerationDetector(window_s=60, similarity=0.8)
    assert not detector.is_regeneration(record(0, session_id="s", query="how do I cancel my plan"))
    assert detector.is_regeneration(record(10, session_id="s", query="How do I cancel my plan?"))
    assert not detector.is_regeneration(record(20, session_id="s", query="what are your opening hours"))
    assert not detector.is_regeneration(record(200, session_id="s", query="what are your opening hours"))  # too late
    assert not detector.is_regeneration(record(201, session_id="other", query="what are your opening hours"))


def test_filter_exclusions_and_unpriced_models():
    obs, registry = observer()
    obs.observe(record(1, filters=[FilterApplied("relevance", "", 10, 0), FilterApplied("entitlement", "", 10, 8, ["d1"])],
                       llm_model="mystery", prompt_tokens=10, llm_calls=1))
    labels = {"release": "r1", "variant": "production"}
    assert registry.get_sample_value("rag_filter_exclusions_total", {**labels, "filter_kind": "relevance", "outcome": "emptied"}) == 1
    assert registry.get_sample_value("rag_filter_exclusions_total", {**labels, "filter_kind": "entitlement", "outcome": "removed_topk"}) == 1
    assert registry.get_sample_value("rag_unpriced_queries_total", {"model": "mystery"}) == 1
    assert obs.observe(record(2, llm_model="known", prompt_tokens=10, llm_calls=1)) == 0.001


def test_regeneration_memory_follows_active_sessions():
    detector = RegenerationDetector(window_s=60, similarity=0.8)
    for i in range(1000):  # a new session every second
        detector.is_regeneration(record(i, session_id=f"s{i}", query="hello"))
    assert len(detector._last) <= 61


def test_filter_outcomes_count_each_query_once_per_kind_as_the_description_says():
    obs, registry = observer()
    labels = {"release": "r1", "variant": "production"}
    # Known truth, per query: which relevance outcomes it has.
    queries = [
        [FilterApplied("relevance", "", 10, 8, ["d1"]), FilterApplied("relevance", "", 8, 7, ["d2"])],  # removed (two filters)
        [FilterApplied("relevance", "", 10, 9, excluded_documents=[Document("d3", "text")])],  # removed, documents only
        [FilterApplied("relevance", "", 10, 6)],  # removed, counts only
        [FilterApplied("relevance", "", 5, 0)],  # emptied (and removed)
        [FilterApplied("relevance", "", 5, 5)],  # applied, removed nothing
    ]
    for i, filters in enumerate(queries):
        obs.observe(record(i, filters=filters))
    value = lambda outcome: registry.get_sample_value(  # noqa: E731
        "rag_filter_exclusions_total", {**labels, "filter_kind": "relevance", "outcome": outcome})
    assert (value("removed_topk"), value("emptied")) == (4, 1)
    assert registry.get_sample_value("rag_filter_queries_total", {**labels, "filter_kind": "relevance"}) == 5
    # The recording rule divides by queries: the ratio is a share of queries, never above 1.
    assert value("removed_topk") / 5 <= 1


def test_false_exclusions_count_documents_named_by_ids_or_by_documents():
    from rag_monitor.review.stats import is_false_exclusion

    by_ids = record(1, filters=[FilterApplied("relevance", excluded_ids=["gold"])])
    by_documents = record(2, filters=[FilterApplied("relevance", excluded_documents=[Document("gold", "text")])])
    both = record(3, filters=[FilterApplied("relevance", excluded_ids=["gold"],
                                            excluded_documents=[Document("gold-2", "text")])])
    entitlement = record(4, filters=[FilterApplied("entitlement", excluded_documents=[Document("gold", "text")])])
    assert is_false_exclusion(by_ids, ["gold"]) is True
    assert is_false_exclusion(by_documents, ["gold"]) is True
    assert is_false_exclusion(both, ["gold", "gold-2"]) is True
    assert is_false_exclusion(both, ["gold", "kept"]) is False
    assert is_false_exclusion(entitlement, ["gold"]) is None  # never a false exclusion
