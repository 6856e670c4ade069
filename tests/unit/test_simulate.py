"""The traffic simulator: reproducible, covering every situation the oracle must see, and its truth
right on cases computed by hand."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rag_monitor.simulate import generate, simulate
from rag_monitor.simulate.truth import call_cost, price_table


@pytest.fixture(scope="module")
def traffic():
    return simulate(seed=5, queries=240)


def _spans(traffic) -> list[tuple]:
    """Every span's identity and attributes, request by request (exception events and feedback
    spans carry the wall clock, the rest is the scenario's)."""
    return [[(s.context.trace_id, s.context.span_id, s.name, sorted((k, str(v)) for k, v in s.attributes.items()))
             for s in batch.spans] for phase in traffic.phases for batch in phase]


def test_same_seed_same_traffic_and_truth():
    a, b = simulate(seed=3, queries=60), simulate(seed=3, queries=60)
    assert _spans(a) == _spans(b)
    assert a.truth.cost == b.truth.cost and a.truth.queries == b.truth.queries
    assert _spans(simulate(seed=4, queries=60)) != _spans(a)


def test_the_traffic_covers_every_situation(traffic):
    queries = traffic.scenario.queries
    assert len(traffic.scenario.releases) >= 15
    # Canaries: some moment has two releases live at once.
    by_hour = Counter()
    for q in queries:
        by_hour[(q.start_ns // 3_600_000_000_000, q.release)] += 1
    hours = Counter(hour for hour, _ in by_hour)
    assert any(n >= 2 for n in hours.values())
    assert {q.dialect for q in queries} == {"sdk", "langchain", "llamaindex", "genai"}
    assert any(q.variant == "shadow" and q.shadow_of for q in queries)
    models = {c.model for q in queries for c in q.calls}
    assert {"gpt-4o-mini", "text-embedding-3-small"} <= models and len(models) >= 4
    assert any(len([c for c in q.calls if c.kind == "llm"]) == 2 for q in queries)  # router + generator
    assert any(c.cached_input_tokens for q in queries for c in q.calls)
    assert len({q.tenant for q in queries if q.tenant}) > 20 and len({q.intent for q in queries if q.intent}) > 20
    assert any(q.refused for q in queries) and any(q.confidence is not None and q.confidence < 0.3 for q in queries)
    reports = {f.report for q in queries for f in q.filters}
    assert reports == {"ids", "documents", "both"} and {f.kind for q in queries for f in q.filters} == {"entitlement", "relevance"}
    timings = {fb.timing for q in queries for fb in q.feedback}
    assert timings == {"early", "late", "after_ttl"} and any(fb.duplicated for q in queries for fb in q.feedback)
    assert any(q.regeneration for q in queries) and any(q.hidden for q in queries)
    assert any(not q.delivered and q.error is None for q in queries)
    assert any(q.requests > 1 for q in queries) and any(q.root_lost for q in queries)
    assert any(fb.reason for q in queries for fb in q.feedback)


def test_seeded_pii_is_in_every_kind_of_place(traffic):
    documents = []
    for phase in traffic.phases:
        for batch in phase:
            request = ExportTraceServiceRequest()
            request.ParseFromString(batch.body())
            documents.append(json.loads(MessageToJson(request)))
    needles = re.compile("|".join(map(re.escape, traffic.scenario.pii.needles())))

    def has_pii(value) -> bool:
        return needles.search(json.dumps(value, ensure_ascii=False)) is not None

    places = Counter()
    for doc in documents:
        for rs in doc["resourceSpans"]:
            places["resource"] += has_pii(rs["resource"])
            for ss in rs["scopeSpans"]:
                places["scope"] += has_pii(ss.get("scope", {}))
                for span in ss["spans"]:
                    places["status"] += has_pii(span.get("status", {}))
                    places["events"] += has_pii(span.get("events", []))
                    for attr in span.get("attributes", []):
                        value = attr["value"]
                        if "arrayValue" in value and has_pii(value["arrayValue"].get("values", [])[1:]):
                            places["array element past the first"] += 1
                        if has_pii(value) and str(value.get("stringValue", ""))[:1] in "{[":
                            places["JSON inside a string"] += 1
                        if attr["key"] in ("session.id", "user.id") and has_pii(value):
                            places["identifier"] += 1
                        if attr["key"] == "rag.feedback.reason" and has_pii(value):
                            places["feedback reason"] += 1
                        if attr["key"].endswith("document.id") and has_pii(value):
                            places["document id"] += 1
    missing = {"resource", "scope", "status", "events", "array element past the first", "JSON inside a string",
               "identifier", "feedback reason", "document id"} - {k for k, n in places.items() if n}
    assert not missing, places


def test_every_span_decodes_and_the_count_is_the_truth(traffic):
    from rag_monitor.collectors import IngestLimits, decode_export_request

    decoded = sum(len(decode_export_request(b.body(), "application/x-protobuf", None, limits=IngestLimits()).spans)
                  for phase in traffic.phases for b in phase)
    assert decoded == traffic.spans_sent == traffic.truth.spans_sent


def test_call_cost_of_the_issues_router_and_generator():
    prices = price_table()
    assert call_cost(prices, "gpt-4o-mini", 1000, 10, 0) == pytest.approx(0.000156)
    assert call_cost(prices, "gpt-4o", 1000, 200, 0) == pytest.approx(0.0045)
    assert call_cost(prices, "gpt-4o-mini-2024-07-18", 1000, 0, 0) == pytest.approx(0.00015)  # longest pattern
    assert call_cost(prices, "no-such-model", 1, 1, 0) is None
    cached = {"m*": {"input": 2.0, "output": 4.0, "cached_input": 0.5}}
    assert call_cost(cached, "m1", 1000, 100, 400) == pytest.approx((600 * 2.0 + 400 * 0.5 + 100 * 4.0) / 1e6)


def test_truth_counts_by_hand_on_a_small_scenario():
    scenario = generate(seed=9, queries=30)
    traffic = simulate(seed=9, queries=30)
    truth = traffic.truth
    kept = [q for q in scenario.queries if not q.root_lost]
    assert sum(truth.queries.values()) == len(kept) == len(truth.records)
    assert truth.partial_traces == sum(q.root_lost for q in scenario.queries)
    assert sum(truth.feedback.values()) == sum(len(q.feedback) for q in kept)
    assert sum(h.count for h in truth.query_duration.values()) == len(kept)


def test_answers_are_unambiguous_for_a_lexical_scorer(traffic):
    try:
        from rag_monitor.faithfulness import load_scorer
    except ImportError:
        from rag_monitor.faithfulness import load_scorer
    scorer = load_scorer(None)
    truth = traffic.truth
    judged = [q for q in truth.records if truth.verdict(q) in ("supported", "unsupported")][:60]
    scores = scorer.score([" ".join(d.content for d in q.delivered) for q in judged], [q.answer for q in judged])
    for q, score in zip(judged, scores):
        assert (score >= scorer.threshold) == (truth.verdict(q) == "supported"), (q.answer, score)
