"""Disabled: every call is a cheap no-op and no TracerProvider exists."""

from __future__ import annotations

import pytest

import rag_monitor
from rag_monitor.sdk.noop import NOOP_QUERY, NOOP_STAGE


def exercise(monitor):
    with monitor.query("q", session_id="s") as q:
        with q.stage("rewrite"):
            pass
        q.filter(kind="relevance", predicate="p", candidates_in=1, candidates_out=1)
        with q.retrieve() as r:
            r.documents([{"id": "d"}])
        with q.rerank(model="m", top_k=1) as rr:
            rr.documents([])
            rr.input_documents([])
        q.embed(model="e", vectors=[[0.0]])
        q.context(document_ids=["d"])
        with q.generate(model="g") as g:
            g.tokens(prompt=1, completion=1)
            g.first_token()
        q.answer("a", citations=["d"], confidence=0.5)
        q.refuse("r")
    monitor.feedback(q.trace_id, "thumbs_down")
    return q


def test_disabled_by_argument():
    monitor = rag_monitor.init(service_name="s", enabled=False)
    q = exercise(monitor)
    assert q is NOOP_QUERY
    assert q.retrieve() is NOOP_STAGE
    assert monitor.tracer_provider is None
    assert monitor.stats().exported == 0
    assert monitor.force_flush()
    monitor.shutdown()


@pytest.mark.parametrize("value", ["1", "true", "TRUE"])
def test_disabled_by_environment(monkeypatch, value):
    monkeypatch.setenv("RAG_MONITOR_DISABLED", value)
    monitor = rag_monitor.init(service_name="s")
    assert not monitor.enabled
    assert exercise(monitor) is NOOP_QUERY
    assert monitor.tracer_provider is None


def test_argument_beats_environment(monkeypatch, exporter):
    monkeypatch.setenv("RAG_MONITOR_DISABLED", "1")
    monitor = rag_monitor.init(service_name="s", enabled=True, span_exporter=exporter, batch=False)
    exercise(monitor)
    assert len(exporter.get_finished_spans()) == 9
    monitor.shutdown()


def test_bad_environment_value_says_what_is_wrong(monkeypatch):
    monkeypatch.setenv("RAG_MONITOR_DISABLED", "maybe")
    with pytest.raises(ValueError, match="RAG_MONITOR_DISABLED='maybe'"):
        rag_monitor.init(service_name="s")


def test_developer_errors_still_raise_when_disabled():
    monitor = rag_monitor.init(service_name="s", enabled=False)
    with pytest.raises(ValueError, match="'thumbs'"):
        monitor.feedback("0" * 31 + "1", "thumbs")
    with monitor.query("q") as q, pytest.raises(ValueError, match="'recency'"):
        q.filter(kind="recency")


def test_app_exception_passes_through_noop_handles():
    monitor = rag_monitor.init(service_name="s", enabled=False)
    error = KeyError("k")
    with pytest.raises(KeyError) as raised:
        with monitor.query("q") as q, q.retrieve():
            raise error
    assert raised.value is error
