"""Span handles shared by a query and its stages: content capture, truncation, errors, ending.

A handle starts its span when it is created. Used in a ``with`` (or ``async with``) block it
times the block; used bare it records a zero-length span that ends with the query. Our own
failures are logged and swallowed; the app's exceptions are recorded on the span and re-raised
unchanged. Content the ``CaptureConfig`` hides is not sent at all (the root span lists what
was hidden in ``rag.content.hidden``).
"""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.trace import Status, StatusCode

from rag_monitor import semconv
from rag_monitor.sdk._logging import log
from rag_monitor.sdk.config import CaptureConfig

__all__ = ["Stage"]


_late = {"writes": 0}
_late_lock = threading.Lock()


def late_writes() -> int:
    """Writes that arrived on a query or stage after it ended (lost), in this process (``Monitor.stats()``)."""
    return _late["writes"]


def _count_late_write(what: str) -> None:
    with _late_lock:
        _late["writes"] += 1
    log.warning("late-write", "rag_monitor: %s set on a query or stage that already ended: lost. A streamed answer"
                " outlives the handler's query block: wrap the stream with q.stream(...) (docs/sdk.md, Streaming)", what)


def _record_error(span: Any, exc: BaseException) -> None:
    if isinstance(exc, Exception):
        span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class _SpanHandle:
    """Shared by the query and its stages: content capture, truncation, errors, ending."""

    __slots__ = ("_span", "_capture", "_truncated", "_entered", "_ended")

    def __init__(self, span: Any, capture: CaptureConfig) -> None:
        self._span = span
        self._capture = capture
        self._truncated: list[str] | None = None
        self._entered = False
        self._ended = False

    @property
    def is_recording(self) -> bool:
        """False when the span is not sampled: skip building expensive attributes."""
        return self._span.is_recording()

    def _clip(self, key: str, value: Any) -> str:
        text = value if isinstance(value, str) else str(value)
        limit = self._capture.max_string_length
        if limit and len(text) > limit:
            if self._truncated is None:
                self._truncated = []
            self._truncated.append(key)
            return text[:limit]
        return text

    def _text(self, attrs: dict[str, Any], key: str, value: Any, hidden: bool) -> None:
        if value is not None and not hidden:  # hidden content is never sent; the root says it was hidden
            attrs[key] = self._clip(key, value)

    def _set(self, attrs: dict[str, Any]) -> None:
        if self._ended:
            _count_late_write(", ".join(sorted(attrs))[:200])
            return
        if self._truncated:
            attrs[semconv.RAG_TRUNCATED] = tuple(self._truncated)
        self._span.set_attributes(attrs)

    def set_attribute(self, key: str, value: Any) -> None:
        """Set any attribute on this span (strings are truncated like the rest)."""
        try:
            attrs = {key: self._clip(key, value) if isinstance(value, str) else value}
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("set_attribute")

    def input(self, value: Any) -> None:
        """The stage's input (e.g. the query a rewrite stage received): ``input.value``."""
        try:
            attrs: dict[str, Any] = {}
            self._text(attrs, semconv.INPUT_VALUE, value, self._capture.hide_inputs)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("input")

    def output(self, value: Any) -> None:
        """The stage's output (e.g. the rewritten query): ``output.value``."""
        try:
            attrs: dict[str, Any] = {}
            self._text(attrs, semconv.OUTPUT_VALUE, value, self._capture.hide_outputs)
            self._set(attrs)
        except Exception:  # noqa: BLE001
            log.internal_error("output")

    def end(self, end_time_ns: int | None = None) -> None:
        """End the span now, or at ``end_time_ns`` when replaying recorded queries (a ``with`` block ends it on exit)."""
        if self._ended:
            return
        self._ended = True
        try:
            self._span.end(end_time=end_time_ns)
        except Exception:  # noqa: BLE001
            log.internal_error("end")

    def _end_unentered(self) -> None:
        """A bare (never entered) stage is an instant: it ends when it started."""
        if self._ended:
            return
        self._ended = True
        try:
            self._span.end(end_time=getattr(self._span, "start_time", None))
        except Exception:  # noqa: BLE001
            log.internal_error("end")

    def _exit(self, exc: BaseException | None) -> None:
        try:
            if exc is not None:
                _record_error(self._span, exc)
        except Exception:  # noqa: BLE001 - never replace the app's exception with ours
            log.internal_error("record error")
        self.end()


class Stage(_SpanHandle):
    """One pipeline stage's span; a context manager (sync and async) or a bare instant."""

    __slots__ = ()

    def __enter__(self) -> Stage:
        self._entered = True
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._exit(exc)
        return False

    async def __aenter__(self) -> Stage:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._exit(exc)
        return False
