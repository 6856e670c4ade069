"""The ingest fan-out: after the store write, each batch goes to every enabled sink, each behind
its own bounded queue and worker thread (the OTel Collector's ``fanoutconsumer`` + queued exporter).

``publish`` is O(1) per sink on the request path: an append to the sink's queue, or, when the
queue holds ``max_items`` items already, a drop counted in ``rag_agent_sink_dropped_total{sink}``.
The sink's worker hands each batch to its ``consume``; a batch whose ``consume`` raises is lost,
counted the same way, and the sink reports itself degraded until a batch goes through again. So
a slow or failing sink never slows the request path or another sink. Items are records (spans
for the ``forwarder`` sink); ``rag_agent_sink_queue_depth{sink}`` is the items waiting.

``settle(timeout_s)`` waits until every queue is empty and every worker idle: what tests and
benchmarks call before reading the metrics the sinks move.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_monitor.agent.component import DEGRADED, HEALTHY, Component, Health
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.record import Feedback, QueryRecord

log = logging.getLogger(__name__)

SINK_QUEUE_ITEMS = 20_000
"""Default bound of a sink's queue, in records (spans for the forwarder)."""
DEGRADED_AFTER_DROP_S = 60.0
"""A sink that dropped within this long reports degraded."""


@dataclass
class IngestBatch:
    """What one request (or one expiry run) stored first: only these reach the counting sinks."""

    records: list[QueryRecord] = field(default_factory=list)
    """Newly stored records, in the order their queries started."""
    late: list[tuple[QueryRecord | None, Feedback]] = field(default_factory=list)
    """Feedback on queries stored earlier (``None``: no longer known)."""
    regenerated: list[QueryRecord | None] = field(default_factory=list)
    """Queries an explicit regenerate claimed first (``None``: no longer known)."""

    def __len__(self) -> int:
        return len(self.records) + len(self.late) + len(self.regenerated)


@dataclass
class RequestSpans:
    """One request's spans for the forwarder sink, with what assembly completed and the store kept
    (the tail sampler decides whole traces from them: ``agent/tail_sampling.py``)."""

    spans: Sequence[Any]
    output: Any = None
    """The assembler's ``AssemblyOutput``."""
    written: Any = None
    """``agent/persist.py``'s ``Written``: queued items, new late feedback."""

    def __len__(self) -> int:
        return len(self.spans)

    def __bool__(self) -> bool:
        # An expiry run's traces carry no request spans (they count 0 in the queue's bound and its
        # drop counter) but still go to the sampler.
        return bool(self.spans) or self.output is not None


class QueueSink(Component):
    """One consumer behind a bounded queue and its own worker thread."""

    def __init__(self, name: str, consume: Callable[[Any], None], metrics: AgentMetrics,
                 max_items: int = SINK_QUEUE_ITEMS, size: Callable[[Any], int] = len, clock=time.monotonic):
        super().__init__(f"sink:{name}", {"max_items": max_items})
        self.sink = name
        self.consume = consume
        self.size = size
        self.max_items = max_items
        self.clock = clock
        self._dropped = metrics.sink_dropped.labels(name)  # at 0 from the start
        metrics.sink_queue_depth.labels(name).set_function(lambda: self.depth)
        self._queue: collections.deque[tuple[Any, int]] = collections.deque()
        self.depth = 0
        """Items queued or being consumed."""
        self._cond = threading.Condition()
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self._error = ""
        self._last_drop = float("-inf")

    # --- the request path ---------------------------------------------------------------------

    def publish(self, batch) -> None:
        if not batch:
            return
        n = self.size(batch)
        with self._cond:
            if self.depth + n > self.max_items or self._closing:
                dropped = True
            else:
                dropped = False
                self._queue.append((batch, n))
                self.depth += n
                self._cond.notify_all()
        if dropped:
            self._drop(n)

    # --- the worker -------------------------------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._work, name=f"rag-monitor-{self.name}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return  # closing, and drained
                batch, n = self._queue.popleft()
                self._busy = True
            try:
                self.consume(batch)
            except Exception as exc:  # noqa: BLE001 - the sink's trouble stays in the sink
                if not self._error:
                    log.exception("sink %s failed; its batches are dropped and counted until it recovers", self.sink)
                self._error = f"{type(exc).__name__}: {exc}"[:200]
                self._drop(n)
            else:
                if self._error:
                    log.info("sink %s recovered", self.sink)
                self._error = ""
            finally:
                with self._cond:
                    self._busy = False
                    self.depth -= n
                    self._cond.notify_all()

    def _drop(self, n: int) -> None:
        self._dropped.inc(n)
        self._last_drop = self.clock()

    def settle(self, timeout_s: float) -> bool:
        """Wait until the queue is empty and the worker idle; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
        return True

    def _stop(self, timeout_s: float = 10.0) -> None:
        """Consume what is queued (up to ``timeout_s``), then end the worker; what is left is dropped and counted."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._cond:
            left = sum(n for _, n in self._queue)
            self._queue.clear()
        if left:
            log.warning("sink %s stopped with %d items queued: dropped", self.sink, left)
            self._drop(left)

    def _health(self) -> Health:
        if self._error:
            return Health(DEGRADED, f"last batch failed: {self._error}")
        if self.clock() - self._last_drop < DEGRADED_AFTER_DROP_S:
            return Health(DEGRADED, f"queue full (over {self.max_items} items): dropping")
        return HEALTHY


class FanOut:
    """The enabled sinks: record sinks get each ``IngestBatch``, span sinks each request's spans."""

    def __init__(self, record_sinks: Sequence[QueueSink] = (), span_sinks: Sequence[QueueSink] = ()):
        self.record_sinks = list(record_sinks)
        self.span_sinks = list(span_sinks)

    @property
    def sinks(self) -> list[QueueSink]:
        return [*self.record_sinks, *self.span_sinks]

    def records(self, batch: IngestBatch) -> None:
        for sink in self.record_sinks:
            sink.publish(batch)

    def spans(self, spans: Sequence) -> None:
        for sink in self.span_sinks:
            sink.publish(spans)

    def settle(self, timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(sink.settle(max(0.0, deadline - time.monotonic())) for sink in self.sinks)
