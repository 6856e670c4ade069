"""Every record the store keeps as JSON is read forward-compatibly: what a newer version wrote
(``tests.newer_replica.with_unknown_keys``: an unknown key in every object, at every depth) reads
as this version's value, so a replica behind keeps working during a rolling upgrade."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from rag_monitor.record import Document, Feedback, FilterApplied, ModelCall, QueryRecord, StageTiming
from rag_monitor.store import SessionQuery
from tests.newer_replica import UNKNOWN_KEY, with_unknown_keys
from tests.store.conftest import make_record


def full_record(i: int) -> QueryRecord:
    """A record with every nested kind of object filled."""
    doc = Document("d1", "Cancel under Settings.", 0.5, {"source": "kb", "nested": {"k": 1}})
    return make_record(
        i, session_id="s1", stages=[StageTiming("retrieve", "1" * 16, 1, 2)], retrieved=[doc], delivered=[doc],
        filters=[FilterApplied("relevance", "score > 0.3", 3, 2, ["d2"], [Document("d2", "dropped")])],
        feedback=[Feedback("thumbs_down", 5, "wrong", -1.0, "2" * 16)], model_calls=[ModelCall("llm", "m", 10, 5, 2)],
        cache={"embedding": {"hit": 1}},
    )


def test_query_records_in_the_recent_cache(store):
    record = full_record(9)
    newer = with_unknown_keys(record.to_dict())
    assert newer["feedback"][0][UNKNOWN_KEY] and newer["filters"][0]["excluded_documents"][0][UNKNOWN_KEY]
    assert newer["model_calls"][0][UNKNOWN_KEY] and newer["stages"][0][UNKNOWN_KEY]
    assert UNKNOWN_KEY not in newer["delivered"][0]["metadata"]  # the app's own map: kept whole by every version
    assert QueryRecord.from_dict(newer) == record
    store.recent.put([newer], now=1.0)  # what the newer replica wrote, read by this one
    assert store.recent.get(record.trace_id) == record


def test_review_items_their_pair_draft_and_labels(store):
    from rag_monitor.review.agreement import agreement_by_label, item_agreement
    from rag_monitor.review.golden import golden_rows

    record, pair = full_record(1), full_record(2)
    assert store.queue.enqueue(with_unknown_keys(record.to_dict()), stratum="base", inclusion_prob=0.5,
                         pair_trace_id=pair.trace_id, pair_record=with_unknown_keys(pair.to_dict()))
    item = store.review.claim("bob", 600)
    assert item.query_record == record and item.paired_record == pair
    store.review.save_draft(item.id, "bob", with_unknown_keys({"relevant_documents": ["d1"]}))
    item = store.review.current_claim("bob")
    assert item.draft["relevant_documents"] == ["d1"]
    labels = with_unknown_keys({"faithful": "yes", "correct": "no", "corrected_answer": "Fixed.",
                                "relevant_documents": ["d1"], "reasons": ["incomplete"]})
    store.review.submit_review(item.id, "bob", labels)
    rows = golden_rows(store)
    assert [r["trace_id"] for r in rows] == [record.trace_id]
    assert rows[0]["expected_answer"] == "Fixed." and rows[0]["relevant_doc_ids"] == ["d1"]
    assert item_agreement([labels, labels], 2) == "agreed"
    assert agreement_by_label({1: [labels, labels]})["faithful"].pairs == 1


def test_claims_stored_with_a_score():
    from rag_monitor.faithfulness.claims import Claim, claims_from_json

    claims = [Claim("a claim", "supported", 0.9, "evidence")]
    stored = json.dumps(with_unknown_keys([dataclasses.asdict(c) for c in claims]))
    assert claims_from_json(stored) == tuple(claims)


def test_session_windows_with_labels_a_newer_version_appended(store):
    """Labels are positional (release, variant, intent): a newer version appends, this one reads its own."""
    from rag_monitor.store.schema import session_windows

    with store._db.write() as conn:
        conn.execute(session_windows.insert().values(
            session_id="s1", start_ns=1, words=json.dumps(["cancel", "plan"]), seen_at=1.0, trace_id="a" * 32,
            labels=json.dumps(["r1", "production", "billing", "added-later"])))
    previous, _ = store.session_windows.check({"s1": SessionQuery(2, ["cancel", "plan"], "b" * 32, ("r1", "production", "x"))},
                                              lambda found: [])
    assert previous["s1"].labels == ("r1", "production", "billing")


def test_drift_run_results_and_reference_definitions(store):
    from rag_monitor.agent.drift.export import DriftExporter
    from rag_monitor.alerts.metrics import AgentMetrics
    from rag_monitor.detectors.profiles import DriftProfile
    from rag_monitor.detectors.references import capture_period

    result = {"status": "done", "statistic": 0.01, "p_value": 0.2, "decision": False, "log_evidence": 1.0,
              "page_threshold": 7200.0, "n_reference": 20, "n_current": 10,
              "changes": {"over": [{"cluster": 3, "current_share": 0.12, "reference_share": 0.004,
                                    "examples": [{"trace_id": "a" * 32, "query": "cancel"}]}], "under": []}}
    assert store.drift_runs.claim("p", 1.0, "newer", lease_s=60, now=1.0)
    assert store.drift_runs.finish("p", 1.0, "newer", result=with_unknown_keys(result))
    registry = CollectorRegistry()
    DriftExporter(AgentMetrics(registry)).export(DriftProfile("p", "intent", "chi_square"), store.drift_runs.get("p", 1.0))
    assert registry.get_sample_value("rag_drift_p_value", {"signal": "intent", "detector": "chi_square"}) == 0.2

    spec = with_unknown_keys({"mode": "range", "start": 10.0, "end": 20.0})
    store.reservoirs.reset_reference("intent", None, source=json.dumps(spec), now=5.0)
    assert capture_period(store.reservoirs.reference_spec("intent"), 5.0) == (10.0, 20.0)
