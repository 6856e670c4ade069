"""Per-query data: the recent-records cache, feedback events and scorer results."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from rag_monitor.estimators import ScoredSums
from rag_monitor.record import QueryRecord

from .coordination import Locks
from .engine import Database, UnnestInsert
from .models import FeedbackEvent, ReviewItem, Score, dump_json, now_s, record_json
from .hot import decode_record, encode_record, referenced
from .partitions import SlotPartitions
from .schema import feedback, recent_documents, recent_records, review_items, score_sums, scorer_progress, scores


class RecentRecords:
    """``store.recent``: the short-lived cache of every query's redacted record, keyed by trace id; and the
    insert-once key that decides which replica counts a query.

    Thumbs-down often arrives after the query was assembled and not sampled; the cache lets
    the agent still pull it into review. Rows live in time slots of ``slot_s`` seconds, taken
    from the trace's own start time (clamped to ``[now - ttl/2, now + slot_s]``), so every
    replica that assembles a trace writes the same ``(trace_id, slot)`` key: the first insert
    wins, a retried export landing on another replica finds the key taken and is not counted
    again. A slot is dropped whole once it ends ``ttl_s`` before now. A trace whose start lies
    outside that range (a replay, a long batch query, a skewed clock) gets a slot that moves with
    ``now``, so its id is looked up in every slot first: such traces are rare, the lookup is one
    index probe per live slot, and a retry of such a trace minutes later is not counted again either.
    """

    def __init__(self, db: Database, ttl_s: float):
        if not ttl_s > 0:
            raise ValueError(f"recent-records ttl must be positive, got {ttl_s!r}")
        self._db = db
        self.ttl_s = ttl_s
        self.slot_s = slot_seconds(ttl_s)
        self._insert = (
            db.insert(recent_records).on_conflict_do_nothing(index_elements=["trace_id", "slot"])
            .returning(recent_records.c.trace_id)
        )
        self._put_document = db.insert(recent_documents).on_conflict_do_nothing(index_elements=["content_hash", "slot"])
        self._partitions = None if db.is_sqlite else SlotPartitions(db, self.slot_s)
        """On PostgreSQL each slot is a partition, dropped whole (``store/partitions.py``)."""
        self._put_records = UnnestInsert(recent_records, ["trace_id", "slot", "record", "added_at"],
                                         "ON CONFLICT (trace_id, slot) DO NOTHING RETURNING trace_id")
        self._put_documents = UnnestInsert(recent_documents, ["content_hash", "slot", "content"],
                                           "ON CONFLICT (content_hash, slot) DO NOTHING")

    def slot_of(self, start_ns: int, now: float) -> int:
        """The slot of a trace that started at ``start_ns`` (epoch ns), seen at ``now``."""
        return self._slot(start_ns, now)[0]

    def _slot(self, start_ns: int, now: float) -> tuple[int, bool]:
        """``(slot, moves)``: ``moves`` when the start was clamped, so the slot depends on ``now``."""
        start = start_ns / 1e9
        clamped = min(max(start, now - self.ttl_s / 2), now + self.slot_s)
        return int(clamped // self.slot_s) * self.slot_s, clamped != start

    def put(self, records: Iterable[QueryRecord | dict[str, Any]], now: float | None = None) -> int:
        """Write a batch in one transaction; returns how many were new."""
        with self._db.write() as conn:
            return len(self.put_in(conn, records, now))

    def put_in(self, conn: Connection, records: Iterable[QueryRecord | dict[str, Any]], now: float | None = None) -> set[str]:
        """``put`` inside the caller's transaction; returns the trace ids this call stored first
        (the others were stored already, by this replica or another: not to be counted again)."""
        added_at = now_s() if now is None else now
        rows, documents, moving = [], {}, []
        for record in records:
            trace_id = record.trace_id if isinstance(record, QueryRecord) else record_json(record)[0]
            start_ns = record.start_ns if isinstance(record, QueryRecord) else int(record.get("start_ns") or 0)
            slot, moves = self._slot(start_ns, added_at)
            if moves:
                moving.append(trace_id)
            blob, contents = encode_record(record)
            rows.append({"trace_id": trace_id, "slot": slot, "record": blob, "added_at": added_at})
            documents.update({(key, slot): text for key, text in contents.items()})
        if moving:  # stored in another slot already: not new
            stored = set(conn.execute(sa.select(recent_records.c.trace_id).where(
                self._db.any_of(recent_records.c.trace_id, moving))).scalars())
            rows = [row for row in rows if row["trace_id"] not in stored]
        if not rows:
            return set()
        documents = sorted(documents.items())  # each content once per slot, whichever record brought it first
        if not self._db.is_sqlite:
            return self._put_arrays_in(conn, rows, documents)
        if documents:
            conn.execute(self._put_document, [{"content_hash": key, "slot": slot, "content": text}
                                              for (key, slot), text in documents])
        return {row[0] for row in conn.execute(self._insert, rows)}

    def _put_arrays_in(self, conn: Connection, rows: list[dict[str, Any]], documents: list) -> set[str]:
        """PostgreSQL: each table's rows as one statement over column arrays (``UnnestInsert``)."""
        if documents:
            self._put_documents.execute_columns(conn, {
                "content_hash": [key for (key, _), _ in documents], "slot": [slot for (_, slot), _ in documents],
                "content": [text for _, text in documents]})
        return set(self._put_records.execute(conn, rows).scalars())

    def get(self, trace_id: str, *, live: bool = False, now: float | None = None) -> QueryRecord | None:
        """The cached record; with ``live``, None for one older than the ttl even if not pruned yet
        (pruning is a periodic job: the ttl, not its schedule, decides what a late complaint can do)."""
        r, d = recent_records, recent_documents
        query = sa.select(r.c.record, r.c.slot).where(r.c.trace_id == trace_id).order_by(r.c.slot).limit(1)
        if live:
            query = query.where(r.c.added_at >= (now_s() if now is None else now) - self.ttl_s)
        with self._db.read() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            keys = sorted(referenced(row.record))
            contents = dict(conn.execute(sa.select(d.c.content_hash, d.c.content).where(
                d.c.slot == row.slot, d.c.content_hash.in_(keys))).all()) if keys else {}
        return decode_record(row.record, contents)

    def count(self) -> int:
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(recent_records)).scalar_one()

    def prepare(self, now: float | None = None) -> None:
        """Create the partitions of the slots a write may pick from ``now`` until well after the
        next pruning run (a no-op on SQLite)."""
        if self._partitions is not None:
            now = now_s() if now is None else now
            self._partitions.ensure(self.slot_of(0, now), int(now) + 3 * self.slot_s)

    def prune(self, now: float | None = None) -> int:
        """Drop the slots that ended ``ttl_s`` ago; returns how many records went. On PostgreSQL
        their partitions are dropped (and the coming slots' created); what sits in the default
        partition, and everything on SQLite, goes by an indexed ``DELETE``."""
        now = now_s() if now is None else now
        cutoff = int(now - self.ttl_s - self.slot_s)
        dropped = 0
        if self._partitions is not None:
            self.prepare(now)
            dropped = self._partitions.drop_through(cutoff)["recent_records"]
        with self._db.write() as conn:
            conn.execute(sa.delete(recent_documents).where(recent_documents.c.slot <= cutoff))
            return dropped + conn.execute(sa.delete(recent_records).where(recent_records.c.slot <= cutoff)).rowcount


def slot_seconds(ttl_s: float) -> int:
    """Six slots per ttl (at least a minute each): a dropped slot is a sixth of the cache."""
    return max(60, int(ttl_s // 6))


class FeedbackLog:
    """``store.feedback``: user feedback events, each stored once (keyed: an exporter's retry is a no-op)."""

    def __init__(self, db: Database):
        self._db = db
        self._insert = (
            db.insert(feedback).on_conflict_do_nothing(index_elements=["trace_id", "key"]).returning(feedback.c.id)
        )

    def add(self, events: Iterable[FeedbackEvent]) -> int:
        with self._db.write() as conn:
            return len(self.add_in(conn, events))

    def add_in(self, conn: Connection, events: Iterable[FeedbackEvent]) -> list[FeedbackEvent]:
        """Store events inside the caller's transaction; an event whose key is stored already is
        skipped (an exporter's retry). Returns the events that were new."""
        events = list(events)
        rows = []
        for e in events:
            if not isinstance(e, FeedbackEvent):
                raise TypeError(f"expected FeedbackEvent, got {type(e).__name__} (see FeedbackEvent.from_feedback)")
            value = None if e.value is None else dump_json(e.value, "feedback value")
            rows.append({"trace_id": e.trace_id, "kind": e.kind, "reason": e.reason, "value": value, "time": e.time,
                         "key": e.key})
        # One statement per row: RETURNING tells which were new.
        return [e for e, row in zip(events, rows) if conn.execute(self._insert, row).first() is not None]

    def for_trace(self, trace_id: str) -> list[FeedbackEvent]:
        return self._select(feedback.c.trace_id == trace_id)

    def since(self, since: float) -> list[FeedbackEvent]:
        return self._select(feedback.c.time >= since)

    def for_traces(self, trace_ids: Iterable[str]) -> dict[str, list[FeedbackEvent]]:
        """``for_trace`` of many traces in one read per 500 (the IN list within every driver's limits)."""
        ids = sorted(set(trace_ids))
        out: dict[str, list[FeedbackEvent]] = {}
        for start in range(0, len(ids), 500):
            for event in self._select(feedback.c.trace_id.in_(ids[start:start + 500])):
                out.setdefault(event.trace_id, []).append(event)
        return out

    def _select(self, condition: sa.ColumnElement[bool]) -> list[FeedbackEvent]:
        f = feedback
        with self._db.read() as conn:
            rows = conn.execute(
                sa.select(f.c.trace_id, f.c.kind, f.c.time, f.c.reason, f.c.value, f.c.key).where(condition).order_by(f.c.time, f.c.id)
            ).all()
        return [FeedbackEvent(t, k, tm, r, None if v is None else json.loads(v), key) for t, k, tm, r, v, key in rows]


class Scores:
    """``store.scores``: scorer results, one row per (trace, scorer): re-scoring replaces, never
    doubles; the scorer's work queue (``unscored_items``, ``backlog``) and its running sums.

    Usage::

        for item in store.scores.unscored_items("support-v2", limit=50): ...
        store.scores.upsert(results, fence=("scorer", holder, token))   # -1: the lease was lost
    """

    def __init__(self, db: Database, locks: Locks):
        self._db = db
        self._locks = locks
        stmt = db.insert(scores)
        self._upsert = stmt.on_conflict_do_update(
            index_elements=["trace_id", "scorer"],
            set_={c: stmt.excluded[c] for c in ("score", "label", "scorer_version", "computed_at", "threshold", "claims")},
        )

    def upsert(self, results: Iterable[Score], *, now: float | None = None,
               fence: tuple[str, str, int] | None = None,
               sums: tuple[str, dict[tuple[str, str], ScoredSums]] | None = None) -> int:
        """Insert or replace (trace, scorer) results: re-scoring never doubles a row.

        ``fence=(lock, holder, token)`` writes only while ``holder`` still holds ``lock`` with that
        fencing token (checked in the write's transaction); returns -1, writing nothing, otherwise.
        ``sums=(scorer, {(release, variant): ScoredSums})`` adds to the scored sample's running
        sums in the same transaction (the scoring loop passes the newly scored items).
        """
        with self._db.write() as conn:
            if fence is not None and not self._locks.fence_in(conn, *fence):
                return -1
            written = self.upsert_in(conn, results, now)
            if sums is not None:
                self.add_sums_in(conn, *sums)
            return written

    def upsert_in(self, conn: Connection, results: Iterable[Score], now: float | None = None) -> int:
        """``upsert`` inside the caller's transaction."""
        default_time = now_s() if now is None else now
        rows = [
            {"trace_id": s.trace_id, "scorer": s.scorer, "score": s.score, "label": s.label,
             "scorer_version": s.scorer_version, "threshold": s.threshold, "claims": s.claims,
             "computed_at": default_time if s.computed_at is None else s.computed_at}
            for s in results
        ]
        if rows:
            conn.execute(self._upsert, rows)
        return len(rows)

    def add_sums_in(self, conn: Connection, scorer: str, sums: dict[tuple[str, str], ScoredSums]) -> None:
        """Add to the scored sample's running sums (in the fenced score write: counted once)."""
        t = score_sums
        fields = ("items", "w", "wf", "w2", "w2f", "w2f2")
        for (release, variant), add in sorted(sums.items()):
            key = (t.c.scorer == scorer, t.c.release == release, t.c.variant == variant)
            updated = conn.execute(sa.update(t).where(*key).values(
                **{f: t.c[f] + getattr(add, f) for f in fields})).rowcount
            if not updated:
                conn.execute(sa.insert(t).values(scorer=scorer, release=release, variant=variant,
                                                 **{f: getattr(add, f) for f in fields}))

    def sums(self, scorer: str) -> dict[tuple[str, str], ScoredSums]:
        """(release, variant) -> the scored sample's sums for ``scorer``."""
        t = score_sums
        with self._db.read() as conn:
            rows = conn.execute(sa.select(t).where(t.c.scorer == scorer)).all()
        return {(r.release, r.variant): ScoredSums(int(r.items), r.w, r.wf, r.w2, r.w2f, r.w2f2) for r in rows}

    def for_trace(self, trace_id: str) -> dict[str, Score]:
        with self._db.read() as conn:
            rows = conn.execute(sa.select(scores).where(scores.c.trace_id == trace_id)).all()
        return {row.scorer: _score(row) for row in rows}

    def for_traces(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Score]]:
        """``for_trace`` of many traces in one read: trace id -> scorer -> score."""
        ids = sorted(set(trace_ids))
        out: dict[str, dict[str, Score]] = {}
        with self._db.read() as conn:
            for start in range(0, len(ids), 500):  # keep the IN list within every driver's limits
                for row in conn.execute(sa.select(scores).where(scores.c.trace_id.in_(ids[start:start + 500]))):
                    out.setdefault(row.trace_id, {})[row.scorer] = _score(row)
        return out

    def by_scorer(self, scorer: str, since: float | None = None) -> list[Score]:
        stmt = sa.select(scores).where(scores.c.scorer == scorer).order_by(scores.c.computed_at, scores.c.trace_id)
        if since is not None:
            stmt = stmt.where(scores.c.computed_at >= since)
        with self._db.read() as conn:
            return [_score(row) for row in conn.execute(stmt)]

    def unscored_items(self, scorer: str, limit: int = 100, now: float | None = None) -> list[ReviewItem]:
        """Review items ``scorer`` has not scored yet, oldest first (its backlog).

        Reads only the items above the scorer's low-water mark, which this call advances past
        every settled item it scored: O(backlog), never O(every item ever scored).
        """
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        with self._db.write() as conn:
            low = self._low_water(conn, scorer)
            stmt = (
                sa.select(review_items)
                .where(review_items.c.id > low, ~_scored(scorer))
                .order_by(review_items.c.id)
                .limit(limit)
            )
            rows = conn.execute(stmt).all()
            self._advance(conn, scorer, low, rows[0].id if rows else None, now_s() if now is None else now)
        items, seen = [], set()
        for row in rows:  # the same trace may sit in two queues: score it once
            if row.trace_id not in seen:
                seen.add(row.trace_id)
                items.append(ReviewItem.from_row(row))
        return items

    def backlog(self, scorer: str | None = None) -> int:
        """Distinct queued traces without a score from ``scorer`` (None: from any scorer)."""
        with self._db.read() as conn:
            low = self._low_water(conn, scorer)
            stmt = sa.select(sa.func.count(sa.distinct(review_items.c.trace_id))).where(
                review_items.c.id > low, ~_scored(scorer))
            return conn.execute(stmt).scalar_one()

    def queued_after(self, item_id: int) -> int:
        """Distinct traces queued with an id above ``item_id``: the backlog of a scorer that has
        scored every unscored item up to ``item_id`` (``unscored_items`` hands them out in id
        order). A range of the primary key, no anti-join against ``scores``."""
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.count(sa.distinct(review_items.c.trace_id))).where(
                review_items.c.id > item_id)).scalar_one()

    @staticmethod
    def _low_water(conn: Connection, scorer: str | None) -> int:
        """Items at or below this id are scored by ``scorer`` (None: by the least advanced scorer)."""
        p = scorer_progress
        if scorer is None:
            # Only a scorer that has run marks anything; with none, nothing is known scored.
            return conn.execute(sa.select(sa.func.min(p.c.low_water_id))).scalar_one_or_none() or 0
        return conn.execute(sa.select(p.c.low_water_id).where(p.c.scorer == scorer)).scalar_one_or_none() or 0

    def _advance(self, conn: Connection, scorer: str, low: int, first_unscored: int | None, now: float) -> None:
        """Move the mark below the first unscored item, and never past an item younger than
        ``SETTLE_S``: an id is handed out before its transaction commits, so a lower id may
        still appear until every transaction that started with it has ended."""
        t = review_items
        settled = conn.execute(
            sa.select(sa.func.max(t.c.id)).where(t.c.id > low, t.c.created_at <= now - SETTLE_S)
        ).scalar_one_or_none()
        if settled is None:
            return
        mark = settled if first_unscored is None else min(settled, first_unscored - 1)
        if mark > low:
            stmt = self._db.insert(scorer_progress).values(scorer=scorer, low_water_id=mark)
            conn.execute(stmt.on_conflict_do_update(index_elements=["scorer"], set_={"low_water_id": mark}))


SETTLE_S = 60.0
"""Longer than any ingest transaction runs (the store's busy timeout is seconds)."""


def _scored(scorer: str | None) -> sa.ColumnElement[bool]:
    condition = scores.c.trace_id == review_items.c.trace_id
    if scorer is not None:
        condition = sa.and_(condition, scores.c.scorer == scorer)
    return sa.exists().where(condition)


def _score(row: Any) -> Score:
    return Score(row.trace_id, row.scorer, row.score, row.scorer_version, row.label, row.computed_at, row.threshold, row.claims)
