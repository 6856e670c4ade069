"""Group spans into traces across export batches and emit one ``QueryRecord`` per finished query.

    assembler = TraceAssembler(max_pending_traces=10_000, root_timeout_s=60)
    out = assembler.add(result.spans)          # spans of any traces, any order, any batch
    for record in out.records: ...             # queries whose root span has arrived
    for late in out.late_feedback: ...         # feedback for queries already emitted
    expired = assembler.expire()               # call periodically: traces whose root never came

When is a trace complete? Spans end before their parents and exporters send them in end
order, so the root span arrives last (or in the last batch). The root is the span with no
parent, or the SDK's ``rag.query`` span whatever its parent (an upstream service may have
propagated its context into the app). An OpenInference or GenAI root with a remote parent
cannot be told from an inner span whose parent is still in flight, so such a trace waits
for ``root_timeout_s`` and is then assembled from its topmost span (``expire`` counts it in
``assembled_without_root``) when that span stands for a query (a chain, an agent). When it is
one of the query's stages (a retrieval, an LLM call), or an SDK trace lacks ``rag.query``, the
root was lost: the trace is not a query and is counted in ``partial_traces``, never with a
stage's latency as the query's. A trace with nothing RAG-shaped in it is dropped and counted.

An embedding model's dimension is the most common among its recent vectors (ties: the most
recent), so one truncated vector is rejected and counted, and never fixes the dimension.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rag_monitor import semconv as sc
from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.dialects import (
    DEFAULT_SETTINGS,
    DialectSettings,
    build_record,
    feedback_from_span,
    is_feedback_span,
    lost_root,
)
from rag_monitor.collectors.otlp import Span
from rag_monitor.record import Feedback, QueryRecord

__all__ = ["AssemblyOutput", "LateFeedback", "TraceAssembler", "is_root"]

log = logging.getLogger(__name__)

_VECTOR_PREFIX = sc.EMBEDDING_EMBEDDINGS + "."
_VECTOR_SUFFIX = "." + sc.EMBEDDING_VECTOR
_MAX_EMBEDDING_MODELS = 1024  # bound on the dimension table
_DIMENSION_WINDOW = 32  # recent vectors per model that vote on its dimension
_DEFAULTS = IngestLimits()


@dataclass(slots=True)
class LateFeedback:
    """Feedback for a query whose record was already emitted (or never seen by this agent)."""

    trace_id: str
    feedback: Feedback
    known_trace: bool
    """False when this agent never saw the query (another replica did, or it was forgotten)."""


@dataclass(slots=True)
class AssemblyOutput:
    records: list[QueryRecord] = field(default_factory=list)
    late_feedback: list[LateFeedback] = field(default_factory=list)
    late_spans: list[Span] = field(default_factory=list)
    """Non-feedback spans of already-emitted traces: not in any record, still forwardable."""
    dropped_spans: Counter[str] = field(default_factory=Counter)
    """Spans lost by reason: ``late_span``, ``trace_too_large``."""
    dropped_traces: Counter[str] = field(default_factory=Counter)
    """Traces lost by reason: ``evicted``, ``root_timeout``, ``not_rag``, ``assembly_error``."""
    rejected_embeddings: int = 0
    """Vectors whose dimension differed from the one their model's recent vectors agree on."""
    assembled_without_root: int = 0
    partial_traces: int = 0
    """Traces whose root never arrived: not queries, no record."""
    spans_by_trace: dict[str, list[Span]] = field(default_factory=dict)
    """The spans each completed trace was assembled from (for ``reopen``)."""

    def merge(self, other: AssemblyOutput) -> None:
        self.records.extend(other.records)
        self.late_feedback.extend(other.late_feedback)
        self.late_spans.extend(other.late_spans)
        self.dropped_spans.update(other.dropped_spans)
        self.dropped_traces.update(other.dropped_traces)
        self.rejected_embeddings += other.rejected_embeddings
        self.assembled_without_root += other.assembled_without_root
        self.partial_traces += other.partial_traces
        self.spans_by_trace.update(other.spans_by_trace)


@dataclass(slots=True)
class _Pending:
    first_seen: float
    spans: list[Span] = field(default_factory=list)
    has_root: bool = False
    span_ids: set[str] = field(default_factory=set)
    """A span sent twice (a retry after a lost acknowledgement, or reloaded from the store) counts once."""


def is_root(span: Span) -> bool:
    """The span that completes its trace on arrival."""
    return span.parent_span_id is None or span.name == sc.RAG_QUERY_SPAN_NAME


_is_root = is_root


def _unseen(spans: list[Span], seen: set[str]) -> list[Span]:
    """The spans whose id is not in ``seen`` (added to it), in order."""
    out = []
    for span in spans:
        if span.span_id not in seen:
            seen.add(span.span_id)
            out.append(span)
    return out


class TraceAssembler:
    """Bounded buffer of incomplete traces; thread-safe."""

    def __init__(
        self,
        max_pending_traces: int = _DEFAULTS.max_pending_traces,
        root_timeout_s: float = _DEFAULTS.root_timeout_s,
        *,
        max_spans_per_trace: int = _DEFAULTS.max_spans_per_trace,
        completed_trace_memory: int = _DEFAULTS.completed_trace_memory,
        settings: DialectSettings = DEFAULT_SETTINGS,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_pending_traces < 1 or root_timeout_s <= 0 or completed_trace_memory < 1:
            raise ValueError(
                f"max_pending_traces ({max_pending_traces}), root_timeout_s ({root_timeout_s}) and "
                f"completed_trace_memory ({completed_trace_memory}) must be positive"
            )
        self.max_pending_traces = max_pending_traces
        self.root_timeout_s = root_timeout_s
        self.max_spans_per_trace = max_spans_per_trace
        self.completed_trace_memory = completed_trace_memory
        self.settings = settings
        self._clock = clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # insertion order = age
        self._completed: OrderedDict[str, None] = OrderedDict()  # LRU of emitted trace ids
        self._dimensions: dict[str, deque[int]] = {}  # embedding model -> dimensions of recent vectors
        self._lock = threading.Lock()

    @classmethod
    def from_limits(cls, limits: IngestLimits, **kwargs) -> TraceAssembler:
        return cls(
            limits.max_pending_traces,
            limits.root_timeout_s,
            max_spans_per_trace=limits.max_spans_per_trace,
            completed_trace_memory=limits.completed_trace_memory,
            **kwargs,
        )

    @property
    def pending_traces(self) -> int:
        return len(self._pending)

    def add(self, spans: Iterable[Span]) -> AssemblyOutput:
        """Buffer spans; return the records of traces this batch completed."""
        out = AssemblyOutput()
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            group = by_trace.get(span.trace_id)
            if group is None:
                by_trace[span.trace_id] = [span]
            else:
                group.append(span)
        with self._lock:
            now = self._clock()
            for trace_id, group in by_trace.items():
                if trace_id in self._completed:
                    self._completed.move_to_end(trace_id)
                    self._late(trace_id, group, out, known=True)
                    continue
                pending = self._pending.get(trace_id)
                if pending is None:
                    if all(is_feedback_span(s) for s in group):
                        # Feedback comes after the answer: its query is not on its way here.
                        self._late(trace_id, group, out, known=False)
                        continue
                    if len(self._pending) >= self.max_pending_traces:
                        self._pending.popitem(last=False)
                        out.dropped_traces["evicted"] += 1
                    pending = self._pending[trace_id] = _Pending(now)
                group = _unseen(group, pending.span_ids)
                room = self.max_spans_per_trace - len(pending.spans)
                if len(group) > room:
                    out.dropped_spans["trace_too_large"] += len(group) - max(room, 0)
                    group = group[: max(room, 0)]
                pending.spans.extend(group)
                if not pending.has_root:
                    pending.has_root = any(_is_root(s) for s in group)
                if pending.has_root:
                    del self._pending[trace_id]
                    self._complete(trace_id, pending.spans, out)
        return out

    def expire(self) -> AssemblyOutput:
        """Time out traces whose root has not arrived within ``root_timeout_s`` of their first span."""
        out = AssemblyOutput()
        with self._lock:
            deadline = self._clock() - self.root_timeout_s
            while self._pending:
                trace_id, pending = next(iter(self._pending.items()))
                if pending.first_seen > deadline:
                    break
                del self._pending[trace_id]
                before = len(out.records)
                self._complete(trace_id, pending.spans, out, timeout=True)
                if len(out.records) > before:
                    out.assembled_without_root += 1
        return out

    # --- internals (called under the lock) -----------------------------------------------

    def _late(self, trace_id: str, spans: list[Span], out: AssemblyOutput, known: bool) -> None:
        for span in spans:
            feedback = feedback_from_span(span) if is_feedback_span(span) else None
            if feedback is not None:
                out.late_feedback.append(LateFeedback(trace_id, feedback, known))
            else:
                out.late_spans.append(span)
                out.dropped_spans["late_span"] += 1

    def reopen(self, out: AssemblyOutput, resent: Iterable[Span] = ()) -> None:
        """Undo the completion of ``out``'s traces when their records could not be kept.

        The traces go back to pending without the spans of ``resent`` (the request the
        exporter will retry), so the retry completes them again instead of arriving late.
        """
        resent_ids = {(s.trace_id, s.span_id) for s in resent}
        with self._lock:
            now = self._clock()
            for trace_id, spans in out.spans_by_trace.items():
                self._completed.pop(trace_id, None)
                kept = [s for s in spans if (s.trace_id, s.span_id) not in resent_ids]
                if kept:
                    self._pending[trace_id] = _Pending(now, kept, has_root=any(_is_root(s) for s in kept),
                                                       span_ids={s.span_id for s in kept})

    def _complete(self, trace_id: str, spans: list[Span], out: AssemblyOutput, timeout: bool = False) -> None:
        out.spans_by_trace[trace_id] = spans
        self._completed[trace_id] = None
        if len(self._completed) > self.completed_trace_memory:
            self._completed.popitem(last=False)
        if timeout and lost_root(spans):
            out.partial_traces += 1
            return
        out.rejected_embeddings += self._check_dimensions(spans)
        try:
            record = build_record(spans, self.settings)
        except Exception:  # one odd trace must not stop ingest; count it and keep the traceback
            log.exception("could not assemble trace %s from %d spans", trace_id, len(spans))
            out.dropped_traces["assembly_error"] += 1
            return
        if record is None:
            out.dropped_traces["root_timeout" if timeout else "not_rag"] += 1
        else:
            out.records.append(record)

    def _check_dimensions(self, spans: list[Span]) -> int:
        """Drop vectors whose dimension is not the one their model's recent vectors agree on."""
        rejected = 0
        for span in spans:
            attrs = span.attributes
            model = attrs.get(sc.EMBEDDING_MODEL_NAME)
            if model is None and attrs.get(sc.OPENINFERENCE_SPAN_KIND) != sc.SPAN_KIND_EMBEDDING:
                continue
            model = str(model or "")
            for key in [k for k in attrs if k.startswith(_VECTOR_PREFIX) and k.endswith(_VECTOR_SUFFIX)]:
                vector = attrs[key]
                if isinstance(vector, list) and not self._agreed_dimension(model, len(vector)):
                    del attrs[key]
                    rejected += 1
        return rejected

    def _agreed_dimension(self, model: str, dimension: int) -> bool:
        """Vote ``dimension`` in; True when it is the model's agreed dimension (the mode of the
        recent window, ties to the most recent): a real change of dimension wins within a few
        vectors, a stray truncated vector never does."""
        recent = self._dimensions.get(model)
        if recent is None:
            if len(self._dimensions) >= _MAX_EMBEDDING_MODELS:
                return True
            recent = self._dimensions[model] = deque(maxlen=_DIMENSION_WINDOW)
        recent.append(dimension)
        counts = Counter(recent)
        best = max(counts.values())
        return counts[dimension] == best and next(d for d in reversed(recent) if counts[d] == best) == dimension
