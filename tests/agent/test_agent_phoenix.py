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
    wait_until(lambda: agent.store.get_recent(trace_id) is not None, timeout=10, what="ingest despite Phoenix down")
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
    wait_until(lambda: "support-v1" in agent.store.scores_for(trace_id), timeout=60, what="the score")
    stored = agent.store.scores_for(trace_id)["support-v1"]
    assert stored.label == "supported" and stored.threshold == SupportScorer.load().threshold
    assert json.loads(stored.claims) == [{"text": "Cancel under Settings > Billing.", "verdict": "supported",
                                          "score": 1.0, "evidence": "Cancel under Settings > Billing."}]
    client = Client(base_url=phoenix_server.url)
    root_span_id = agent.store.get_recent(trace_id).root_span_id

    def annotations():
        frame = client.spans.get_span_annotations_dataframe(span_ids=[root_span_id], project_identifier="rag-monitor-scores")
        return frame if len(frame) else None

    wait_until(lambda: annotations() is not None, timeout=30, interval=0.5, what="the annotation in Phoenix")
    frame = annotations()
    assert set(frame["annotation_name"]) == {"faithfulness"}
    assert frame["result.label"].iloc[0] == "supported"
    assert frame["result.explanation"].iloc[0] == "all 1 claims supported"

    item = agent.store.claim("alice", 60)
    agent.store.submit_review(item.id, "alice", {"faithful": "yes", "relevant_documents": ["doc-1"]})
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
    wait_until(lambda: "lettucedetect" in agent.store.scores_for(trace_id), timeout=60, what="the score")
    answer = agent.store.get_recent(trace_id).answer
    stored = agent.store.scores_for(trace_id)["lettucedetect"]
    assert stored.label == "unsupported" and [(c["start"], c["end"]) for c in json.loads(stored.claims)] == [(0, len(answer))]
    client = Client(base_url=phoenix_server.url)
    root_span_id = agent.store.get_recent(trace_id).root_span_id

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
