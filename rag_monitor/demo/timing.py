"""The demo app's stage durations come from its traffic script, not from the time its Python took.

The latency the agent reads is span end minus span start. Were the spans timed by the clock, a
busy machine (CI running other tests beside the demo) would decide the story's latency: r1's own
compute would pass the SLO and r2's scripted +0.35 s would drown in the noise. So each stage of a
query is recorded at scripted times: a base duration per stage (``StageDurations``, shortened for a
cache hit) with a deterministic jitter, plus the release's scripted delays (r2's slower retrieval
and generation, the provider update's slow tail). Stages are sequential from the query's start; the
query ends when its last stage does. The app then waits until the wall clock reaches that end, so
on an idle machine a query takes the time it reports (the traffic keeps its pace); on a busy one it
takes longer than it reports, and the reported latency stays the script's.

Usage::

    timeline = Timeline.starting_now(key=("r1", question, session_id, 3))
    start, end = timeline.next("retrieve", 0.025)     # nanoseconds, from the previous stage's end
    with q.retrieve(start_time_ns=start) as r: ...; r.end(end)
    timeline.wait(time.sleep); q.end(timeline.end_ns)
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageDurations:
    """Seconds each stage of the demo app takes, before jitter and the release's scripted delays:
    about what a small hosted embedding model, a vector index, a reranker and a small generator
    answer in. Their sum (about 0.11 s) keeps the quick demo's 6 queries a second on one thread."""

    embed_s: float = 0.010
    retrieve_s: float = 0.025
    rerank_s: float = 0.015
    generate_s: float = 0.060
    cache_hit_s: float = 0.001
    """A lookup served from the app's embedding or retrieval cache."""
    jitter: float = 0.5
    """Each stage takes (1 - jitter/2 .. 1 + jitter/2) times its base, uniform per query and stage."""


def _unit(*parts: object) -> float:
    """A stable uniform number in [0, 1) for these parts (Python's hash() is salted per process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass
class Timeline:
    """One query's scripted stage times, in nanoseconds since the epoch (the span clock)."""

    start_ns: int
    key: tuple = ()
    """What makes this query's jitter its own (release, question, session, count): repeatable."""
    jitter: float = StageDurations.jitter
    end_ns: int = field(init=False)

    def __post_init__(self) -> None:
        self.end_ns = self.start_ns

    @classmethod
    def starting_now(cls, key: tuple = (), jitter: float = StageDurations.jitter) -> Timeline:
        return cls(time.time_ns(), key, jitter)

    def next(self, stage: str, base_s: float, extra_s: float = 0.0) -> tuple[int, int]:
        """``(start, end)`` of the next stage: ``base_s`` jittered, then ``extra_s`` (a scripted delay) as is."""
        seconds = base_s * (1 - self.jitter / 2 + self.jitter * _unit(*self.key, stage)) + extra_s
        start = self.end_ns
        self.end_ns = start + int(round(seconds * 1e9))
        return start, self.end_ns

    def at(self) -> int:
        """An instant at the current end (a bare stage: a filter, the context)."""
        return self.end_ns

    def wait(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Until the wall clock reaches the scripted end: the user waits what the query reports."""
        delay = (self.end_ns - time.time_ns()) / 1e9
        if delay > 0:
            sleep(delay)
