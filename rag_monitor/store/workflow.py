"""The review workflow beside the queue: claims and reviews, step-one drafts, skips, assignment, progress.

Every replica reads and writes the same rows, so a reviewer behind a round-robin load
balancer finds their draft and progress on whichever replica answers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from .engine import Database
from .errors import ClaimError, NotFound
from .models import Review, ReviewItem, dump_json, now_s
from .queue import DEFAULT_QUEUE, SCORE_QUEUE, claimable, offered_to
from .schema import review_counts, review_items, review_skips, reviews


class ReviewWorkflow:
    """``store.review``: the reviewer's side of the queue.

    Usage::

        item = store.review.claim("reviewer-7", lease_s=600)   # None when nothing is claimable
        store.review.submit_review(item.id, "reviewer-7", {"faithful": True})

    Claims are leases: a claim that expires (the reviewer closed the tab) makes the item
    claimable again. Two reviewers never hold the same item: on PostgreSQL the candidate row is
    picked with ``FOR UPDATE SKIP LOCKED``; on SQLite the claim is one ``UPDATE ... WHERE id =
    (SELECT ...) RETURNING`` inside a ``BEGIN IMMEDIATE`` transaction, which serialises writers.
    """

    def __init__(self, db: Database):
        self._db = db

    def _held(self, conn: Any, item_id: int, reviewer: str, now: float) -> None:
        t = review_items
        row = conn.execute(sa.select(t.c.state, t.c.claimed_by, t.c.claim_expires_at).where(t.c.id == item_id)).first()
        if row is None:
            raise NotFound(f"no review item {item_id}")
        if row.state != "claimed" or row.claimed_by != reviewer or (row.claim_expires_at or 0) <= now:
            raise ClaimError(f"review item {item_id} is not claimed by you (the claim may have expired: claim again)")

    def claim(
        self,
        reviewer: str,
        lease_s: float,
        tenants: Iterable[str] | None = None,
        *,
        groups: Iterable[str] = (),
        queue: str = DEFAULT_QUEUE,
        now: float | None = None,
    ) -> ReviewItem | None:
        """Lease the oldest claimable item to ``reviewer`` for ``lease_s`` seconds.

        ``tenants`` restricts the claim to items of those tenants (None: any item, an empty
        set: nothing). Items assigned to someone else (or to a group not in ``groups``),
        items this reviewer already reviewed or skipped are not offered. Returns None when
        nothing is claimable.
        """
        if not reviewer:
            raise ValueError("reviewer must be a non-empty pseudonym")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be positive, got {lease_s!r}")
        now = now_s() if now is None else now
        t = review_items
        conditions = [t.c.queue == queue, claimable(now), *offered_to(reviewer, groups)]
        if tenants is not None:
            tenant_list = sorted(set(tenants))
            if not tenant_list:
                return None
            conditions.append(t.c.tenant.in_(tenant_list))
        candidate = (
            sa.select(t.c.id).where(*conditions).order_by(t.c.id).limit(1)
            # PostgreSQL: concurrent claimers skip the row instead of queueing on it.
            # SQLite compiles this to nothing; BEGIN IMMEDIATE serialises claimers there.
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        stmt = (
            sa.update(t)
            .where(t.c.id == candidate, claimable(now))
            .values(state="claimed", claimed_by=reviewer, claim_expires_at=now + lease_s, draft=None)
            .returning(*t.c)
        )
        with self._db.write() as conn:
            row = conn.execute(stmt).first()
        return ReviewItem.from_row(row) if row is not None else None

    def submit_review(
        self, item_id: int, reviewer: str, labels: dict[str, Any], *, reviews_needed: int = 1,
        now: float | None = None,
    ) -> Review:
        """Record ``reviewer``'s labels; only the holder of a valid claim may submit.

        The item is ``reviewed`` once it has ``reviews_needed`` reviews; before that it
        returns to the queue for another reviewer.
        """
        if not isinstance(labels, dict):
            raise TypeError(f"labels must be a dict, got {type(labels).__name__}")
        labels_json = dump_json(labels, "labels")
        now = now_s() if now is None else now
        t = review_items
        earlier = (
            sa.select(sa.func.count()).select_from(reviews).where(reviews.c.item_id == t.c.id).scalar_subquery()
        )
        complete = earlier + 1 >= reviews_needed
        with self._db.write() as conn:
            done = conn.execute(
                sa.update(t)
                .where(t.c.id == item_id, t.c.state == "claimed", t.c.claimed_by == reviewer,
                       t.c.claim_expires_at > now)
                .values(
                    state=sa.case((complete, "reviewed"), else_="queued"),
                    reviewed_at=sa.case((complete, now), else_=None),
                    claimed_by=sa.case((complete, t.c.claimed_by), else_=None),
                    claim_expires_at=sa.case((complete, t.c.claim_expires_at), else_=None),
                    draft=None,
                )
                .returning(t.c.state, t.c.queue)
            ).first()
            if done is None:
                row = conn.execute(sa.select(t).where(t.c.id == item_id)).first()
                raise _why_not_claimed(item_id, reviewer, row, now)
            if done.state == "reviewed":  # the queue depth's count of reviewed items, kept in step
                count = self._db.insert(review_counts).values(queue=done.queue, reviewed=1)
                conn.execute(count.on_conflict_do_update(
                    index_elements=["queue"], set_={"reviewed": review_counts.c.reviewed + 1}))
            review_id = conn.execute(
                sa.insert(reviews)
                .values(item_id=item_id, reviewer=reviewer, labels=labels_json, created_at=now)
                .returning(reviews.c.id)
            ).scalar_one()
        return Review(review_id, item_id, reviewer, json.loads(labels_json), now)

    def current_claim(self, reviewer: str, *, now: float | None = None) -> ReviewItem | None:
        """The item ``reviewer`` holds a valid claim on (at most one is handed out at a time)."""
        now = now_s() if now is None else now
        t = review_items
        stmt = sa.select(t).where(t.c.state == "claimed", t.c.claimed_by == reviewer, t.c.claim_expires_at > now)
        with self._db.read() as conn:
            row = conn.execute(stmt.order_by(t.c.id).limit(1)).first()
        return ReviewItem.from_row(row) if row is not None else None

    def claimable_count(self, reviewer: str, *, tenants: Iterable[str] | None = None, groups: Iterable[str] = (),
                        now: float | None = None) -> int:
        """Items waiting that ``reviewer`` could claim now."""
        now = now_s() if now is None else now
        t = review_items
        # ``state <> 'reviewed'`` and the queue test spelled out: the open-work partial index's
        # predicate, so the count reads the waiting work, not the scored-only history.
        stmt = sa.select(sa.func.count()).select_from(t).where(t.c.state != "reviewed", t.c.queue != SCORE_QUEUE,
                                                               claimable(now), *offered_to(reviewer, groups))
        if tenants is not None:
            stmt = stmt.where(t.c.tenant.in_(sorted(set(tenants))))
        with self._db.read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def save_draft(self, item_id: int, reviewer: str, draft: dict[str, Any], *, now: float | None = None) -> None:
        """Keep the claim holder's step-one labels; they cannot be changed afterwards."""
        now = now_s() if now is None else now
        text = dump_json(draft, "draft")
        t = review_items
        with self._db.write() as conn:
            self._held(conn, item_id, reviewer, now)
            done = conn.execute(sa.update(t).where(t.c.id == item_id, t.c.draft.is_(None)).values(draft=text))
            if done.rowcount != 1:
                raise ClaimError(f"the relevance labels of review item {item_id} were already given")

    def skip(self, item_id: int, reviewer: str, reason: str, *, now: float | None = None) -> None:
        """The reviewer passes on the item (with a reason); it returns to the queue for others."""
        if not reason.strip():
            raise ValueError("a skip needs a reason")
        now = now_s() if now is None else now
        t = review_items
        with self._db.write() as conn:
            self._held(conn, item_id, reviewer, now)
            conn.execute(sa.insert(review_skips).values(item_id=item_id, reviewer=reviewer, reason=reason, created_at=now))
            conn.execute(sa.update(t).where(t.c.id == item_id)
                         .values(state="queued", claimed_by=None, claim_expires_at=None, draft=None))

    def assign(self, assignee: str | None, *, count: int | None = None, tenant: str | None = None,
               item_ids: Iterable[int] | None = None) -> int:
        """Assign unreviewed items (oldest first) to a reviewer or ``group:<name>`` (None: anyone)."""
        t = review_items
        chosen = sa.select(t.c.id).where(t.c.state != "reviewed", t.c.queue != SCORE_QUEUE).order_by(t.c.id)
        if tenant is not None:
            chosen = chosen.where(t.c.tenant == tenant)
        if item_ids is not None:
            chosen = chosen.where(t.c.id.in_(list(item_ids)))
        if count is not None:
            chosen = chosen.limit(count)
        with self._db.write() as conn:
            ids = list(conn.execute(chosen).scalars())
            if ids:
                conn.execute(sa.update(t).where(t.c.id.in_(ids)).values(assigned_to=assignee))
        return len(ids)

    def unassigned_waiting(self, *, limit: int = 500) -> list[ReviewItem]:
        """Queued items assigned to nobody and reviewed by nobody yet, oldest first."""
        t = review_items
        reviewed = sa.select(reviews.c.id).where(reviews.c.item_id == t.c.id)
        stmt = (sa.select(t).where(t.c.state == "queued", t.c.queue != SCORE_QUEUE, t.c.assigned_to.is_(None),
                                   ~sa.exists(reviewed))
                .order_by(t.c.id).limit(limit))
        with self._db.read() as conn:
            return [ReviewItem.from_row(row) for row in conn.execute(stmt)]

    def all_reviews(self, item_ids: Iterable[int] | None = None) -> dict[int, list[Review]]:
        """Every review, by item, in the order given."""
        r = reviews
        stmt = sa.select(r).order_by(r.c.item_id, r.c.id)
        if item_ids is not None:
            stmt = stmt.where(r.c.item_id.in_(list(item_ids)))
        out: dict[int, list[Review]] = defaultdict(list)
        with self._db.read() as conn:
            for row in conn.execute(stmt):
                out[row.item_id].append(Review(row.id, row.item_id, row.reviewer, json.loads(row.labels), row.created_at))
        return dict(out)

    def reviewer_progress(self, *, now: float | None = None, recent_s: float = 3600.0) -> dict[str, dict[str, int]]:
        """Per reviewer: ``reviews``, ``recent`` (within ``recent_s``), ``skips`` and ``assigned_open``."""
        now = now_s() if now is None else now
        r, k, t = reviews, review_skips, review_items
        progress: dict[str, dict[str, int]] = defaultdict(lambda: {"reviews": 0, "recent": 0, "skips": 0, "assigned_open": 0})
        recent = sa.func.sum(sa.case((r.c.created_at >= now - recent_s, 1), else_=0))
        with self._db.read() as conn:
            for name, n, m in conn.execute(sa.select(r.c.reviewer, sa.func.count(), recent).group_by(r.c.reviewer)):
                progress[name]["reviews"], progress[name]["recent"] = int(n), int(m or 0)
            for name, n in conn.execute(sa.select(k.c.reviewer, sa.func.count()).group_by(k.c.reviewer)):
                progress[name]["skips"] = int(n)
            open_items = sa.select(t.c.assigned_to, sa.func.count()).where(t.c.state != "reviewed", t.c.assigned_to.is_not(None))
            for name, n in conn.execute(open_items.group_by(t.c.assigned_to)):
                progress[name]["assigned_open"] = int(n)
        return dict(progress)


def _why_not_claimed(item_id: int, reviewer: str, row: Any, now: float) -> Exception:
    if row is None:
        return NotFound(f"no review item {item_id}")
    m = row._mapping
    if m["state"] == "reviewed":
        return ClaimError(f"review item {item_id} was already reviewed")
    if m["state"] == "queued":
        return ClaimError(f"review item {item_id} is not claimed: claim it before submitting")
    if m["claimed_by"] != reviewer:
        return ClaimError(f"review item {item_id} is claimed by another reviewer")
    return ClaimError(f"the claim on review item {item_id} expired at {m['claim_expires_at']:.3f} (now {now:.3f})")
