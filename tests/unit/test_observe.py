"""Query metrics from records: bounded labels, regenerations, filter exclusions, cost."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.observe import QueryObserver, RegenerationDetector
from rag_monitor.alerts.metrics import AgentMetrics, LabelFolder
from rag_monitor.record import Document, FilterApplied, QueryRecord, StageTiming
from rag_monitor.store import Release, StoreUnavailable, open_store


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


@pytest.fixture
def sqlite_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield store
    store.close()


def detector_counting(store, **kwargs):
    counted: list[tuple[str, str]] = []
    unchecked = [0]
    detector = RegenerationDetector(store.session_windows, on_regeneration=lambda *labels: counted.append(labels),
                                    on_unchecked=lambda n: unchecked.__setitem__(0, unchecked[0] + n), **kwargs)
    labels_of = lambda r: (r.release, r.variant, r.intent or "unknown")  # noqa: E731
    return detector, counted, unchecked, labels_of


def test_inferred_regeneration_needs_same_session_similar_query_within_window(sqlite_store):
    detector, counted, _, labels_of = detector_counting(sqlite_store, window_s=60, similarity=0.8)

    def regenerated(r) -> bool:
        detector.offer([r], labels_of)
        return detector.tick() == 1

    assert not regenerated(record(0, session_id="s", query="how do I cancel my plan"))
    assert regenerated(record(10, session_id="s", query="How do I cancel my plan?"))
    assert not regenerated(record(20, session_id="s", query="what are your opening hours"))
    assert not regenerated(record(200, session_id="s", query="what are your opening hours"))  # too late
    assert not regenerated(record(201, session_id="other", query="what are your opening hours"))
    assert counted == [("r1", "production", "unknown")]


def test_regeneration_within_one_batch_and_a_resent_query_is_no_reask(sqlite_store):
    detector, counted, _, labels_of = detector_counting(sqlite_store, window_s=60, similarity=0.8)
    first, again = record(1, session_id="s", query="reset my password"), record(5, session_id="s", query="Reset my password!")
    detector.offer([again, first], labels_of)
    assert detector.tick() == 1  # ordered by start time, not arrival
    detector.offer([again], labels_of)
    assert detector.tick() == 0  # an exporter's retry of the same query


def test_a_click_and_the_reask_it_triggers_are_one_regenerated_query(sqlite_store):
    from rag_monitor.store import FeedbackEvent, IngestBatch

    regenerated: list[tuple[str, str, str]] = []
    detector, signals, _, labels_of = detector_counting(sqlite_store, window_s=60, similarity=0.8)
    detector.on_regenerated_query = lambda *labels: regenerated.append(labels)
    asked = record(0, session_id="s", query="how do I cancel my plan", intent="billing")
    detector.offer([asked], labels_of)
    detector.tick()
    click = FeedbackEvent(asked.trace_id, "regenerate", 1.0, key="click")
    assert sqlite_store.ingest.persist(IngestBatch(feedback=[click], known_queries={asked.trace_id})).regenerated == {asked.trace_id}
    detector.offer([record(5, session_id="s", query="How do I cancel my plan?", release="r2")], labels_of)
    assert detector.tick() == 1
    # The re-ask is a signal about the query it re-asks (its labels), but the click claimed it first.
    assert signals == [("r1", "production", "billing")] and regenerated == []
    # A re-ask of the re-ask (no click): one more regenerated query, under the re-asked one's labels.
    detector.offer([record(9, session_id="s", query="how do I cancel my plan")], labels_of)
    assert detector.tick() == 1 and regenerated == [("r2", "production", "unknown")]


class UnavailableWindows:
    def check(self, latest, regenerated):
        raise StoreUnavailable("database is locked")


class UnavailableStore:
    session_windows = UnavailableWindows()


def test_regeneration_checks_are_bounded_and_what_is_dropped_or_unchecked_is_counted():
    detector, _, unchecked, labels_of = detector_counting(UnavailableStore(), window_s=60, similarity=0.8, max_queue=3)
    detector.offer([record(i, session_id=f"s{i}", query="hello") for i in range(5)], labels_of)
    assert unchecked == [2]  # the oldest two fell off the bounded queue
    with pytest.raises(StoreUnavailable):  # the job logs it and counts a failed run
        detector.tick()
    assert unchecked == [5]


def test_filter_exclusions_and_unpriced_models():
    obs, registry = observer()
    obs.observe(record(1, filters=[FilterApplied("relevance", "", 10, 0), FilterApplied("entitlement", "", 10, 8, ["d1"])],
                       llm_model="mystery", prompt_tokens=10, llm_calls=1))
    labels = {"release": "r1", "variant": "production"}
    assert registry.get_sample_value("rag_filter_exclusions_total", {**labels, "filter_kind": "relevance", "outcome": "emptied"}) == 1
    assert registry.get_sample_value("rag_filter_exclusions_total", {**labels, "filter_kind": "entitlement", "outcome": "removed_topk"}) == 1
    assert registry.get_sample_value("rag_unpriced_queries_total", {"model": "mystery"}) == 1
    assert obs.observe(record(2, llm_model="known", prompt_tokens=10, llm_calls=1)) == 0.001


def test_idle_session_windows_are_pruned(sqlite_store):
    now = [1000.0]
    detector = RegenerationDetector(sqlite_store.session_windows, window_s=60, similarity=0.8, clock=lambda: now[0])
    for i in range(10):
        sqlite_store.session_windows.swap({f"s{i}": (i, ["hello"])}, now=1000.0 + i * 10)
    now[0] = 1000.0 + 125  # sessions last seen before 1065 can no longer regenerate
    assert detector.prune() == 7
    assert detector.prune() == 0


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


def test_false_exclusion_rate_carries_a_wilson_interval_at_the_kish_effective_size():
    """Weights 1, 1, 5, 5 with the first and last excluded: rate 6/12, n_eff = 12^2 / 52."""
    import math
    from types import SimpleNamespace

    from rag_monitor.record import FilterApplied, QueryRecord
    from rag_monitor.review.stats import false_exclusion_stats

    def item(i: int, weight: float, excluded: bool):
        record = QueryRecord(trace_id=f"{i:032x}", root_span_id=f"{i:016x}", start_ns=i, end_ns=i + 1, release="r1",
                             filters=[FilterApplied("relevance", excluded_ids=["d1"] if excluded else [])])
        return SimpleNamespace(query_record=record, weight=weight, pair_trace_id=None), SimpleNamespace(labels={"relevant_documents": ["d1"]})

    (stats,) = false_exclusion_stats([item(1, 1, True), item(2, 1, False), item(3, 5, False), item(4, 5, True)])
    assert stats.ratio == 0.5 and stats.weighted_eligible_squares == 52
    n, z = 144 / 52, 1.959963984540054
    half = z * math.sqrt(0.25 / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = stats.interval
    assert low == pytest.approx(0.5 - half) and high == pytest.approx(0.5 + half)
    assert 0 < low < 0.5 < high < 1
