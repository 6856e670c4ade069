"""Content capture: hiding and truncation, and configuration precedence."""

from __future__ import annotations

import pytest

import rag_monitor
from rag_monitor import semconv
from rag_monitor.sdk import CaptureConfig, ExportConfig
from rag_monitor.sdk.config import REDACTED


def traced(exporter, capture):
    monitor = rag_monitor.init(service_name="s", span_exporter=exporter, batch=False, capture=capture)
    with monitor.query("what is the refund policy for annual plans?") as q:
        q.filter(kind="relevance", predicate="locale IN ('en-US', 'en-GB')", candidates_in=3, candidates_out=2)
        with q.stage("rewrite") as rw:
            rw.output("refund policy annual")
        with q.retrieve() as r:
            r.documents([{"id": "d1", "content": "Annual plans are refunded pro rata.", "metadata": {"k": "v"}}])
        q.embed(model="e", vectors=[[0.5, 0.25]], texts=["refund policy annual"])
        q.answer("Pro rata refunds apply to annual plans.")
    monitor.feedback(q.trace_id, "thumbs_down", reason="the answer was far too long to read")
    monitor.shutdown()
    return {s.name: dict(s.attributes) for s in exporter.get_finished_spans()}


def test_truncation_cuts_strings_and_names_the_keys(exporter):
    spans = traced(exporter, CaptureConfig(max_string_length=10))
    root = spans["rag.query"]
    assert root[semconv.INPUT_VALUE] == "what is th"
    assert root[semconv.OUTPUT_VALUE] == "Pro rata r"
    assert root[semconv.RAG_TRUNCATED] == (semconv.INPUT_VALUE, semconv.OUTPUT_VALUE)
    retrieve = spans["retrieve"]
    assert retrieve["retrieval.documents.0.document.content"] == "Annual pla"
    assert retrieve["retrieval.documents.0.document.id"] == "d1"
    assert retrieve[semconv.RAG_TRUNCATED] == ("retrieval.documents.0.document.content",)
    assert spans["rewrite"][semconv.RAG_TRUNCATED] == (semconv.OUTPUT_VALUE,)
    assert spans["embed"]["embedding.embeddings.0.embedding.text"] == "refund pol"
    assert spans["rag.feedback"][semconv.RAG_FEEDBACK_REASON] == "the answer"
    assert spans["filter"][semconv.RAG_FILTER_PREDICATE] == "locale IN "
    assert spans["filter"][semconv.RAG_TRUNCATED] == (semconv.RAG_FILTER_PREDICATE,)


def test_hiding_leaves_content_out_and_marks_it_hidden(exporter):
    capture = CaptureConfig(
        hide_inputs=True,
        hide_outputs=True,
        hide_document_content=True,
        hide_embedding_vectors=True,
        hide_embedding_text=True,
    )
    spans = traced(exporter, capture)
    root = spans["rag.query"]
    # hidden content is not sent at all, and the root says what was hidden (no placeholder text)
    assert root[semconv.RAG_CONTENT_HIDDEN] == ("query", "answer", "documents")
    assert semconv.INPUT_VALUE not in root and semconv.OUTPUT_VALUE not in root
    assert semconv.OUTPUT_VALUE not in spans["rewrite"]
    retrieve = spans["retrieve"]
    assert "retrieval.documents.0.document.content" not in retrieve
    assert retrieve["retrieval.documents.0.document.id"] == "d1"  # ids are not content
    assert "embedding.embeddings.0.embedding.vector" not in spans["embed"]
    assert "embedding.embeddings.0.embedding.text" not in spans["embed"]
    assert semconv.RAG_TRUNCATED not in root
    assert all(REDACTED not in str(attrs) for attrs in spans.values())


def test_capture_precedence_argument_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("RAG_MONITOR_MAX_STRING_LENGTH", raising=False)
    monkeypatch.delenv("RAG_MONITOR_HIDE_INPUTS", raising=False)
    assert CaptureConfig().max_string_length == 8192
    assert CaptureConfig().hide_inputs is False
    monkeypatch.setenv("RAG_MONITOR_MAX_STRING_LENGTH", "100")
    monkeypatch.setenv("RAG_MONITOR_HIDE_INPUTS", "yes")
    assert CaptureConfig().max_string_length == 100
    assert CaptureConfig().hide_inputs is True
    assert CaptureConfig(max_string_length=7, hide_inputs=False) == CaptureConfig(
        max_string_length=7, hide_inputs=False
    )
    assert CaptureConfig(max_string_length=7).max_string_length == 7
    assert CaptureConfig(hide_inputs=False).hide_inputs is False


def test_bad_values_raise_with_the_value(monkeypatch):
    monkeypatch.setenv("RAG_MONITOR_MAX_STRING_LENGTH", "lots")
    with pytest.raises(ValueError, match="RAG_MONITOR_MAX_STRING_LENGTH='lots'"):
        CaptureConfig()
    with pytest.raises(ValueError, match="-1"):
        CaptureConfig(max_string_length=-1)
    with pytest.raises(ValueError, match="'agent:4318'"):
        ExportConfig(endpoint="agent:4318")


def test_endpoint_and_token_resolution(monkeypatch):
    for name in ("RAG_MONITOR_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "RAG_MONITOR_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert ExportConfig().traces_url == "http://127.0.0.1:4318/v1/traces"
    assert ExportConfig().headers == {}
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/")
    assert ExportConfig().traces_url == "http://otel:4318/v1/traces"
    monkeypatch.setenv("RAG_MONITOR_ENDPOINT", "https://agent.internal:4318/v1/traces")
    assert ExportConfig().traces_url == "https://agent.internal:4318/v1/traces"
    assert ExportConfig(endpoint="http://arg:1").traces_url == "http://arg:1/v1/traces"
    monkeypatch.setenv("RAG_MONITOR_TOKEN", "s3cret")
    assert ExportConfig().headers == {"Authorization": "Bearer s3cret"}
    assert ExportConfig(token="t").headers == {"Authorization": "Bearer t"}
