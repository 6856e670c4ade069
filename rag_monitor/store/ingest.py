"""What one OTLP request must keep, written in one transaction; the spans still waiting for a root.

A request's records, feedback, review items, pending spans and release sightings commit
together or not at all: a store failure midway leaves nothing behind for the exporter's retry
to duplicate (and feedback is keyed, so even a retry after a lost acknowledgement is a no-op).

Pending spans: spans acknowledged while their trace waits for its root are stored here, so an
agent killed with ``kill -9`` loses none of them, and whichever replica receives the root
assembles the trace whole. Completing a trace deletes its rows; the deletion is the claim that
decides, when a trace's root never came, which replica counts it.

One transaction per group of requests (``transaction``): it first takes the stored spans of the
traces whose root the group holds (``take_pending_in``: one ``DELETE ... RETURNING`` that reads
and claims them), the agent assembles, then writes the group (``persist(batch, conn=...)``) and
commits. A read before the write transaction was a second round trip and snapshot per group,
and the claim a second statement over the same rows; a failure anywhere rolls the deletion back
with everything else, so the spans wait for the exporter's retry as before.

On PostgreSQL a set of ids is one array parameter (``Database.any_of``): the statement's text
does not change with the group's size, so each connection prepares it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rag_monitor.record import QueryRecord
from rag_monitor.semconv import FEEDBACK_REGENERATE

from .coordination import RegeneratedQueries, Releases
from .engine import Database, UnnestInsert
from .models import FeedbackEvent, now_s
from .queue import QUEUED, UPGRADED, ReviewQueue
from .records import FeedbackLog, RecentRecords
from .schema import pending_spans


@dataclass
class QueueWrite:
    """A review item to queue (or upgrade: see ``ReviewQueue.enqueue``)."""

    record: QueryRecord
    stratum: str
    inclusion_prob: float
    counted_weight: float | None = None
    pair_trace_id: str | None = None
    pair_record: QueryRecord | None = None
    score_prob: float | None = None
    """The trace's scoring probability (at least ``inclusion_prob``: review is a subsample)."""
    queue: str = "default"
    """``score`` for a trace sampled for scoring only (``store.queue.SCORE_QUEUE``)."""


@dataclass
class IngestBatch:
    """Everything one OTLP request (or one expiry pass) keeps."""

    records: list[QueryRecord] = field(default_factory=list)
    """Assembled records, for the recent-records cache."""
    feedback: list[FeedbackEvent] = field(default_factory=list)
    items: list[QueueWrite] = field(default_factory=list)
    pending: list[tuple[str, bytes]] = field(default_factory=list)
    """``(trace_id, spans)`` of traces still waiting for their root (OTLP protobuf, redacted)."""
    completed: list[str] = field(default_factory=list)
    """Traces assembled by this batch: their stored pending spans are deleted (claimed)."""
    taken: set[str] = field(default_factory=set)
    """Traces whose stored spans this transaction took already (``take_pending_in``): not deleted again."""
    claim_required: set[str] = field(default_factory=set)
    """Of ``completed``: kept only if this transaction claims stored spans (expired traces another
    replica may have assembled already)."""
    pair_halves: list[QueryRecord] = field(default_factory=list)
    """Production records a queued shadow pair may be waiting for."""
    releases: list[tuple[str, str]] = field(default_factory=list)
    """``(service, release)`` sightings."""
    known_queries: set[str] = field(default_factory=set)
    """Traces whose query is known here (assembled by this batch, or in the recent-records cache):
    a new ``regenerate`` on one claims it as regenerated; a click on a forgotten query does not."""


@dataclass
class IngestOutcome:
    queued: list[QueueWrite] = field(default_factory=list)
    upgraded: list[QueueWrite] = field(default_factory=list)
    skipped: set[str] = field(default_factory=set)
    """Traces of ``claim_required`` another replica had claimed: nothing of them was written."""
    first_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    feedback_added: list[FeedbackEvent] = field(default_factory=list)
    """The feedback events that were new (a resent one is stored, and counted, once)."""
    regenerated: set[str] = field(default_factory=set)
    """Queries (trace ids) this batch's explicit ``regenerate`` claimed: not counted as regenerated before."""
    duplicates: set[str] = field(default_factory=set)
    """Records whose trace was stored already (by any replica, within the recent-records ttl):
    counted there, not again."""


class IngestState:
    """``store.ingest``: what the request path writes, and the spans still waiting for a root.

    Usage::

        outcome = store.ingest.persist(batch)             # one transaction; IngestOutcome
        with store.ingest.transaction() as conn:          # a group: take its stored spans, then write
            stored = store.ingest.take_pending_in(conn, ["trace-a"])   # {"trace-a": [blob, ...]}
            outcome = store.ingest.persist(batch, conn=conn)
    """

    def __init__(self, db: Database, *, recent: RecentRecords, feedback: FeedbackLog, regenerated: RegeneratedQueries,
                 releases: Releases, queue: ReviewQueue):
        self._db = db
        self._recent = recent
        self._feedback = feedback
        self._regenerated = regenerated
        self._releases = releases
        self._queue = queue
        self._insert_pending = None if db.is_sqlite else UnnestInsert(pending_spans, ["trace_id", "spans", "added_at"])

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction for ``take_pending_in`` and ``persist``; commits on exit."""
        with self._db.write() as conn:
            yield conn

    def persist(self, batch: IngestBatch, *, now: float | None = None, conn: Connection | None = None) -> IngestOutcome:
        """Write everything ``batch`` holds in one transaction (see the module's docstring): its
        own, or ``conn``'s (``transaction``), which the caller commits."""
        if conn is None:
            with self.transaction() as conn:
                return self.persist(batch, now=now, conn=conn)
        now = now_s() if now is None else now
        out = IngestOutcome()
        claimed = self._claim_pending_in(conn, [t for t in batch.completed if t not in batch.taken])
        out.skipped = batch.claim_required - claimed
        kept = [r for r in batch.records if r.trace_id not in out.skipped]
        self._add_pending_in(conn, batch.pending, now)
        stored = self._recent.put_in(conn, kept, now)
        out.duplicates = {r.trace_id for r in kept} - stored
        out.feedback_added = self._feedback.add_in(conn, [f for f in batch.feedback if f.trace_id not in out.skipped])
        out.regenerated = self._regenerated.claim_in(
            conn, (f.trace_id for f in out.feedback_added if f.kind == FEEDBACK_REGENERATE and f.trace_id in batch.known_queries), now)
        for service, release in sorted(set(batch.releases)):
            out.first_seen[(service, release)] = self._releases.note_in(conn, service, release, now)
        items = [item for item in batch.items if item.record.trace_id not in out.skipped]
        for item, result in zip(items, self._queue.enqueue_many_in(conn, items, now=now)):
            (out.queued if result == QUEUED else out.upgraded if result == UPGRADED else []).append(item)
        self._queue.attach_pairs_in(conn, batch.pair_halves)
        return out

    def _add_pending_in(self, conn: Connection, rows: Iterable[tuple[str, bytes]], now: float) -> int:
        values = [{"trace_id": trace_id, "spans": blob, "added_at": now} for trace_id, blob in rows]
        if values and self._insert_pending is not None:
            self._insert_pending.execute(conn, values)
        elif values:
            conn.execute(sa.insert(pending_spans), values)
        return len(values)

    def _claim_pending_in(self, conn: Connection, trace_ids: Iterable[str]) -> set[str]:
        """Delete the stored spans of ``trace_ids``; the ids that had any."""
        ids = sorted(set(trace_ids))
        if not ids:
            return set()
        rows = conn.execute(
            sa.delete(pending_spans).where(self._db.any_of(pending_spans.c.trace_id, ids)).returning(pending_spans.c.trace_id)
        ).all()
        return {row[0] for row in rows}

    def take_pending_in(self, conn: Connection, trace_ids: Iterable[str]) -> dict[str, list[bytes]]:
        """Delete and return the stored spans of ``trace_ids`` (any replica's), per trace, oldest
        first, inside the caller's transaction: read and claimed in one statement."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        p = pending_spans
        rows = conn.execute(
            sa.delete(p).where(self._db.any_of(p.c.trace_id, ids)).returning(p.c.id, p.c.trace_id, p.c.spans)).all()
        out: dict[str, list[bytes]] = {}
        for _, trace_id, blob in sorted(rows, key=lambda row: row[0]):
            out.setdefault(trace_id, []).append(bytes(blob))
        return out

    def pending_spans(self, trace_ids: Iterable[str]) -> dict[str, list[bytes]]:
        """Stored spans of traces waiting for their root (any replica's), per trace, oldest first."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        p = pending_spans
        with self._db.read() as conn:
            rows = conn.execute(
                sa.select(p.c.trace_id, p.c.spans).where(self._db.any_of(p.c.trace_id, ids)).order_by(p.c.id)
            ).all()
        out: dict[str, list[bytes]] = {}
        for trace_id, blob in rows:
            out.setdefault(trace_id, []).append(bytes(blob))
        return out

    def pending_span_rows(self) -> int:
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(pending_spans)).scalar_one()

    def prune_pending(self, older_than: float) -> int:
        """Drop pending spans stored before ``older_than``: orphans of a replica that died with them."""
        with self._db.write() as conn:
            return conn.execute(sa.delete(pending_spans).where(pending_spans.c.added_at < older_than)).rowcount
