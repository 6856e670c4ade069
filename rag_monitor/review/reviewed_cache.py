"""The reviewed items every review collector reads, kept in memory and refreshed incrementally.

The false-exclusion, judged-rate, signal and unsupported-rate collectors all estimate from the
same ``(ReviewItem, first Review)`` pairs of the last 30 days. The agent builds one
``ReviewedCache`` and hands it to each of them: the store is read at most once per
``min_interval_s`` however many scrapes arrive, and a refresh reads only what changed:

- reviews stored since the newest one seen, less ``OVERLAP_S`` (a replica's review committed
  late, or stamped by a slightly slow clock, still arrives; pairs are keyed by item, so a
  re-read replaces, never doubles);
- the reviewed items of traces with feedback stored since the feedback id seen ``OVERLAP_S``
  ago: late feedback is the one thing that changes a reviewed item (its inclusion probability,
  weight and record, ``ReviewQueue.enqueue_in``), in the transaction that stores the feedback.
  Looking back a window of ids, not just above the newest, catches a transaction that took its
  id before another's but committed after it.

A full read every ``resync_s`` drops what retention deleted and anything changed another way
(an operator's ``store.queue.enqueue``). ``invalidate()`` (this replica stored a review) makes the
next read refresh at once. ``version`` changes whenever the pairs do, so a collector recomputes
its estimates only then.

Items are kept from an hour (``SLACK_S``) before the window: the false-exclusion gauge counts
the window to the hour.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from rag_monitor.store.models import Review, ReviewItem

Pair = tuple[ReviewItem, Review]

OVERLAP_S = 120.0
"""How far behind the newest review and feedback seen each refresh reads again (commit lag, clock skew)."""
SLACK_S = 3600.0
"""Kept before the window, for a reader that counts its window to the hour."""


class ReviewedCache:
    def __init__(self, queue, *, window_s: float = 30 * 86400, min_interval_s: float = 10.0,
                 resync_s: float = 3600.0, clock=time.time):
        self.queue = queue
        """The store's review queue (``store.queue``), where reviewed items are read."""
        self._changes = getattr(queue, "reviewed_changed", None)
        """``ReviewQueue.reviewed_changed``; a queue without it (a test's fake) is read whole each refresh."""
        self.window_s = window_s
        """The longest window a reader may ask for (``pairs(since)`` with ``since >= now - window_s``)."""
        self.min_interval_s = min_interval_s
        self.resync_s = resync_s
        self.clock = clock
        self._lock = threading.Lock()
        self._pairs: dict[int, Pair] = {}
        """Item id -> (item, its first review)."""
        self._sorted: list[Pair] | None = []
        self._refreshed_at = -float("inf")
        self._resynced_at = -float("inf")
        self._dirty = True
        self._newest_review = 0.0
        self._feedback_marks: deque[tuple[float, int]] = deque()
        """(time read, newest feedback id then), oldest first: the changes read lag ``OVERLAP_S``."""
        self.version = 0
        """Changes whenever the pairs do."""
        self.rows_read = 0
        """New reviews taken in so far (tests check that a refresh reads only what changed)."""
        self.store_reads = 0
        """Refreshes that read the store (tests count them against scrapes)."""

    def invalidate(self) -> None:
        """Refresh on the next read, within ``min_interval_s`` or not (this replica stored a review)."""
        self._dirty = True

    def pairs(self, since: float | None = None) -> list[Pair]:
        """The pairs whose first review is at or after ``since``, oldest review first (as
        ``Store.reviewed(since)`` returns them); refreshed when ``min_interval_s`` has passed."""
        return self.read(since)[1]

    def read(self, since: float | None = None) -> tuple[int, list[Pair]]:
        """``pairs(since)`` with the ``version`` they are of."""
        self.refresh(force=False)
        with self._lock:
            ordered, version = self._ordered(), self.version
        if since is not None:
            ordered = [p for p in ordered if p[1].created_at >= since]
        return version, list(ordered)

    def refresh(self, *, force: bool = True) -> None:
        """Take in what changed in the store (``force``: whatever the interval; the scheduled job)."""
        with self._lock:
            now = self.clock()
            if not (force or self._dirty or now - self._refreshed_at >= self.min_interval_s):
                return
            horizon = now - self.window_s - SLACK_S
            if self._changes is None or now - self._resynced_at >= self.resync_s:
                self._resync(now, horizon)
            else:
                self._take_changes(now, horizon)
            self._refreshed_at = now
            self._dirty = False
            self.store_reads += 1

    def _resync(self, now: float, horizon: float) -> None:
        if self._changes is not None:  # where the next refresh's changes start, read before the pairs
            self._feedback_marks.append((now, self._changes(None)[1]))
        pairs = {item.id: (item, review) for item, review in self.queue.reviewed(since=horizon)}
        self.rows_read += sum(1 for item_id, (_, review) in pairs.items()
                              if item_id not in self._pairs or self._pairs[item_id][1].id != review.id)
        if pairs != self._pairs:
            self._pairs = pairs
            self._changed()
        self._newest_review = max((r.created_at for _, r in pairs.values()), default=0.0)
        self._resynced_at = now

    def _take_changes(self, now: float, horizon: float) -> None:
        changed, feedback_id = self._changes(self._lagged_feedback_id(now))
        since = max(horizon, self._newest_review - OVERLAP_S) if self._newest_review else horizon
        for item, review in [*self.queue.reviewed(since=since), *changed]:
            if review.created_at < horizon:
                continue
            old = self._pairs.get(item.id)
            if old is None or old[1].id != review.id:
                self.rows_read += 1
            if old != (item, review):
                self._pairs[item.id] = (item, review)
                self._changed()
            self._newest_review = max(self._newest_review, review.created_at)
        expired = [i for i, (_, review) in self._pairs.items() if review.created_at < horizon]
        for item_id in expired:
            del self._pairs[item_id]
        if expired:
            self._changed()
        self._feedback_marks.append((now, feedback_id))  # once taken in: a failed refresh reads them again

    def _lagged_feedback_id(self, now: float) -> int:
        """The newest feedback id read ``OVERLAP_S`` ago or before (the oldest read, early on)."""
        marks = self._feedback_marks
        while len(marks) > 1 and marks[1][0] <= now - OVERLAP_S:
            marks.popleft()
        return marks[0][1]

    def _changed(self) -> None:
        self.version += 1
        self._sorted = None

    def _ordered(self) -> list[Pair]:
        if self._sorted is None:
            self._sorted = sorted(self._pairs.values(), key=lambda p: (p[1].created_at, p[1].id))
        return self._sorted
