"""Which queries the drift feed embeds, decided before embedding, so the embedder's work is set
by the window and reservoir sizes, not by the traffic.

- ``IntervalReservoir``: per schedule slot, the ``size`` queries with the smallest trace-id hash.
  That is a uniform sample without replacement of every query of the slot (a reservoir over the
  interval): it spans the whole slot at any rate, never looks at content, gives a replayed query
  the same answer, and the union of several replicas' samples holds the slot's overall smallest
  hashes (what a run tests, ``jobs.test_window``). The slot's sample is released once the slot
  is over.
- ``ReferencePresample``: Algorithm R over every query of the reference period, split in two.
  Query ``n`` (0-based, in the order the store counts them) enters Algorithm R's reservoir with
  chance ``capacity / (n + 1)``. The feed cannot know ``n`` exactly (other replicas add to the
  count), but it knows a lower bound: the store's count when last read plus the queries it has
  seen since. It keeps a query with chance ``q = capacity / (bound + 1)`` (at least the true
  chance), counts the ones it passes over, and the store applies the rest (``chance / q``) with
  the exact position (``store/drift.py``). Each query's overall chance is Algorithm R's, so the
  reference is uniform over all traffic of the period, peak hours included, while the feed embeds
  about ``capacity x (1 + ln(queries / capacity))`` queries over the whole period.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import math
import random
from typing import Any


@functools.lru_cache(maxsize=1024)  # the drift feed hashes each trace once per signal it tests
def unit_hash(trace_id: str) -> float:
    """A trace id's position in [0, 1), uniform for random ids (a stable hash, not Python's salted one)."""
    return int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=8).digest(), "big") / 2**64


def smallest_hashes(trace_ids: list[str], size: int) -> list[int]:
    """Indices of the ``size`` trace ids with the smallest hash, in their original order."""
    if len(trace_ids) <= size:
        return list(range(len(trace_ids)))
    return sorted(heapq.nsmallest(size, range(len(trace_ids)), key=lambda i: unit_hash(trace_ids[i])))


class IntervalReservoir:
    """The ``size`` smallest-hash items of each ``interval_s`` slot, released when the slot is over.

    Items of a slot already released arrive late (a trace assembled after its slot ended): they
    are counted in ``late`` and not sampled.
    """

    def __init__(self, interval_s: float, size: int):
        self.interval_s = float(interval_s)
        self.size = int(size)
        self._open: dict[float, list] = {}  # slot -> max-heap of (-hash, seq, item)
        self._arrivals: dict[float, int] = {}
        self._released_until = -math.inf
        self._seq = itertools.count()
        self.late = 0

    def offer(self, time: float, trace_id: str, item: Any, unit: float | None = None) -> None:
        """``unit``: ``unit_hash(trace_id)`` when the caller has it already."""
        slot = math.floor(time / self.interval_s) * self.interval_s
        if slot < self._released_until:
            self.late += 1
            return
        heap = self._open.setdefault(slot, [])
        self._arrivals[slot] = self._arrivals.get(slot, 0) + 1
        entry = (-(unit_hash(trace_id) if unit is None else unit), next(self._seq), item)
        if len(heap) < self.size:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:  # a smaller hash than the largest kept
            heapq.heapreplace(heap, entry)

    def release(self, now: float) -> list[tuple[list, int]]:
        """``(sample, arrivals)`` of every slot over by ``now``, oldest first."""
        out = []
        for slot in sorted(s for s in self._open if s + self.interval_s <= now):
            out.append(([entry[2] for entry in self._open.pop(slot)], self._arrivals.pop(slot)))
            self._released_until = max(self._released_until, slot + self.interval_s)
        return out


class ReferencePresample:
    """The feed's half of Algorithm R over the reference period (see the module's docstring)."""

    def __init__(self, capacity: int, seed: int | None = None):
        self.capacity = int(capacity)
        self._rng = random.Random(seed)
        self._counted = 0  # the store's count when last read
        self._offered = 0  # queries offered to this feed for this reference
        self._reported = 0  # of those, how many the store has counted (written ones and the passed over before them)
        self._reported_in_count = 0  # ... of which the count last read holds
        self.skipped_pending = 0  # passed over since the last kept one: travels with the next kept one

    def refresh(self, seen: int) -> None:
        """The store's count now, which holds every write reported so far (and no later one)."""
        self._counted, self._reported_in_count = int(seen), self._reported

    def reported(self, n: int) -> None:
        """``n`` more of this feed's queries are in the store's count (written, or passed over before those)."""
        self._reported += n

    def offer(self) -> tuple[float, int] | None:
        """``(keep_probability, skipped_before)`` for a kept query, None for one passed over."""
        # every query offered and not yet counted by the store comes after the count last read
        bound = self._counted + self._offered - self._reported_in_count
        self._offered += 1
        q = min(1.0, self.capacity / (bound + 1))
        if q >= 1.0 or self._rng.random() < q:
            skipped, self.skipped_pending = self.skipped_pending, 0
            return q, skipped
        self.skipped_pending += 1
        return None
