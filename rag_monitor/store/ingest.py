"""What one OTLP request must keep, written in one transaction; the spans still waiting for a root.

A request's records, feedback, review items, pending spans and release sightings commit
together or not at all: a store failure midway leaves nothing behind for the exporter's retry
to duplicate (and feedback is keyed, so even a retry after a lost acknowledgement is a no-op).

Pending spans: spans acknowledged while their trace waits for its root are stored here, so an
agent killed with ``kill -9`` loses none of them, and whichever replica receives the root
assembles the trace whole. Completing a trace deletes its rows; the deletion is the claim that
decides, when a trace's root never came, which replica counts it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rag_monitor.record import QueryRecord

from .engine import Database
from .models import FeedbackEvent
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


class PendingSpans:
    def __init__(self, db: Database):
        self._db = db

    def add_in(self, conn: Connection, rows: Iterable[tuple[str, bytes]], now: float) -> int:
        values = [{"trace_id": trace_id, "spans": blob, "added_at": now} for trace_id, blob in rows]
        if values:
            conn.execute(sa.insert(pending_spans), values)
        return len(values)

    def claim_in(self, conn: Connection, trace_ids: Iterable[str]) -> set[str]:
        """Delete the stored spans of ``trace_ids``; the ids that had any."""
        ids = sorted(set(trace_ids))
        if not ids:
            return set()
        rows = conn.execute(
            sa.delete(pending_spans).where(pending_spans.c.trace_id.in_(ids)).returning(pending_spans.c.trace_id)
        ).all()
        return {row[0] for row in rows}

    def load(self, trace_ids: Iterable[str]) -> dict[str, list[bytes]]:
        """The stored span blobs of ``trace_ids``, oldest first."""
        ids = sorted(set(trace_ids))
        if not ids:
            return {}
        p = pending_spans
        with self._db.read() as conn:
            rows = conn.execute(
                sa.select(p.c.trace_id, p.c.spans).where(p.c.trace_id.in_(ids)).order_by(p.c.id)
            ).all()
        out: dict[str, list[bytes]] = {}
        for trace_id, blob in rows:
            out.setdefault(trace_id, []).append(bytes(blob))
        return out

    def count(self) -> int:
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(pending_spans)).scalar_one()

    def prune(self, older_than: float) -> int:
        """Drop rows stored before ``older_than``: orphans of a replica that died with them."""
        with self._db.write() as conn:
            return conn.execute(sa.delete(pending_spans).where(pending_spans.c.added_at < older_than)).rowcount
