"""The SDK never breaks the app: our failures are swallowed, the app's are recorded and re-raised."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import StatusCode

import rag_monitor
from rag_monitor import semconv
from rag_monitor.sdk._logging import RateLimitedLogger, log
from rag_monitor.sdk.noop import NoopQuery


class AppError(Exception):
    pass


def test_app_exception_is_recorded_and_reraised_unchanged(monitor, exporter):
    error = AppError("vector store timed out")
    with pytest.raises(AppError) as raised:
        with monitor.query("q") as q:
            with q.retrieve():
                raise error
    assert raised.value is error
    retrieve, root = exporter.get_finished_spans()
    for span in (retrieve, root):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "AppError: vector store timed out"
        assert span.events[0].name == "exception"
        assert span.events[0].attributes["exception.type"].endswith("AppError")


async def test_app_exception_in_async_stage_is_reraised(monitor, exporter):
    error = AppError("llm 500")
    with pytest.raises(AppError) as raised:
        async with monitor.query("q") as q:
            async with q.generate(model="m"):
                raise error
    assert raised.value is error
    assert all(s.status.status_code is StatusCode.ERROR for s in exporter.get_finished_spans())


class RaisingExporter(SpanExporter):
    def export(self, spans):
        raise RuntimeError("exporter bug")

    def shutdown(self):
        pass


@pytest.mark.parametrize("batch", [False, True])
def test_exporter_that_raises_never_reaches_the_app(batch, caplog):
    log.reset()
    m = rag_monitor.init(service_name="s", span_exporter=RaisingExporter(), batch=batch)
    with caplog.at_level(logging.WARNING, logger="rag_monitor.sdk"):
        with m.query("q") as q:
            with q.retrieve():
                pass
        m.force_flush()
    assert m.stats().failed == 2
    assert m.stats().exported == 0
    assert any("exporter raised" in r.getMessage() for r in caplog.records)
    m.shutdown()


class Junk:
    """Not a document: no content, no id."""


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str for you")


def test_junk_documents_and_arguments_never_raise(monitor, exporter):
    with monitor.query("q") as q:
        with q.retrieve() as r:
            r.documents([Junk(), {"id": "ok", "score": "not a number"}, 42, {"id": "good", "score": "0.5"}])
            r.documents(None)  # not iterable
        with q.rerank(model="m", top_k="three") as rr:
            rr.documents([{"id": "x", "metadata": {"when": object()}}])
        q.filter(kind="relevance", candidates_in="many")
        q.embed(model="e", vectors=[["not", "floats"]])
        with q.generate(model="m") as g:
            g.tokens(prompt="lots")
        q.context(document_ids=5)
        q.answer(Unprintable(), confidence="high")
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    assert set(by_name) == {"rag.query", "retrieve", "rerank", "filter", "embed", "generate", "context"}
    retrieved = dict(by_name["retrieve"].attributes)
    # Junk skipped; the good document keeps its place after the junk ones.
    assert retrieved["retrieval.documents.0.document.id"] == "good"
    assert retrieved["retrieval.documents.0.document.score"] == 0.5
    assert by_name["rerank"].attributes["reranker.output_documents.0.document.metadata"].startswith('{"when": "<object')
    assert semconv.RERANKER_TOP_K not in by_name["rerank"].attributes
    assert by_name["filter"].attributes[semconv.RAG_FILTER_KIND] == "relevance"


def test_internal_failure_yields_noop_handles_and_the_app_runs(monitor, monkeypatch):
    def broken_start_span(*args, **kwargs):
        raise RuntimeError("SDK bug")

    monkeypatch.setattr(monitor._tracer, "start_span", broken_start_span)
    ran = []
    with monitor.query("q") as q:
        assert isinstance(q, NoopQuery)
        with q.retrieve() as r:
            r.documents([{"id": "d"}])
            ran.append("retrieve")
        q.answer("a")
    monitor.feedback("0" * 31 + "1", "thumbs_up")
    assert ran == ["retrieve"]


def test_stage_failure_inside_a_real_query_yields_a_noop_stage(monitor, exporter, monkeypatch):
    with monitor.query("q") as q:
        monkeypatch.setattr(q, "_tracer", None)  # the next start_span raises AttributeError
        with q.retrieve() as r:
            r.documents(["x"])
    assert [s.name for s in exporter.get_finished_spans()] == ["rag.query"]


def test_rate_limited_logger_says_each_problem_once_per_interval(caplog):
    limited = RateLimitedLogger(logging.getLogger("test.ratelimit"), interval_s=3600)
    with caplog.at_level(logging.WARNING, logger="test.ratelimit"):
        for _ in range(100):
            limited.warning("drop", "dropped a span")
        limited.warning("other", "another problem")
    assert [r.getMessage() for r in caplog.records] == ["dropped a span", "another problem"]


def test_exporter_logs_from_the_export_thread_are_rate_limited_only_there():
    from rag_monitor.sdk._logging import EXPORT_THREAD_NAME, ExportThreadRateLimit

    limit = ExportThreadRateLimit(interval_s=3600)

    def record(thread_name: str) -> logging.LogRecord:
        r = logging.LogRecord("otlp", logging.WARNING, __file__, 1, "Failed to export %s batch", ("spans",), None)
        r.threadName = thread_name
        return r

    assert limit.filter(record(EXPORT_THREAD_NAME))
    assert not limit.filter(record(EXPORT_THREAD_NAME))
    assert limit.filter(record("MainThread"))  # the app's own exporter: untouched
    assert limit.filter(record("MainThread"))
