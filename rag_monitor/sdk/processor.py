"""Span processors that never block or break the app, and count what they lose.

``BoundedBatchSpanProcessor`` follows OTel's ``BatchSpanProcessor``: ending a span is an
O(1) append to a bounded deque; a background thread exports batches; a full queue drops the
oldest span and counts it. ``SynchronousSpanProcessor`` exports each span as it ends (tests
read spans deterministically with it). Both count spans exported, dropped and failed::

    processor = BoundedBatchSpanProcessor(exporter, max_queue_size=2048)
    provider.add_span_processor(processor)
    processor.stats()   # ExportStats(exported=..., dropped=..., failed=..., queued=...)
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from dataclasses import dataclass

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rag_monitor.sdk._logging import EXPORT_THREAD_NAME, log


@dataclass(frozen=True)
class ExportStats:
    """Span counts since the processor started."""

    exported: int = 0
    """Accepted by the exporter."""
    dropped: int = 0
    """Never handed to the exporter: the queue was full, or the processor was shut down."""
    failed: int = 0
    """Handed to the exporter, which failed or raised (agent down, timeout, bad response)."""
    queued: int = 0
    """Waiting in the queue now."""
    late_writes: int = 0
    """Attributes set on a query or stage after it ended, lost (process-wide): a streamed answer
    that outlived its query block, without ``q.stream(...)``."""


class _CountingProcessor(SpanProcessor):
    """Exports a batch and counts the outcome; an exporter's exception is logged, never raised."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self._exported = 0
        self._failed = 0
        self._dropped = 0
        self._count_lock = threading.Lock()
        self._shutdown = False

    def _export(self, batch: list[ReadableSpan]) -> bool:
        # The exporter's own HTTP calls must not be traced by the app's instrumentation.
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            result = self._exporter.export(batch)
        except Exception:  # noqa: BLE001 - an exporter bug must never reach the app
            log.warning("export-raised", "rag_monitor: span exporter raised; %d spans lost", len(batch), exc_info=True)
            result = SpanExportResult.FAILURE
        finally:
            detach(token)
        with self._count_lock:
            if result is SpanExportResult.SUCCESS:
                self._exported += len(batch)
            else:
                self._failed += len(batch)
        if result is not SpanExportResult.SUCCESS:
            log.warning("export-failed", "rag_monitor: exporting %d spans failed (is the agent up?)", len(batch))
            return False
        return True

    def _count_drop(self, reason: str) -> None:
        with self._count_lock:
            self._dropped += 1
        log.warning(f"drop:{reason}", "rag_monitor: span dropped: %s", reason)

    def _queued(self) -> int:
        return 0

    def stats(self) -> ExportStats:
        with self._count_lock:
            return ExportStats(self._exported, self._dropped, self._failed, self._queued())


class SynchronousSpanProcessor(_CountingProcessor):
    """Exports every span as it ends, on the app's thread: for tests and debugging only."""

    def on_end(self, span: ReadableSpan) -> None:
        if self._shutdown:
            self._count_drop("processor is shut down")
            return
        if span.context.trace_flags.sampled:
            self._export([span])

    def shutdown(self, timeout_millis: int = 30000) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._exporter.shutdown()
        except Exception:  # noqa: BLE001
            log.internal_error("exporter shutdown")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class BoundedBatchSpanProcessor(_CountingProcessor):
    """Queue spans (bounded, O(1)), export them in batches on a background thread.

    After a failed export the worker backs off (doubling from ``schedule_delay_s`` up to
    ``max_backoff_s``): with the agent down it does not serialise and send every batch
    only to fail, so the app's threads keep the CPU; meanwhile the queue fills and the
    oldest spans are dropped, counted.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        max_queue_size: int = 2048,
        max_export_batch_size: int = 512,
        schedule_delay_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        super().__init__(exporter)
        if max_queue_size < 1 or max_export_batch_size < 1 or schedule_delay_s <= 0:
            raise ValueError(
                f"max_queue_size={max_queue_size!r}, max_export_batch_size={max_export_batch_size!r},"
                f" schedule_delay_s={schedule_delay_s!r}: all must be positive"
            )
        self._max_queue_size = max_queue_size
        self._batch_size = min(max_export_batch_size, max_queue_size)
        self._schedule_delay_s = schedule_delay_s
        self._max_backoff_s = max(max_backoff_s, schedule_delay_s)
        self._backoff_s = 0.0
        # A deque with maxlen: append is atomic and drops the oldest span when full.
        self._queue: collections.deque[ReadableSpan] = collections.deque(maxlen=max_queue_size)
        self._export_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._start_worker()
        if hasattr(os, "register_at_fork"):
            weak_self = weakref.ref(self)

            def _after_fork_in_child() -> None:
                processor = weak_self()
                if processor is not None:
                    processor._reinit_after_fork()

            os.register_at_fork(after_in_child=_after_fork_in_child)

    def _start_worker(self) -> None:
        self._worker = threading.Thread(target=self._run, name=EXPORT_THREAD_NAME, daemon=True)
        self._worker.start()

    def _reinit_after_fork(self) -> None:
        # The parent's worker thread does not exist in the child; its queued spans are the parent's.
        self._export_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._queue.clear()
        self._start_worker()

    def on_end(self, span: ReadableSpan) -> None:
        if self._shutdown:
            self._count_drop("processor is shut down")
            return
        if not span.context.trace_flags.sampled:
            return
        queue = self._queue
        if len(queue) >= self._max_queue_size:
            self._count_drop("export queue full (agent slow or down?)")
        queue.append(span)
        if len(queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._shutdown:
            if self._backoff_s:
                # The agent failed us: wait it out (shutdown interrupts), ignoring full batches.
                if self._stop.wait(self._backoff_s):
                    break
            else:
                # Woken early by a full batch; otherwise a partial batch goes out every tick.
                self._wake.wait(self._schedule_delay_s)
                self._wake.clear()
            if self._drain(deadline=None, stop_on_failure=True):
                self._backoff_s = 0.0
            else:
                self._backoff_s = min(max(self._backoff_s * 2, self._schedule_delay_s), self._max_backoff_s)
        # Last export at shutdown: one failure ends it, so a down agent delays exit by one timeout.
        self._drain(deadline=None, stop_on_failure=True)

    def _drain(self, deadline: float | None, stop_on_failure: bool = False) -> bool:
        """Export what is queued, a batch at a time; True when the queue was emptied without failure."""
        with self._export_lock:
            queue = self._queue
            ok = True
            while queue:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                batch = []
                try:
                    for _ in range(self._batch_size):
                        batch.append(queue.popleft())
                except IndexError:  # another thread's append/pop raced us: the queue is empty
                    pass
                if batch and not self._export(batch):
                    ok = False
                    if stop_on_failure:
                        return False
            return ok

    def _queued(self) -> int:
        return len(self._queue)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued now, on the caller's thread; False on timeout, failure or after shutdown."""
        if self._shutdown:
            return False
        return self._drain(deadline=time.monotonic() + timeout_millis / 1000)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Stop accepting spans, export what is queued within the timeout, shut the exporter down."""
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        self._stop.set()
        self._worker.join(timeout_millis / 1000)
        left = len(self._queue)
        if left:
            self._queue.clear()
            with self._count_lock:
                self._dropped += left
            log.warning("drop:shutdown", "rag_monitor: %d spans not exported before shutdown", left)
        try:
            self._exporter.shutdown()
        except Exception:  # noqa: BLE001
            log.internal_error("exporter shutdown")
