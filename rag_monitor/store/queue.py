"""The durable review queue: sampled records enqueued, their depth, their reviews read back.

A trace is queued once per queue; a later, likelier draw (a complaint) upgrades it in place.
On PostgreSQL a group commit's items go in as one ``unnest`` insert (``engine.UnnestInsert``):
one prepared statement whatever the number of items, where a multi-row ``VALUES`` list was
parsed and planned again for each length.
Claiming and reviewing are ``workflow.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rag_monitor.record import QueryRecord

from .engine import Database, UnnestInsert
from .errors import NotFound
from .models import Review, ReviewItem, now_s, record_json
from .schema import REVIEW_STATES, feedback, review_counts, review_items, review_skips, reviews

_ROW_COLUMNS = ("queue", "trace_id", "stratum", "inclusion_prob", "weight", "counted_weight", "tenant", "record",
                "pair_trace_id", "pair_record", "state", "created_at", "score_prob")
"""What ``ReviewQueue._row`` fills in."""

DEFAULT_QUEUE = "default"
SCORE_QUEUE = "score"
"""Traces sampled for scoring but not for review (the scored sample's rest): never claimed."""
QUEUED, UPGRADED = "queued", "upgraded"


class ReviewQueue:
    """``store.queue``: what was sampled for review and scoring, its depth and what was reviewed.

    Usage::

        store.queue.enqueue(record, stratum="thumbs_down", inclusion_prob=0.5)  # False if queued already
        store.queue.depth()                                                     # {"queued": n, ...}

    The reviewer's side (claim, submit, drafts, skips) is ``store.review`` (``workflow.py``).
    """

    def __init__(self, db: Database):
        self._db = db
        self._insert_rows = None if db.is_sqlite else UnnestInsert(
            review_items, list(_ROW_COLUMNS), "ON CONFLICT (queue, trace_id) DO NOTHING RETURNING queue, trace_id")
        """PostgreSQL: a group's items in one prepared statement (``UnnestInsert``)."""

    def enqueue(
        self,
        record: QueryRecord | dict[str, Any],
        *,
        stratum: str,
        inclusion_prob: float,
        tenant: str | None = None,
        pair_trace_id: str | None = None,
        pair_record: QueryRecord | dict[str, Any] | None = None,
        counted_weight: float | None = None,
        queue: str = DEFAULT_QUEUE,
        now: float | None = None,
        score_prob: float | None = None,
    ) -> bool:
        """Queue a sampled record; True when it was not queued before.

        A trace queued already is never queued twice: when ``inclusion_prob`` is higher than the
        stored one (a complaint arrived later, under the single-draw design) the item's stratum,
        probability, weight and record are updated in place; otherwise nothing changes.
        ``counted_weight`` is the weight the agent's weighted counters use for the item (default
        ``1 / inclusion_prob``; 0 for an item a later complaint pulled in). ``tenant`` defaults to
        the record's own.
        """
        with self._db.write() as conn:
            return self.enqueue_in(
                conn, record, stratum=stratum, inclusion_prob=inclusion_prob, tenant=tenant,
                pair_trace_id=pair_trace_id, pair_record=pair_record, counted_weight=counted_weight,
                queue=queue, now=now, score_prob=score_prob,
            ) == QUEUED

    def enqueue_in(
        self,
        conn: Connection,
        record: QueryRecord | dict[str, Any],
        *,
        stratum: str,
        inclusion_prob: float,
        tenant: str | None = None,
        pair_trace_id: str | None = None,
        pair_record: QueryRecord | dict[str, Any] | None = None,
        counted_weight: float | None = None,
        queue: str = DEFAULT_QUEUE,
        now: float | None = None,
        score_prob: float | None = None,
    ) -> str | None:
        """``enqueue`` inside the caller's transaction: ``"queued"``, ``"upgraded"`` or None."""
        row = self._row(record, stratum=stratum, inclusion_prob=inclusion_prob, tenant=tenant,
                        pair_trace_id=pair_trace_id, pair_record=pair_record, counted_weight=counted_weight,
                        queue=queue, now=now, score_prob=score_prob)
        inserted = conn.execute(self._insert_new.returning(review_items.c.id), row).first()
        return QUEUED if inserted is not None else self._upgrade_in(conn, row)

    def enqueue_many_in(self, conn: Connection, writes: Sequence[Any], now: float | None = None) -> list[str | None]:
        """``enqueue_in`` of each of ``writes`` (``store.ingest.QueueWrite``), one insert for all:
        what each became, in order. A trace already queued is upgraded as ``enqueue_in`` would."""
        rows = [self._row(w.record, stratum=w.stratum, inclusion_prob=w.inclusion_prob, pair_trace_id=w.pair_trace_id,
                          pair_record=w.pair_record, counted_weight=w.counted_weight, queue=w.queue, now=now,
                          score_prob=w.score_prob) for w in writes]
        if not rows:
            return []
        if self._insert_rows is not None:
            new = {tuple(r) for r in self._insert_rows.execute(conn, rows)}
        else:
            new = {tuple(r) for r in conn.execute(
                self._insert_new.returning(review_items.c.queue, review_items.c.trace_id), rows)}
        out: list[str | None] = []
        for row in rows:
            key = (row["queue"], row["trace_id"])
            if key in new:
                new.discard(key)  # the first of a trace's rows is the one inserted; a later one upgrades it
                out.append(QUEUED)
            else:
                out.append(self._upgrade_in(conn, row))
        return out

    def _row(self, record: QueryRecord | dict[str, Any], *, stratum: str, inclusion_prob: float, tenant: str | None = None,
             pair_trace_id: str | None = None, pair_record: QueryRecord | dict[str, Any] | None = None,
             counted_weight: float | None = None, queue: str = DEFAULT_QUEUE, now: float | None = None,
             score_prob: float | None = None) -> dict[str, Any]:
        trace_id, record_text = record_json(record)
        if not stratum:
            raise ValueError("stratum must be a non-empty string")
        if not 0 < inclusion_prob <= 1:
            raise ValueError(f"inclusion_prob must be in (0, 1], got {inclusion_prob!r}")
        weight = 1.0 / inclusion_prob
        return dict(
            queue=queue,
            trace_id=trace_id,
            stratum=stratum,
            inclusion_prob=float(inclusion_prob),
            weight=weight,
            counted_weight=weight if counted_weight is None else float(counted_weight),
            tenant=_tenant_of(record) if tenant is None else tenant,
            record=record_text,
            pair_trace_id=pair_trace_id,
            pair_record=record_json(pair_record)[1] if pair_record is not None else None,
            state="queued",
            created_at=now_s() if now is None else now,
            score_prob=None if score_prob is None else max(float(score_prob), float(inclusion_prob)),
        )

    @property
    def _insert_new(self):
        # Callers add RETURNING (not rowcount: drivers need not report rowcount for INSERT).
        return self._db.insert(review_items).on_conflict_do_nothing(index_elements=["queue", "trace_id"])

    def _upgrade_in(self, conn: Connection, row: dict[str, Any]) -> str | None:
        """Raise a queued item's inclusion probability (a later complaint): ``"upgraded"`` or None."""
        t, p = review_items, row["inclusion_prob"]
        upgraded = conn.execute(
            sa.update(t)
            .where(t.c.queue == row["queue"], t.c.trace_id == row["trace_id"], t.c.inclusion_prob < p)
            .values(stratum=row["stratum"], inclusion_prob=p, weight=row["weight"], record=row["record"],
                    score_prob=sa.func.max(sa.func.coalesce(t.c.score_prob, 0.0), p)
                    if self._db.dialect == "sqlite" else
                    sa.func.greatest(sa.func.coalesce(t.c.score_prob, 0.0), p))
        ).rowcount
        return UPGRADED if upgraded else None

    def attach_pairs_in(self, conn: Connection, productions: Sequence[QueryRecord]) -> int:
        """Store each of ``productions`` as the missing half of queued shadow pairs that name it.

        Almost no production record has a shadow queued before it: one indexed lookup for the
        whole batch, then a write (and a serialisation) only for the records that are awaited.
        """
        if not productions:
            return 0
        t = review_items
        by_trace = {p.trace_id: p for p in productions}
        awaited = conn.execute(
            sa.select(t.c.pair_trace_id).distinct()
            .where(self._db.any_of(t.c.pair_trace_id, list(by_trace)), t.c.pair_record.is_(None))
        ).scalars().all()
        attached = 0
        for trace_id in awaited:
            _, text = record_json(by_trace[trace_id])
            attached += conn.execute(
                sa.update(t).where(t.c.pair_trace_id == trace_id, t.c.pair_record.is_(None)).values(pair_record=text)
            ).rowcount
        return attached

    def release_expired_claims(self, now: float | None = None) -> int:
        """Return items whose claim lapsed to the queue; how many were released."""
        now = now_s() if now is None else now
        t = review_items
        with self._db.write() as conn:
            return conn.execute(
                sa.update(t)
                .where(t.c.state == "claimed", t.c.claim_expires_at <= now)
                .values(state="queued", claimed_by=None, claim_expires_at=None, draft=None)
            ).rowcount

    def get_item(self, item_id: int) -> ReviewItem:
        with self._db.read() as conn:
            row = conn.execute(sa.select(review_items).where(review_items.c.id == item_id)).first()
        if row is None:
            raise NotFound(f"no review item {item_id}")
        return ReviewItem.from_row(row)

    def item_for_trace(self, trace_id: str, *, queue: str = DEFAULT_QUEUE) -> ReviewItem | None:
        t = review_items
        with self._db.read() as conn:
            row = conn.execute(sa.select(t).where(t.c.queue == queue, t.c.trace_id == trace_id)).first()
        return ReviewItem.from_row(row) if row is not None else None

    def depth(self, *, queue: str | None = None, now: float | None = None) -> dict[str, int]:
        """Items per state; a lapsed claim counts as ``queued`` (it is claimable).

        Open items are counted through the partial index of unreviewed items, reviewed ones read
        from ``review_counts``: the cost follows the work waiting, not the history.
        """
        now = now_s() if now is None else now
        t, c = review_items, review_counts
        effective = sa.case(
            (sa.and_(t.c.state == "claimed", t.c.claim_expires_at <= now), "queued"), else_=t.c.state
        )
        # None: every review queue; the scored-only traces are no one's work.
        in_queue = t.c.queue == queue if queue is not None else t.c.queue != SCORE_QUEUE
        open_items = sa.select(effective, sa.func.count()).where(t.c.state != "reviewed", in_queue).group_by(effective)
        reviewed = sa.select(sa.func.coalesce(sa.func.sum(c.c.reviewed), 0)).where(
            c.c.queue == queue if queue is not None else c.c.queue != SCORE_QUEUE)
        depth = dict.fromkeys(REVIEW_STATES, 0)
        with self._db.read() as conn:
            depth.update({state: count for state, count in conn.execute(open_items)})
            depth["reviewed"] = int(conn.execute(reviewed).scalar_one())
        return depth

    def reviewed(
        self, since: float | None = None, *, queue: str | None = None, limit: int | None = None
    ) -> list[tuple[ReviewItem, Review]]:
        """Items with their first review, oldest review first; ``since`` filters review time.

        An item reviewed twice appears once, with its first review: estimates count each
        sampled query once (``all_reviews`` has every review, for agreement).
        """
        stmt = _first_reviews()
        if since is not None:
            stmt = stmt.where(reviews.c.created_at >= since)
        if queue is not None:
            stmt = stmt.where(review_items.c.queue == queue)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._db.read() as conn:
            return _review_pairs(conn.execute(stmt))

    def reviewed_changed(self, feedback_id: int | None) -> tuple[list[tuple[ReviewItem, Review]], int]:
        """``reviewed()`` of the traces with feedback stored after ``feedback_id``, and the newest
        feedback id (``feedback_id`` when there is none; 0 in an empty table). None: no items,
        only the newest id (where a reader starts).

        A reviewed item changes only when late feedback raises its inclusion probability
        (``enqueue_in``), in the transaction that stores the feedback: this is the "changed since"
        of ``review.reviewed_cache``, read through the feedback key and ``review_items.trace_id``.
        The newest id is read first: feedback committed between the two reads is read again next time.
        """
        f = feedback
        after = -1 if feedback_id is None else feedback_id
        with self._db.read() as conn:
            newest = conn.execute(sa.select(sa.func.max(f.c.id)).where(f.c.id > after)).scalar_one()
            newest = (feedback_id or 0) if newest is None else int(newest)
            if feedback_id is None:
                return [], newest
            changed = sa.select(f.c.trace_id).where(f.c.id > feedback_id)
            return _review_pairs(conn.execute(_first_reviews().where(review_items.c.trace_id.in_(changed)))), newest

    def paired_items(self, since: float | None = None) -> list[ReviewItem]:
        """Sampled shadow pairs stored whole (both halves), reviewed or not, oldest first."""
        t = review_items
        stmt = sa.select(t).where(t.c.pair_trace_id.is_not(None), t.c.pair_record.is_not(None)).order_by(t.c.id)
        if since is not None:
            stmt = stmt.where(t.c.created_at >= since)
        with self._db.read() as conn:
            return [ReviewItem.from_row(row) for row in conn.execute(stmt)]


def _first_reviews() -> sa.Select:
    """Reviewed items joined to their first review, oldest review first."""
    t, r = review_items, reviews
    other = reviews.alias("first_review")
    first = sa.select(sa.func.min(other.c.id)).where(other.c.item_id == t.c.id).scalar_subquery()
    return (
        sa.select(t, r.c.id.label("review_id"), r.c.reviewer, r.c.labels, r.c.created_at.label("review_created_at"))
        .join(r, r.c.item_id == t.c.id)
        .where(r.c.id == first)
        .order_by(r.c.created_at, r.c.id)
    )


def _review_pairs(rows: Iterable[Any]) -> list[tuple[ReviewItem, Review]]:
    out = []
    for row in rows:
        m = row._mapping
        review = Review(m["review_id"], m["id"], m["reviewer"], json.loads(m["labels"]), m["review_created_at"])
        out.append((ReviewItem.from_row(row), review))
    return out


def _tenant_of(record: QueryRecord | dict[str, Any]) -> str | None:
    return record.tenant if isinstance(record, QueryRecord) else record.get("tenant")


def offered_to(reviewer: str, groups: Iterable[str]) -> list[sa.ColumnElement[bool]]:
    t = review_items
    assignees = [reviewer, *(f"group:{g}" for g in sorted(set(groups)))]
    done_by_me = sa.select(reviews.c.id).where(reviews.c.item_id == t.c.id, reviews.c.reviewer == reviewer)
    skipped_by_me = sa.select(review_skips.c.id).where(review_skips.c.item_id == t.c.id, review_skips.c.reviewer == reviewer)
    return [
        sa.or_(t.c.assigned_to.is_(None), t.c.assigned_to.in_(assignees)),
        ~sa.exists(done_by_me),
        ~sa.exists(skipped_by_me),
    ]


def claimable(now: float) -> sa.ColumnElement[bool]:
    t = review_items
    return sa.or_(t.c.state == "queued", sa.and_(t.c.state == "claimed", t.c.claim_expires_at <= now))
