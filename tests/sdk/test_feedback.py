"""Feedback lands under the query's root span, sent from anywhere that knows the trace id."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from rag_monitor import semconv


def test_feedback_parent_is_the_real_root_span(monitor, exporter):
    with monitor.query("How do I cancel?") as q:
        with q.retrieve():
            pass
    monitor.feedback(q.trace_id, "thumbs_down", reason="wrong", value=1)
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == semconv.RAG_QUERY_SPAN_NAME)
    feedback = next(s for s in spans if s.name == semconv.RAG_FEEDBACK_SPAN_NAME)
    assert feedback.context.trace_id == root.context.trace_id
    assert feedback.parent.span_id == root.context.span_id
    assert feedback.parent.is_remote
    assert dict(feedback.attributes) == {
        semconv.RAG_FEEDBACK_KIND: "thumbs_down",
        semconv.RAG_FEEDBACK_REASON: "wrong",
        semconv.RAG_FEEDBACK_VALUE: 1,
    }


def test_feedback_from_another_monitor_with_only_the_trace_id(monitor, exporter):
    """Another process (here: another monitor, its own provider) knows only the id, as an int."""
    with monitor.query("q") as q:
        pass
    root = exporter.get_finished_spans()[0]
    elsewhere_exporter = InMemorySpanExporter()
    elsewhere = rag_monitor.init(service_name="feedback-api", span_exporter=elsewhere_exporter, batch=False)
    try:
        elsewhere.feedback(int(q.trace_id, 16), "dwell", value=12.5)
        elsewhere.feedback(q, "copy")  # the handle itself works too
    finally:
        elsewhere.shutdown()
    dwell, copy = elsewhere_exporter.get_finished_spans()
    for span in (dwell, copy):
        assert span.context.trace_id == root.context.trace_id
        assert span.parent.span_id == root.context.span_id
    assert dwell.attributes[semconv.RAG_FEEDBACK_VALUE] == 12.5


def test_unknown_kind_and_bad_trace_id_raise_with_the_values(monitor):
    with pytest.raises(ValueError, match="'thumbs_sideways'"):
        monitor.feedback("0" * 31 + "1", "thumbs_sideways")
    with pytest.raises(ValueError, match="'xyz'"):
        monitor.feedback("xyz", "thumbs_up")
    with pytest.raises(ValueError, match="'g"):
        monitor.feedback("g" * 32, "thumbs_up")
    with pytest.raises(ValueError):
        monitor.feedback(1 << 128, "thumbs_up")


def test_feedback_for_a_noop_query_is_ignored(monitor, exporter):
    disabled = rag_monitor.init(service_name="x", enabled=False)
    with disabled.query("q") as q:
        pass
    monitor.feedback(q.trace_id, "thumbs_up")
    monitor.feedback(q, "thumbs_up")
    assert exporter.get_finished_spans() == ()


def test_citation_click_share_and_edit_carry_their_payload_under_openinference_names(monitor, exporter):
    with monitor.query("What is the refund window?") as q:
        pass
    monitor.citation_click(q, "kb-refunds")
    monitor.share(q.trace_id, "export")
    monitor.edit(q, "Refunds within 14 days.")
    click, share, edit = (s for s in exporter.get_finished_spans() if s.name == semconv.RAG_FEEDBACK_SPAN_NAME)
    root = next(s for s in exporter.get_finished_spans() if s.name == semconv.RAG_QUERY_SPAN_NAME)
    assert all(s.parent.span_id == root.context.span_id for s in (click, share, edit))
    assert dict(click.attributes) == {semconv.RAG_FEEDBACK_KIND: "citation_click", semconv.DOCUMENT_ID: "kb-refunds"}
    assert dict(share.attributes) == {semconv.RAG_FEEDBACK_KIND: "share", semconv.RAG_FEEDBACK_VALUE: "export"}
    assert dict(edit.attributes) == {semconv.RAG_FEEDBACK_KIND: "edit", semconv.OUTPUT_VALUE: "Refunds within 14 days."}


def test_an_edit_follows_the_capture_config_and_bad_arguments_raise(exporter):
    from rag_monitor.sdk import CaptureConfig

    hidden = rag_monitor.init(service_name="x", span_exporter=exporter, batch=False,
                              capture=CaptureConfig(hide_outputs=True))
    short = rag_monitor.init(service_name="y", span_exporter=exporter, batch=False,
                             capture=CaptureConfig(max_string_length=5))
    try:
        with hidden.query("q") as q:
            pass
        hidden.edit(q, "my private correction")
        short.edit(q, "a long correction")
        with pytest.raises(ValueError, match="document_id=''"):
            hidden.citation_click(q, "")
        with pytest.raises(ValueError, match="channel=None"):
            hidden.share(q, None)
        with pytest.raises(ValueError, match="got bytes"):
            hidden.edit(q, b"bytes")
    finally:
        hidden.shutdown()
        short.shutdown()
    hidden_edit, short_edit = (s for s in exporter.get_finished_spans() if s.name == semconv.RAG_FEEDBACK_SPAN_NAME)
    assert dict(hidden_edit.attributes) == {semconv.RAG_FEEDBACK_KIND: "edit"}  # counted, text not sent
    assert short_edit.attributes[semconv.OUTPUT_VALUE] == "a lon"
