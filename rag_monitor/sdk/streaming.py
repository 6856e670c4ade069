"""Queries that outlive their block: a streamed answer, and work handed to a thread pool.

A web handler returns before its streamed body runs (FastAPI/Starlette ``StreamingResponse``),
so a query block in the handler would end before the answer exists. ``q.stream(chunks)`` wraps
the app's stream (sync or async iterable): while a stream is open the block's exit does not end
the query; the stream's end does. It records the first chunk as the first token, keeps the
joined text as the answer (unless the app called ``q.answer``) and ends the generate stage::

    with monitor.query(question) as q:
        docs = retrieve(q, question)
        g = q.generate(model="gpt-4o-mini")           # bare: the stream times it
        return StreamingResponse(q.stream(llm_stream(docs, g), generate=g))

A stream that stops early records why (``rag.query.cancel_reason``): ``client_disconnect`` when
the consumer went away (the body iterator closed, or cancelled after the handler returned, which
is what Starlette does on a disconnect; a server shutting down mid-stream reads the same),
``timeout`` for a ``TimeoutError``, ``cancelled`` for a cancellation inside the query block.

``current_query()`` is a context variable: asyncio tasks and ``asyncio.to_thread`` inherit it, an
executor's threads do not. ``submit(executor, fn, ...)`` (or ``bind(fn)``) runs ``fn`` in a copy
of the caller's context, so ``current_query()`` there is the caller's query.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from opentelemetry.trace import Status, StatusCode

from rag_monitor import semconv
from rag_monitor.sdk._logging import log
from rag_monitor.sdk.stages import GenerateStage

__all__ = ["QueryStream", "StreamingMethods", "bind", "cancel_reason", "submit"]

CLIENT_DISCONNECT = "client_disconnect"
TIMEOUT = "timeout"
CANCELLED = "cancelled"


def cancel_reason(exc: BaseException | None, detached: bool = False) -> str | None:
    """Why a query stopped early, from the exception that stopped it; None for an ordinary error.

    ``detached``: the query's block had already returned (only its response body was running).
    """
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return TIMEOUT
    if isinstance(exc, GeneratorExit):
        return CLIENT_DISCONNECT
    if isinstance(exc, asyncio.CancelledError):
        return CLIENT_DISCONNECT if detached else CANCELLED
    return None


def submit(executor: Executor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
    """``executor.submit(fn, ...)`` in a copy of the caller's context: ``current_query()`` follows."""
    return executor.submit(contextvars.copy_context().run, fn, *args, **kwargs)


def bind(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` bound to a copy of the caller's context (``loop.run_in_executor(None, bind(fn))``, ``executor.map``)."""
    context = contextvars.copy_context()
    return lambda *args, **kwargs: context.copy().run(fn, *args, **kwargs)


class StreamingMethods:
    """``Query``'s streaming and cancellation methods (its slots hold the state)."""

    __slots__ = ()

    def stream(self, chunks: Any, generate: Any = None, answer: bool = True) -> Any:
        """Wrap the answer's chunks (sync or async iterable) for the response body.

        The query stays open until the stream ends, even past its ``with`` block; the first
        chunk is ``generate``'s first token (a bare ``q.generate()``: the stream times it), the
        joined chunks are the answer unless ``q.answer`` was called (``answer=False``: never).
        """
        try:
            if self._ended:
                log.warning("stream-after-end", "rag_monitor: q.stream() on an ended query: not recorded")
                return chunks
            if isinstance(generate, GenerateStage):
                generate._entered = True  # ended by the stream, not as an instant
            self._streams += 1
            return QueryStream.wrap(self, chunks, generate if isinstance(generate, GenerateStage) else None, answer)
        except Exception:  # noqa: BLE001
            log.internal_error("stream")
            return chunks

    def cancel(self, reason: str = "cancelled") -> None:
        """Say why the query stops early (``client_disconnect``, ``timeout``, ``cancelled``, or the app's word)."""
        self._cancel_reason = None
        self._mark_cancelled(str(reason)[:64])

    def _mark_cancelled(self, reason: str | None) -> None:
        if reason is None or self._cancel_reason is not None or self._ended:
            return
        self._cancel_reason = reason
        try:
            self._span.set_attribute(semconv.RAG_CANCEL_REASON, reason)
        except Exception:  # noqa: BLE001
            log.internal_error("cancel reason")

    def _stream_answer(self, text: str) -> None:
        if not self._answered:
            self.answer(text)

    def _stream_done(self, generate: GenerateStage | None, exc: BaseException | None) -> None:
        """A stream ended (``exc`` None: exhausted); the query ends with the last one once its block has."""
        self._streams -= 1
        self._mark_cancelled(cancel_reason(exc, detached=self._block_done))
        if generate is not None and not generate._ended:
            generate._exit(exc if exc is not None and not isinstance(exc, GeneratorExit) else None)
        if exc is not None and self._cancel_reason is not None:
            try:
                self._span.set_status(Status(StatusCode.ERROR, f"cancelled: {self._cancel_reason}"))
            except Exception:  # noqa: BLE001
                log.internal_error("stream status")
        if self._block_done and not self._streams:
            self._exit(exc if exc is not None and not isinstance(exc, GeneratorExit) else None)



class QueryStream:
    """The app's chunks, passed through unchanged; the query ends when they do (``Query.stream``).

    ``QueryStream.wrap`` picks the sync or async form: a server decides how to iterate a body by
    what it offers (Starlette: ``AsyncIterable`` or not).
    """

    def __init__(self, query: Any, chunks: Any, generate: Any, keep_answer: bool) -> None:
        self._query = query
        self._chunks = chunks
        self._generate = generate
        self._keep_answer = keep_answer
        self._parts: list[str] = []
        self._iterator: Any = None
        self._chunks_seen = 0
        self._done = False

    @staticmethod
    def wrap(query: Any, chunks: Any, generate: Any, keep_answer: bool) -> QueryStream:
        cls = AsyncQueryStream if hasattr(chunks, "__aiter__") else SyncQueryStream
        return cls(query, chunks, generate, keep_answer)

    def __del__(self) -> None:
        # A body dropped unfinished, or never started (a server drops it when the client leaves).
        if not self._done:
            self._finish(GeneratorExit())

    def _chunk(self, chunk: Any) -> None:
        try:
            self._chunks_seen += 1
            if self._chunks_seen == 1 and self._generate is not None:
                self._generate.first_token()
            if self._keep_answer:
                self._parts.append(chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else str(chunk))
        except Exception:  # noqa: BLE001
            log.internal_error("stream chunk")

    def _finish(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self._keep_answer and self._parts:
                self._query._stream_answer("".join(self._parts))
        except Exception:  # noqa: BLE001
            log.internal_error("stream answer")
        self._query._stream_done(self._generate, exc)


class SyncQueryStream(QueryStream):
    def __iter__(self) -> SyncQueryStream:
        if self._iterator is None:
            self._iterator = iter(self._chunks)
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        try:
            chunk = next(self.__iter__()._iterator)
        except StopIteration:
            self._finish(None)
            raise
        except BaseException as exc:
            self._finish(exc)
            raise
        self._chunk(chunk)
        return chunk

    def close(self) -> None:
        """The consumer stopped early (a closed response body): the query ends as a disconnect."""
        if not self._done:
            getattr(self._iterator, "close", lambda: None)()
            self._finish(GeneratorExit())


class AsyncQueryStream(QueryStream):
    def __aiter__(self) -> AsyncQueryStream:
        if self._iterator is None:
            self._iterator = self._chunks.__aiter__()
        return self

    async def __anext__(self) -> Any:
        if self._done:
            raise StopAsyncIteration
        try:
            chunk = await self.__aiter__()._iterator.__anext__()
        except StopAsyncIteration:
            self._finish(None)
            raise
        except BaseException as exc:
            self._finish(exc)
            raise
        self._chunk(chunk)
        return chunk

    async def aclose(self) -> None:
        """The consumer stopped early: the query ends as a disconnect."""
        if not self._done:
            closer = getattr(self._iterator, "aclose", None)
            if closer is not None:
                await closer()
            self._finish(GeneratorExit())
