"""Handles that do nothing: what a disabled monitor (or a failed SDK call) hands the app.

They accept every call the real handles accept, so app code never branches on whether
monitoring is on. Shared singletons: a disabled query costs one attribute check.
"""

from __future__ import annotations

from typing import Any

from rag_monitor import semconv


def check_filter_kind(kind: str) -> None:
    """Raise ValueError for a filter kind outside ``semconv.FILTER_KINDS`` (a bug in the app)."""
    if kind not in semconv.FILTER_KINDS:
        raise ValueError(f"filter kind={kind!r}: expected one of {semconv.FILTER_KINDS}")

def check_cache_kind(kind: str) -> None:
    """Raise ValueError for a cache kind outside ``semconv.CACHE_KINDS``."""
    if kind not in semconv.CACHE_KINDS:
        raise ValueError(f"cache kind={kind!r}: expected one of {semconv.CACHE_KINDS}")


INVALID_TRACE_ID = "0" * 32
"""The trace id of a no-op query; ``Monitor.feedback`` ignores it."""


class NoopStage:
    """A stage handle that records nothing."""

    __slots__ = ()

    def __enter__(self) -> NoopStage:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        return False

    async def __aenter__(self) -> NoopStage:
        return self

    async def __aexit__(self, *exc_info: object) -> bool:
        return False

    def _ignore(self, *args: Any, **kwargs: Any) -> None:
        return None

    input = output = set_attribute = end = _ignore
    documents = input_documents = excluded_documents = result = tokens = first_token = response_model = _ignore

    @property
    def is_recording(self) -> bool:
        return False


NOOP_STAGE = NoopStage()


class NoopQuery(NoopStage):
    """A query handle that records nothing; its stages are ``NOOP_STAGE``."""

    __slots__ = ()

    trace_id = INVALID_TRACE_ID
    span_id = "0" * 16

    def __enter__(self) -> NoopQuery:
        return self

    async def __aenter__(self) -> NoopQuery:
        return self

    def _stage(self, *args: Any, **kwargs: Any) -> NoopStage:
        return NOOP_STAGE

    stage = retrieve = rerank = embed = context = generate = _stage

    def filter(self, kind: str, *args: Any, **kwargs: Any) -> NoopStage:
        # Validated even when disabled, so the bug shows up where monitoring is off (dev).
        check_filter_kind(kind)
        return NOOP_STAGE

    def cache(self, kind: str, hit: bool, count: int = 1) -> None:
        check_cache_kind(kind)
    answer = refuse = shadow = cancel = NoopStage._ignore

    def stream(self, chunks: Any, *args: Any, **kwargs: Any) -> Any:
        """The chunks unchanged: nothing to record."""
        return chunks


NOOP_QUERY = NoopQuery()
