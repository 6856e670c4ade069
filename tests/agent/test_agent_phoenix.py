"""Forwarding to a real Phoenix server, and the agent's behaviour when Phoenix is down."""

from __future__ import annotations

import json

import pytest

import rag_monitor
from rag_monitor.faithfulness import SupportScorer
from tests.agent.test_agent_ingest import run_query
from tests.agents import langchain_rag_chain
from tests.services import free_port, wait_until

pytestmark = pytest.mark.integration


def phoenix_spans(url: str, project: str):
    from phoenix.client import Client

    return Client(base_url=url).spans.get_spans_dataframe(project_identifier=project)


def test_forwarded_spans_are_readable_in_phoenix_and_redacted(start_agent, phoenix_server):
    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="rag-monitor-test")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    try:
        with monitor.query("my card 4111 1111 1111 1111 was charged twice, mail me at jo@example.com") as q:
            with q.retrieve() as r:
                r.documents([{"id": "doc-1", "content": "Duplicate charges are refunded."}])
            q.answer("Duplicate charges are refunded.")
        trace_id = run_query(monitor)
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: (agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sent"}) or 0) >= 1, timeout=20, what="forwarding")

    def arrived():
        frame = phoenix_spans(phoenix_server.url, "rag-monitor-test")
        return frame if len(frame) >= 9 else None

    wait_until(lambda: arrived() is not None, timeout=30, interval=0.5, what="spans in Phoenix")
    frame = arrived()
    assert trace_id in set(frame["context.trace_id"])
    inputs = " ".join(str(v) for v in frame["attributes.input.value"].dropna())
    assert "4111 1111 1111 1111" not in inputs and "jo@example.com" not in inputs
    assert "<CARD>" in inputs and "<EMAIL>" in inputs
    assert set(frame["span_kind"]) >= {"CHAIN", "RETRIEVER", "RERANKER", "LLM"}


def test_phoenix_down_keeps_ingest_working_and_counts_failures(start_agent):
    agent = start_agent(phoenix_url=f"http://127.0.0.1:{free_port()}")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    try:
        trace_id = run_query(monitor)
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: agent.store.recent.get(trace_id) is not None, timeout=10, what="ingest despite Phoenix down")
    wait_until(lambda: (agent.metric("rag_agent_forwarded_spans_total", {"outcome": "failed"}) or 0) >= 1, timeout=20, what="the failure count")
    assert agent.metric_sum("rag_queries_total") == 1


def test_scores_become_phoenix_annotations_and_golden_rows_a_dataset(start_agent, phoenix_server, tmp_path):
    from phoenix.client import Client

    from rag_monitor.review.golden import golden_rows, push_to_phoenix

    # The default offline scorer (support-v1): its per-claim verdicts reach the store, Phoenix and the export.
    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="rag-monitor-scores", score_interval_s=0.5,
                        offline_scorer="support")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    try:
        trace_id = run_query(monitor)
        monitor.feedback(trace_id, "thumbs_down")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: "support-v1" in agent.store.scores.for_trace(trace_id), timeout=60, what="the score")
    stored = agent.store.scores.for_trace(trace_id)["support-v1"]
    assert stored.label == "supported" and stored.threshold == SupportScorer.load().threshold
    assert json.loads(stored.claims) == [{"text": "Cancel under Settings > Billing.", "verdict": "supported",
                                          "score": 1.0, "evidence": "Cancel under Settings > Billing."}]
    client = Client(base_url=phoenix_server.url)
    root_span_id = agent.store.recent.get(trace_id).root_span_id

    def annotations():
        frame = client.spans.get_span_annotations_dataframe(span_ids=[root_span_id], project_identifier="rag-monitor-scores")
        return frame if len(frame) else None

    wait_until(lambda: annotations() is not None, timeout=30, interval=0.5, what="the annotation in Phoenix")
    frame = annotations()
    assert set(frame["annotation_name"]) == {"faithfulness"}
    assert frame["result.label"].iloc[0] == "supported"
    assert frame["result.explanation"].iloc[0] == "all 1 claims supported"

    item = agent.store.review.claim("alice", 60)
    agent.store.review.submit_review(item.id, "alice", {"faithful": "yes", "relevant_documents": ["doc-1"]})
    rows = golden_rows(agent.store, corpus_version="kb-1")
    assert rows[0]["score_thresholds"] == {"support-v1": stored.threshold}
    assert rows[0]["score_claims"]["support-v1"][0]["verdict"] == "supported"
    push_to_phoenix(rows, phoenix_server.url, dataset="golden-test")
    dataset = client.datasets.get_dataset(dataset="golden-test")
    (example,) = list(dataset)
    assert example["input"]["question"] == "How do I cancel my plan?"
    assert example["output"]["gold_doc_ids"] == ["doc-1"]


def test_a_langchain_pipeline_reaches_records_metrics_and_phoenix(start_agent, phoenix_server):
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="rag-monitor-langchain")
    provider = TracerProvider(resource=Resource.create({"service.name": "lc-bot", "service.version": "lc-2"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{agent.otlp_url}/v1/traces")))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        langchain_rag_chain("Refunds take 5 days.", "refunds-1", "Refunds take 5 days.").invoke("How long do refunds take?")
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    wait_until(lambda: agent.metric_sum("rag_queries_total", release="lc-2") == 1, timeout=15, what="the LangChain record")
    assert agent.metric_sum("rag_stage_duration_seconds_count", stage="retrieve", release="lc-2") == 1

    def arrived():
        frame = phoenix_spans(phoenix_server.url, "rag-monitor-langchain")
        return frame if len(frame) else None

    wait_until(lambda: arrived() is not None, timeout=30, interval=0.5, what="LangChain spans in Phoenix")
    assert "RETRIEVER" in set(arrived()["span_kind"])


def test_lettucedetect_scores_reach_phoenix_with_their_spans(start_agent, phoenix_server, tmp_path):
    """LettuceDetect selected by its setting: the hallucinated spans it finds are in the Phoenix annotation."""
    from phoenix.client import Client

    from tests.faithfulness.test_lettuce import write_tiny_lettuce

    model = write_tiny_lettuce(tmp_path / "lettuce", bias=(0.0, 3.0))  # flags every answer token
    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="rag-monitor-lettuce", score_interval_s=0.5,
                        lettucedetect_model_path=str(model), hhem_device="cpu")
    monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
    try:
        trace_id = run_query(monitor)
        monitor.feedback(trace_id, "thumbs_down")
        monitor.force_flush()
    finally:
        monitor.shutdown()
    wait_until(lambda: "lettucedetect" in agent.store.scores.for_trace(trace_id), timeout=60, what="the score")
    answer = agent.store.recent.get(trace_id).answer
    stored = agent.store.scores.for_trace(trace_id)["lettucedetect"]
    assert stored.label == "unsupported" and [(c["start"], c["end"]) for c in json.loads(stored.claims)] == [(0, len(answer))]
    client = Client(base_url=phoenix_server.url)
    root_span_id = agent.store.recent.get(trace_id).root_span_id

    def annotations():
        frame = client.spans.get_span_annotations_dataframe(span_ids=[root_span_id], project_identifier="rag-monitor-lettuce")
        return frame if len(frame) else None

    wait_until(lambda: annotations() is not None, timeout=30, interval=0.5, what="the annotation in Phoenix")
    row = annotations().iloc[0].to_dict()
    assert row["annotation_name"] == "faithfulness" and row["result.label"] == "unsupported"
    assert row["result.explanation"] == f"1 hallucinated span:\n- [0:{len(answer)}] {answer!r} ({json.loads(stored.claims)[0]['score']:.2f})"
    metadata = row.get("metadata")
    spans = metadata["hallucinated_spans"] if isinstance(metadata, dict) else row["metadata.hallucinated_spans"]
    assert [(s["start"], s["end"], s["text"]) for s in spans] == [(0, len(answer), answer)]
    assert row["annotator_kind"] == "LLM"


def test_above_the_budget_kept_traces_reach_phoenix_and_the_sampled_out_are_counted(start_agent, phoenix_server, tmp_path):
    """A budget no trace fits (0.5 spans/s): only the policies forward. Every sampled, complained,
    errored and shadow trace (and the production query a shadow pairs with) is in Phoenix, so are
    the ones a late thumbs-down pulled into review (held: whole; gone from the hold: rebuilt from the
    recent records); no other trace is, and the rest are counted sampled out."""
    from rag_monitor import semconv as sc
    from rag_monitor.collectors.otlp import STATUS_ERROR
    from tests.traces import body, child_spans, feedback_span, root_span, trace_id_of

    sampling = tmp_path / "sampling.yaml"
    sampling.write_text("base_rate: 0.2\nscore_rate: 0.3\nshadow_pair_rate: 0.0\n")
    agent = start_agent(phoenix_url=phoenix_server.url, phoenix_project="rag-monitor-tail", sampling_config=str(sampling),
                        forward_budget_spans_s=0.5, forward_hold_spans=3, forward_hold_s=3600.0)
    sampler = agent.agent.sampler
    ids = [trace_id_of(i, prefix=0x7A) for i in range(40)]
    expected, plain = set(), []
    for i, trace_id in enumerate(ids):
        spans = [*child_spans(trace_id), root_span(trace_id)]
        if i % 10 == 1:
            spans[0].status_code = STATUS_ERROR
        elif i % 10 == 2:
            spans.append(feedback_span(trace_id))
        elif i % 10 == 3:
            spans[-1] = root_span(trace_id, **{sc.RAG_SHADOW_OF: ids[i - 3], sc.RAG_VARIANT: "shadow"})
            expected.add(ids[i - 3])
        if i % 10 in (1, 2, 3) or sampler.uniform(trace_id) < 0.3:
            expected.add(trace_id)
        assert agent.post(body(spans))[0] == 200
    plain = [t for t in ids if t not in expected]
    assert len(plain) >= 3, "the seed left too few traces to sample out"
    # Late thumbs-down: for the last sampled-out trace (still held) and an earlier one (rebuilt).
    late = [plain[-1], plain[0]]
    for trace_id in late:
        assert agent.post(body([feedback_span(trace_id)]))[0] == 200
    expected.update(late)

    sent = lambda: agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sent"}) or 0  # noqa: E731

    def stored():
        frame = phoenix_spans(phoenix_server.url, "rag-monitor-tail")
        return frame if agent.agent.forwarder.pending() == 0 and len(frame) == sent() else None

    wait_until(lambda: stored() is not None and set(stored()["context.trace_id"]) >= expected, timeout=60,
               interval=1.0, what="the kept traces in Phoenix")
    frame = stored()
    assert set(frame["context.trace_id"]) == expected
    rebuilt = frame[frame["context.trace_id"] == plain[0]]  # gone from the hold: rebuilt, the original ids kept
    assert root_span(plain[0]).span_id in set(rebuilt["context.span_id"])
    assert all("rebuilt" in str(row) for row in rebuilt[rebuilt["name"] != sc.RAG_FEEDBACK_SPAN_NAME].to_dict("records"))
    traces = lambda reason: agent.metric("rag_agent_forwarded_traces_total", {"reason": reason}) or 0  # noqa: E731
    assert traces("budget") == 0 and traces("late_held") >= 1 and traces("late_rebuilt") >= 1
    # Every trace left out is counted; a trace rebuilt later was counted when it left the hold.
    held = agent.agent.tail_sampler.held_spans() // 3
    never_forwarded = len(set(ids) - expected)
    assert traces("sampled_out") + held == never_forwarded + traces("late_rebuilt")
    assert agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sampled_out"}) == 3 * traces("sampled_out")
