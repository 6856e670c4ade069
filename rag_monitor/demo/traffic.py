"""Scripted traffic: phases of simulated users asking the demo app, deterministic with a seed.

The story, phase by phase (``plan_phases``):

1. ``baseline``: release r1, mostly support-policy questions.
2. ``shift``: the query mix shifts: general-knowledge questions (CLAP NQ) arrive.
3. ``bad-release``: release r2 goes out; its relevance filter drops the current policy so
   answers come from the archived one, and it is slower. Users who notice the outdated answer
   press thumbs-down and regenerate (ask again).

The full demo (not ``--quick``) plays a provider update between 2 and 3: still release r1, but
the generator's provider answers the same requested model with a new version with a slow tail
(every third answer 4 s slower); the latency page is triaged as a suspected regression after that
model change, not as drift.

Usage::

    script = build_script(phase, corpus, seed=7)    # the same questions and users for the same seed
    stats = TrafficRunner(corpus, apps, seed=7).run(phase, script, progress=ProgressBar(sys.stderr))
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from rag_monitor import semconv
from rag_monitor.demo.app import BAD_RELEASE, GENERATOR_MODEL, GOOD_RELEASE, Answer, ReleaseConfig, SupportApp, User
from rag_monitor.demo.corpus import Corpus, Question


@dataclass(frozen=True)
class Phase:
    name: str
    description: str
    release: ReleaseConfig
    duration_s: float
    queries_per_s: float
    mix: Mapping[str, float]
    """Shares of ``policy``, ``nq`` and ``unanswerable`` questions."""
    users_notice: bool = False
    """Users recognise an answer from an archived policy and complain."""
    shadow: ReleaseConfig | None = None
    """A candidate pipeline answering beside the release in shadow, reviewed blind in pairs."""

    @property
    def queries(self) -> int:
        return max(1, int(round(self.duration_s * self.queries_per_s)))


MODEL_VERSIONS = ("2025-01", "2025-06")
"""The generator's provider versions in the full demo: before and after the provider update."""
UPDATE_QPS = 0.5
"""The provider update's rate: what one thread serves with its slow tail (about 1.6 s per answer on
average), and still 10 queries per 20 s latency window, twice the demo's minimum."""


def plan_phases(quick: bool = False, release_suffix: str = "", scale: float = 1.0) -> list[Phase]:
    """The demo's phases; ``quick`` is the shortened mode of the test (``run.QUICK_DURATION``).

    The full demo adds a provider update between the shift and the bad release: the same release
    r1, the generator's provider answering with a new model version under the same requested name
    (slower), so the latency alert is triaged as a suspected regression after that model change
    rather than drift. The quick demo's timeline (22 + 16 + 24 s) has no room for a fourth phase
    whose alert must fire and clear before r2 ships, so it keeps the three.

    ``release_suffix`` names this run's releases (``r1-2``...) so that a continued run deploys
    releases the agent has not seen before. ``scale`` stretches durations (benchmarks, --serve).
    """
    from dataclasses import replace

    # The slow release cannot keep the others' rate on one thread: it gets a rate it can serve,
    # so phases last what they say.
    if quick:
        durations, qps, bad_qps, delays = (22.0, 16.0, 24.0), 6.0, 2.0, (0.1, 0.25)
    else:
        durations, qps, bad_qps, delays = (60.0, 45.0, 60.0), 5.0, 1.5, (0.15, 0.4)
    durations = tuple(d * scale for d in durations)
    good = replace(GOOD_RELEASE, name=GOOD_RELEASE.name + release_suffix)
    bad = replace(BAD_RELEASE, name=BAD_RELEASE.name + release_suffix, retrieval_delay_s=delays[0], generation_delay_s=delays[1])
    provider_update = []
    if not quick:
        good = replace(good, model_version=MODEL_VERSIONS[0])
        # Slow by far more than r1 (about 0.11 s a query, scripted: demo/timing.py), so the
        # comparison sees it with margin: every third answer waits 4 s more.
        updated = replace(good, model_version=MODEL_VERSIONS[1], generation_delay_s=0.2, slow_every=3, slow_delay_s=4.0)
        bad = replace(bad, model_version=MODEL_VERSIONS[1])
        provider_update = [Phase(
            "provider-update", f"no release: the provider answers {GENERATOR_MODEL} with a new, slower model version",
            updated, 60.0 * scale, UPDATE_QPS, {"policy": 0.85, "nq": 0.1, "unanswerable": 0.05})]
    return [
        Phase("baseline", "release r1, support-policy questions", good, durations[0], qps,
              {"policy": 0.85, "nq": 0.1, "unanswerable": 0.05}),
        Phase("shift", "new topics arrive (general-knowledge questions)", good, durations[1], qps,
              {"policy": 0.25, "nq": 0.65, "unanswerable": 0.1}),
        *provider_update,
        Phase("bad-release", "release r2: relevance filter serves archived policies, slower", bad, durations[2], bad_qps,
              {"policy": 0.7, "nq": 0.25, "unanswerable": 0.05}, users_notice=True,
              # the fixed pipeline, in shadow: current policies, no invented sentences
              shadow=replace(bad, name=bad.name + "-fix", serve_archived_versions=False, embellish_share=0.0)),
    ]


@dataclass(frozen=True)
class ScriptedQuery:
    question: Question
    user: User


def build_script(phase: Phase, corpus: Corpus, seed: int) -> list[ScriptedQuery]:
    """The phase's questions and askers, a pure function of (phase name, seed)."""
    rng = random.Random(f"{seed}:{phase.name}")
    pools = {"policy": corpus.policy_questions, "nq": corpus.nq_questions, "unanswerable": corpus.unanswerable_questions}
    kinds = list(phase.mix)
    weights = [phase.mix[k] for k in kinds]
    users = _population(rng, 40)
    script = []
    for _ in range(phase.queries):
        kind = rng.choices(kinds, weights)[0]
        script.append(ScriptedQuery(rng.choice(pools[kind]), rng.choice(users)))
    return script


def _population(rng: random.Random, n: int) -> list[User]:
    users = []
    for i in range(n):
        tenant = rng.choice(("acme", "acme", "globex"))
        locale = "de" if rng.random() < 0.1 else "en"
        users.append(User(f"user-{rng.randrange(16**6):06x}", tenant, locale, f"session-{i}-{rng.randrange(16**8):08x}"))
    return users


# --- running ----------------------------------------------------------------------------------


@dataclass
class PhaseStats:
    phase: str
    release: str
    queries: int = 0
    refused: int = 0
    archived_answers: int = 0
    feedback: Counter = field(default_factory=Counter)
    trace_ids: list[str] = field(default_factory=list)
    thumbs_down_trace_ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    index_lag: dict[float, float] = field(default_factory=dict)
    """Freshness-lag histogram buckets added during the phase (``demo/signals.py``)."""


class ProgressBar:
    """A one-line progress bar on a terminal (plain lines elsewhere, e.g. in CI logs)."""

    def __init__(self, stream: TextIO | None = sys.stderr, width: int = 30) -> None:
        self.stream = stream
        self.width = width
        self._tty = bool(stream) and getattr(stream, "isatty", lambda: False)()
        self._last_line = -1.0

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.stream is None:
            return
        filled = int(self.width * done / max(1, total))
        line = f"  {label:<12} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        if self._tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
            self.stream.flush()
        elif done >= total or time.monotonic() - self._last_line > 10:
            self._last_line = time.monotonic()
            self.stream.write(line + "\n")
            self.stream.flush()


class TrafficRunner:
    """Plays scripts against the deployed app; simulated users give feedback through the SDK."""

    def __init__(self, corpus: Corpus, apps: Mapping[str, SupportApp], seed: int, sleep: Callable[[float], None] = time.sleep) -> None:
        self.corpus = corpus
        self.apps = apps
        self.seed = seed
        self.sleep = sleep
        self._archived = {d.id for d in corpus.documents if d.metadata.get("archived")}

    def run(
        self,
        phase: Phase,
        script: Sequence[ScriptedQuery],
        progress: Callable[[str, int, int], None] | None = None,
        on_query: Callable[[Answer], None] | None = None,
    ) -> PhaseStats:
        app = self.apps[phase.name]
        rng = random.Random(f"{self.seed}:{phase.name}:users")
        stats = PhaseStats(phase.name, phase.release.name)
        interval = 1.0 / phase.queries_per_s
        start = time.monotonic()
        for n, item in enumerate(script):
            # Keep the scripted rate; a slow release just falls behind.
            delay = start + n * interval - time.monotonic()
            if delay > 0:
                self.sleep(delay)
            answer = app.ask(item.question.text, item.user)
            self._count(stats, answer)
            if on_query:
                on_query(answer)
            self._react(phase, app, item, answer, rng, stats, on_query)
            if progress:
                progress(phase.name, n + 1, len(script))
        stats.wall_s = time.monotonic() - start
        return stats

    def _count(self, stats: PhaseStats, answer: Answer) -> None:
        stats.queries += 1
        stats.refused += answer.refused
        stats.archived_answers += bool(set(answer.citations) & self._archived)
        stats.trace_ids.append(answer.trace_id)

    def _react(self, phase: Phase, app: SupportApp, item: ScriptedQuery, answer: Answer, rng: random.Random,
               stats: PhaseStats, on_query: Callable[[Answer], None] | None) -> None:
        """What a simulated user does after reading the answer."""
        monitor = app.monitor
        outdated = bool(set(answer.citations) & self._archived)
        if phase.users_notice and outdated and rng.random() < 0.8:
            self._feedback(monitor, stats, answer, semconv.FEEDBACK_THUMBS_DOWN, reason="outdated policy")
            if rng.random() < 0.6:
                self._feedback(monitor, stats, answer, semconv.FEEDBACK_REGENERATE)
                again = app.ask(item.question.text, item.user)  # the same question, same session
                self._count(stats, again)
                if on_query:
                    on_query(again)
            return
        if answer.refused and rng.random() < 0.15:
            self._feedback(monitor, stats, answer, semconv.FEEDBACK_THUMBS_DOWN, reason="no answer")
        elif not answer.refused and rng.random() < 0.02:
            self._feedback(monitor, stats, answer, semconv.FEEDBACK_THUMBS_DOWN, reason="not helpful")
        elif not answer.refused and rng.random() < 0.15:
            self._feedback(monitor, stats, answer, semconv.FEEDBACK_THUMBS_UP)

    @staticmethod
    def _feedback(monitor: Any, stats: PhaseStats, answer: Answer, kind: str, reason: str | None = None) -> None:
        monitor.feedback(answer.trace_id, kind, reason=reason)
        stats.feedback[kind] += 1
        if kind == semconv.FEEDBACK_THUMBS_DOWN:
            stats.thumbs_down_trace_ids.append(answer.trace_id)
