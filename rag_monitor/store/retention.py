"""History retention: the pruning job deletes old rows in bounded batches.

    store.retention.prune()   # {"scores": n, "feedback": n, ...}: Retention(db, history_s=..., reviews_s=...)

Each batch is its own short transaction that deletes at most ``batch_rows`` rows picked through
an index on the table's time column, so a backlog of months is worked off over several runs
without one statement holding locks (or bloating one transaction) for minutes. Reviewed items
and their reviews (the golden set) are kept forever unless ``reviews_s`` is set; unreviewed
items (the scored-only queue's included), scores, feedback and drift runs go after ``history_s``
(a scored estimate keeps its running sums in ``score_sums``).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Database
from .models import now_s
from .queue import SCORE_QUEUE
from .schema import drift_runs, feedback, review_counts, review_items, reviews, scores

DAY_S = 86400.0


class Retention:
    """``store.retention``: history past its retention settings, deleted in bounded batches."""

    def __init__(self, db: Database, *, history_s: float | None, reviews_s: float | None,
                 batch_rows: int = 5000, max_batches: int = 20):
        for name, value in (("history retention", history_s), ("review retention", reviews_s)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive seconds or None (forever), got {value!r}")
        if batch_rows < 1 or max_batches < 1:
            raise ValueError(f"batch_rows ({batch_rows}) and max_batches ({max_batches}) must be positive")
        self._db = db
        self.history_s = history_s
        self.reviews_s = reviews_s
        self.batch_rows = batch_rows
        self.max_batches = max_batches
        """Per table and run: a run ends in bounded time; the next one carries on."""

    def prune(self, *, now: float | None = None) -> dict[str, int]:
        """Delete what is past retention; rows deleted per table."""
        now = now_s() if now is None else now
        out: dict[str, int] = {}
        if self.history_s is not None:
            cutoff = now - self.history_s
            t = review_items
            # An unreviewed item may carry a first review (double review): that one is kept.
            no_review = ~sa.exists().where(reviews.c.item_id == t.c.id)
            # Through the open-work index (review queues) and the scored-only queue's own index.
            out["review_items"] = self._batches(t, [t.c.id], sa.and_(
                t.c.state != "reviewed", t.c.queue != SCORE_QUEUE, t.c.created_at < cutoff, no_review))
            out["review_items"] += self._batches(t, [t.c.id], sa.and_(t.c.queue == SCORE_QUEUE, t.c.created_at < cutoff))
            out["scores"] = self._batches(scores, [scores.c.trace_id, scores.c.scorer], scores.c.computed_at < cutoff)
            out["feedback"] = self._batches(feedback, [feedback.c.id], feedback.c.time < cutoff)
            out["drift_runs"] = self._batches(drift_runs, [drift_runs.c.id], sa.and_(
                drift_runs.c.scheduled_for < cutoff, drift_runs.c.status != "running"))
        if self.reviews_s is not None:
            t = review_items
            out["reviews"] = self._batches(t, [t.c.id], sa.and_(t.c.state == "reviewed", t.c.reviewed_at < now - self.reviews_s),
                                           on_deleted=_uncount_reviewed)
        return out

    def _batches(self, table: sa.Table, key: list[sa.Column], condition: sa.ColumnElement[bool],
                 on_deleted=None) -> int:
        total = 0
        for _ in range(self.max_batches):
            with self._db.write() as conn:
                chosen = sa.select(*key).where(condition).limit(self.batch_rows)
                target = key[0].in_(chosen) if len(key) == 1 else sa.tuple_(*key).in_(chosen)
                stmt = sa.delete(table).where(target)
                if on_deleted is not None:
                    deleted = conn.execute(stmt.returning(table.c.queue)).all()
                    on_deleted(conn, [row[0] for row in deleted])
                    n = len(deleted)
                else:
                    n = conn.execute(stmt).rowcount
            total += n
            if n < self.batch_rows:
                break
        return total


def _uncount_reviewed(conn: Connection, queues: list[str]) -> None:
    """Reviewed items left with their reviews (cascade): the queue depth's count follows."""
    for queue in set(queues):
        conn.execute(sa.update(review_counts).where(review_counts.c.queue == queue)
                     .values(reviewed=review_counts.c.reviewed - queues.count(queue)))


def days(value: float) -> float | None:
    """A retention setting in days to seconds; 0 means forever (None)."""
    if value < 0:
        raise ValueError(f"retention days must be 0 (forever) or positive, got {value!r}")
    return value * DAY_S if value else None
