"""Feeds drift reservoirs from assembled queries, off the request path.

Ingest decides in ``offer`` which queries the drift windows will hold, before anything is
embedded (``detectors/sampling.py``), and keeps only those; a background ``tick`` computes missing
embeddings (when the app sent no vectors) and writes both windows. So the embedder's work is set by
the window and reservoir sizes, not by the traffic:

- ``current``: per profile schedule slot, a reservoir of ``current_size`` queries, a uniform sample
  of every query of the slot (the smallest trace-id hashes: content-blind, repeatable, and the
  union of replicas' samples holds the slot's overall sample). It is embedded and written when
  the slot is over, all at once, so a run sees a slot's window whole or not at all; the window spans
  the whole interval at any rate, and a burst of a few minutes is a few minutes' share of it.
- ``reference``: while the query falls in the reference period (``detectors/references.py``),
  Algorithm R over every query of the period: the feed keeps a query with at least Algorithm R's
  chance and counts what it passed over, the store applies the rest with the exact count, so the
  reservoir is uniform over all traffic, peak hours included.

What was sampled and what was passed over is counted per signal and window (``on_sampled``,
``on_skipped``: ``rag_drift_feed_sampled_total``, ``rag_drift_feed_skipped_total``); nothing is
dropped silently. Items carry the query's own time, so runs can match hours of the day. A change
of embedding model starts a new reference version: vectors of two models are not comparable.

One item per query for every signal: the document signal's item is the mean of the query's
delivered documents' vectors (normalised), so popular documents repeated across queries do not
break the permutation test's exchangeability (the unit of the test is the query).

Usage::

    feed = DriftFeed(store.reservoirs, profiles, embedder=SentenceEmbedder("all-MiniLM-L6-v2"))  # drift/embedder.py
    feed.offer(records)      # from the ingest pipeline
    feed.tick()              # from a background worker
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag_monitor.agent.drift.embedder import EmbeddingCache
from rag_monitor.detectors.profiles import (
    CATEGORICAL_SIGNALS,
    SIGNAL_DOCUMENT_EMBEDDING,
    SIGNAL_INTENT,
    SIGNAL_QUERY_EMBEDDING,
    SIGNAL_REFUSAL,
    SIGNAL_ROUTE,
    DriftProfile,
)
from rag_monitor.detectors.references import captures
from rag_monitor.detectors.sampling import IntervalReservoir, ReferencePresample, unit_hash
from rag_monitor.record import QueryRecord

if TYPE_CHECKING:
    from rag_monitor.store.drift import Reservoirs

log = logging.getLogger(__name__)

@dataclass(slots=True)
class _Observation:
    """What the windows keep of a query. Built for every query offered: the record's own vector
    lists, not copies (an assembled record is not changed after it is stored)."""

    trace_id: str
    time: float
    release: str
    query: str
    documents: tuple[str, ...]
    query_vector: list[float] | None
    document_vectors: list[list[float]]
    vector_model: str | None
    intent: str | None
    route: str | None
    refused: bool


def _observation(r: QueryRecord, clock: Callable[[], float]) -> _Observation:
    # Hidden content is never embedded (nor are the app's vectors of it used).
    query_hidden, documents_hidden = "query" in r.hidden, "documents" in r.hidden
    return _Observation(
        r.trace_id, r.start_ns / 1e9 if r.start_ns else clock(), r.release,
        "" if query_hidden else r.query,
        () if documents_hidden else tuple(d.content for d in r.delivered if d.content),
        r.query_embedding if r.query_embedding and not query_hidden else None,
        [] if documents_hidden else r.document_embeddings, r.embedding_model,
        r.intent, r.route, r.refused,
    )


@dataclass
class _ReferenceState:
    """What ``offer`` needs to pick reference items without a store read: refreshed every tick."""

    spec: dict
    version: int | None
    started_at: float | None
    size: int
    taken: int = 0  # count mode: items picked since the refresh

    def room_left(self) -> int:
        return int(self.spec["size"]) - self.size - self.taken


class DriftFeed:
    def __init__(
        self,
        reservoirs: Reservoirs,
        profiles: Sequence[DriftProfile],
        embedder: Callable[[Sequence[str]], object] | None = None,
        embedding_model: str = "all-MiniLM-L6-v2",
        on_sampled: Callable[[str, str, int], None] = lambda signal, window, n: None,
        on_skipped: Callable[[str, str, int], None] = lambda signal, window, n: None,
        on_reset: Callable[[str, str], None] = lambda signal, model: None,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        lateness_s: float = 0.0,
    ):
        self.clock = clock
        self.reservoirs = reservoirs
        """``store.reservoirs``: the only part of the store the feed writes or reads."""
        self.embedder = embedder
        self.embedding_model = embedding_model
        self.on_sampled = on_sampled
        self.on_skipped = on_skipped
        self.on_reset = on_reset
        self.lateness_s = lateness_s
        """How long after a slot is over it waits for its late queries before it is written: a query
        reaches the feed after it ended, was exported and assembled (seconds, more on a busy machine,
        up to the assembler's ``root_timeout_s`` for a trace whose root never came). The agent sets it
        to its ``root_timeout_s``; a query later still is counted skipped, not tested."""
        by_signal: dict[str, list[DriftProfile]] = collections.defaultdict(list)
        for p in profiles:
            by_signal[p.signal].append(p)
        self.signals = dict(by_signal)
        self._lock = threading.Lock()
        self._seed = seed
        # current: the shortest schedule's slots, with the largest window's room
        self._windows = {signal: IntervalReservoir(min(p.interval_s for p in ps), max(p.current_size for p in ps))
                         for signal, ps in self.signals.items()}
        self._presample: dict[str, ReferencePresample] = {}
        self._reference: dict[str, _ReferenceState] = {}
        self._pending_reference: dict[str, collections.deque] = {signal: collections.deque() for signal in self.signals}
        self._counts: collections.Counter = collections.Counter()  # (signal, window, sampled|skipped) -> n
        self._embedded = EmbeddingCache()
        """Vectors of recently embedded texts: popular chunks repeat across queries and batches, and
        while a reference fills every query is embedded; the embedding model is fixed per feed."""

    # --- ingest side: O(log window) per record, no store access after the first call -------------

    def offer(self, records: Iterable[QueryRecord]) -> None:
        if not self.signals:
            return
        if len(self._reference) < len(self.signals):
            self._refresh_reference()
        with self._lock:
            for r in records:
                o = _observation(r, self.clock)
                unit = unit_hash(o.trace_id)  # once for every window
                for signal, window in self._windows.items():
                    if not self._usable(o, signal):  # nothing to test: in no window, not counted as traffic
                        self._counts[(signal, "current", "skipped")] += 1
                        continue
                    # A query the count-mode reference takes (its first ``size``: demos and tests) is
                    # not also current: the run would leave it out as old, and the slot's window,
                    # capped at its size, could never fill with new items.
                    if not self._offer_reference(signal, o):
                        window.offer(o.time, o.trace_id, o, unit=unit)

    def _usable(self, o: _Observation, signal: str) -> bool:
        if signal in CATEGORICAL_SIGNALS:
            return _categorical(o, signal) is not None
        if signal == SIGNAL_QUERY_EMBEDDING:
            return bool(o.query_vector is not None and o.vector_model or o.query and self.embedder is not None)
        return bool(o.document_vectors and o.vector_model or o.documents and self.embedder is not None)

    def _offer_reference(self, signal: str, o: _Observation) -> bool:
        """Offer ``o`` to the reference; True when the count-mode reference took it."""
        state = self._reference[signal]
        started_at = state.started_at if state.started_at is not None else o.time
        if state.started_at is None:
            # a new version starts with its first item (the store's meta row is created by that add)
            self._reference[signal] = state = dataclasses.replace(state, started_at=started_at)
        if not captures(state.spec, started_at, o.time, o.release):
            return False
        if state.spec["mode"] == "count":  # the first ``size`` items (demos and tests)
            if state.room_left() <= 0:
                self._counts[(signal, "reference", "skipped")] += 1
                return False
            state.taken += 1
            self._pending_reference[signal].append((o, 1.0, 0))
            return True
        decision = self._presample[signal].offer()
        if decision is None:
            self._counts[(signal, "reference", "skipped")] += 1
        else:
            self._pending_reference[signal].append((o, *decision))
        return False

    # --- background side ---------------------------------------------------------------------------

    def tick(self, batch: int = 512) -> int:
        """Write every slot that is over and up to ``batch`` reference picks per signal; returns how many items."""
        now = self.clock()
        self._refresh_reference()  # a reference set or reset since the last tick drops the picks made for the old one
        with self._lock:
            work = {}
            for signal, window in self._windows.items():
                released = window.release(now - self.lateness_s)
                late, window.late = window.late, 0
                picks = self._pending_reference[signal]
                work[signal] = (released, late, [picks.popleft() for _ in range(min(batch, len(picks)))])
        written = 0
        for signal, (released, late, picks) in work.items():
            current = [o for sample, _ in released for o in sample]
            values = self._values(signal, current + [o for o, _, _ in picks])
            current_items = [values[o.trace_id] for o in current if o.trace_id in values]
            reference_items = [(o.release, dataclasses.replace(values[o.trace_id], keep_probability=q, skipped_before=skipped))
                               for o, q, skipped in picks if o.trace_id in values]
            arrivals = sum(n for _, n in released)
            self._counts[(signal, "current", "sampled")] += len(current_items)
            self._counts[(signal, "current", "skipped")] += arrivals - len(current_items) + late
            self._counts[(signal, "reference", "sampled")] += len(reference_items)
            self._counts[(signal, "reference", "skipped")] += len(picks) - len(reference_items)
            if current_items or reference_items:
                self._add(signal, current_items, reference_items)
            if signal in self._presample:
                self._presample[signal].reported(sum(it.skipped_before + 1 for _, it in reference_items))
            written += len(current_items) + len(reference_items)
        self._report_counts()
        return written

    def _report_counts(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, collections.Counter()
        for (signal, window, kind), n in counts.items():
            if n:
                (self.on_sampled if kind == "sampled" else self.on_skipped)(signal, window, n)

    def _refresh_reference(self) -> None:
        """Each signal's reference definition and count, read from the store (the presample's bound)."""
        for signal, profiles in self.signals.items():
            spec = self.reference_spec(signal)
            info = self.reservoirs.info(signal, "reference")
            version = info.version if info is not None else None
            with self._lock:
                old = self._reference.get(signal)
                if old is None or (old.version is not None and old.version != version) or old.spec != spec:
                    self._presample[signal] = ReferencePresample(max(p.reference_size for p in profiles), seed=self._seed)
                    self._pending_reference[signal].clear()  # picks for a reference that is gone
                started_at = info.created_at if info is not None else (old.started_at if old and old.version is None else None)
                # Count mode: picks not written yet still take room (else a query could be taken twice over).
                pending = len(self._pending_reference[signal]) if spec["mode"] == "count" else 0
                self._reference[signal] = _ReferenceState(spec, version, started_at, info.size if info else 0, pending)
                self._presample[signal].refresh(info.seen if info is not None else 0)

    def _values(self, signal: str, observations: list[_Observation]) -> dict:
        """Each observation's item for ``signal`` (by trace id); those without one are left out."""
        from rag_monitor.store import ReservoirItem

        unique = list({o.trace_id: o for o in observations}.values())
        if signal in CATEGORICAL_SIGNALS:
            items = [ReservoirItem(o.trace_id, value=_categorical(o, signal), added_at=o.time) for o in unique]
            return {it.trace_id: it for it in items if it.value is not None}
        return {it.trace_id: it for _, it in self._vectors(signal, unique)}

    def _vectors(self, signal: str, taken: list[_Observation]):
        from rag_monitor.store import ReservoirItem

        out, texts, owners = [], [], []
        for o in taken:
            if signal == SIGNAL_QUERY_EMBEDDING:
                if o.query_vector is not None and o.vector_model:
                    out.append((o.release, ReservoirItem(o.trace_id, vector=list(o.query_vector), model=o.vector_model, added_at=o.time)))
                elif o.query:
                    texts.append(o.query)
                    owners.append(o)
            elif signal == SIGNAL_DOCUMENT_EMBEDDING:
                if o.document_vectors and o.vector_model:
                    out.append((o.release, ReservoirItem(o.trace_id, vector=query_unit(o.document_vectors), model=o.vector_model, added_at=o.time)))
                else:
                    texts.extend(o.documents)
                    owners.extend([o] * len(o.documents))
        if texts and self.embedder is not None:
            vectors = self._embed(texts)
            by_query: dict[int, list] = collections.defaultdict(list)
            for o, v in zip(owners, vectors):
                by_query[id(o)].append(v)
            seen = set()
            for o in owners:
                if id(o) not in seen:
                    seen.add(id(o))
                    out.append((o.release, ReservoirItem(o.trace_id, vector=query_unit(by_query[id(o)]), model=self.embedding_model, added_at=o.time)))
        return out

    def _embed(self, texts: list[str]):
        return self._embedded.embed(self.embedder, texts)

    def reference_spec(self, signal: str) -> dict:
        """The signal's reference definition: set from the CLI, else its first profile's default."""
        return self.reservoirs.reference_spec(signal) or self.signals[signal][0].default_reference()

    def _add(self, signal: str, current: list, reference: list) -> None:
        from rag_monitor.store import ReservoirMismatch

        profiles = self.signals[signal]
        current_size = max(p.current_size for p in profiles)
        reference_size = max(p.reference_size for p in profiles)
        max_ages = [p.current_max_age_s for p in profiles]
        max_age = None if any(a is None for a in max_ages) else max(max_ages)
        model = next((it.model for it in current if it.model), None) or next((it.model for _, it in reference if it.model), None)
        now = self.clock()
        info = self.reservoirs.info(signal, "reference")
        if model and info is not None and info.model and info.model != model:
            log.warning("embedding model of %s changed from %s to %s: starting a new reference", signal, info.model, model)
            custom = self.reservoirs.reference_spec(signal)
            self.reservoirs.reset_reference(signal, model, source=json.dumps(custom) if custom else None, now=now)
            self.on_reset(signal, model)
            self._refresh_reference()
            info = None
            # the picks were made for the old reference: the new one starts with this batch's items
            reference = [(None, dataclasses.replace(it, keep_probability=1.0, skipped_before=0))
                         for it in {it.trace_id: it for it in current + [it for _, it in reference]}.values()]
        try:
            # current: room for every slot a window spans and one more, so the next slot fits while
            # the last window is tested (a trailing-day window at 6-hour slots spans four)
            if current:
                slot_s = min(p.interval_s for p in profiles)
                capacity = max((math.ceil((p.window_s or p.interval_s) / slot_s - 1e-9) + 1) * current_size for p in profiles)
                self.reservoirs.add(signal, "current", current, capacity=capacity, max_age_s=max_age, now=now)
            spec = self.reference_spec(signal)
            if info is not None:  # still the reference the picks were made for (a set races with them)
                reference = [(rel, it) for rel, it in reference if captures(spec, info.created_at, it.added_at, rel)]
            wanted = [it for _, it in reference]
            if spec["mode"] == "count":  # picks made before the last count was read may overfill it
                wanted = wanted[:max(int(spec["size"]) - (info.size if info else 0), 0)]
            if info is None and wanted:
                started_at = min(it.added_at for it in wanted)
            if wanted:
                # a new version's period starts at its first item's time (the add creates its row)
                self.reservoirs.add(signal, "reference", wanted, capacity=reference_size,
                                         now=now if info is not None else started_at)
        except ReservoirMismatch as exc:
            log.warning("drift reservoir %s refused items: %s", signal, exc)


def query_unit(vectors) -> list[float]:
    """One vector per query: the normalised mean of its documents' vectors."""
    import numpy as np

    mean = np.asarray(vectors, dtype=np.float64).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return [float(x) for x in (mean / norm if norm > 0 else mean)]


def _categorical(o: _Observation, signal: str) -> str | None:
    if signal == SIGNAL_INTENT:
        return o.intent
    if signal == SIGNAL_ROUTE:
        return o.route
    if signal == SIGNAL_REFUSAL:
        return "refused" if o.refused else "answered"
    return None
