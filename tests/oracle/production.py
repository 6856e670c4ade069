"""The oracle at production rates: what the traffic and its delivery look like, shared by
``tests/oracle/test_production.py`` (short) and ``benchmarks/oracle.py --scenario production``.

- Sampling as shipped (``rag_monitor/defaults/detectors/sampling.yaml``: 1% base rate, so a
  weight of 100, complaints at 1.0, the other strata at their shipped rates).
- Queries over a month (``days``), arriving in bursts: many within a second, then quiet.
- Two replicas behind a trace-id load balancer, with exporter retries across them: a share of
  the bodies is sent again to the other replica (a retry after a timeout whose first attempt
  was stored), and one replica is killed mid-run: its traffic goes to the other from then on,
  and the body it acknowledged last is retried there too. The store's insert-once key decides
  which replica counts a query.

A plan is a list of steps, cut into bursts (``Post``: one body to one replica; ``Kill``), so a
process-based test and an in-process benchmark run the same delivery.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rag_monitor.sdk.ids import root_span_id
from rag_monitor.simulate import Traffic

KNOBS = {"days": 30.0, "burst": 20}
"""The simulator's knobs of the production scenarios: a month of traffic, in bursts of 20 to 40."""
BURST_NS = 10**9
COPY_SHARE = 0.15
"""Share of the bodies an exporter retries on the other replica."""
RETRY_GUARD_S = 5.0
KILL_GUARD_S = 20.0
"""Between the victim's last body and its retry: its counts settle, it is scraped and killed."""


def production_sampling() -> dict:
    """The shipped sampling rates, with no scoring budget (the truth assumes none binds)."""
    from rag_monitor.config_files import shipped_path

    rates = yaml.safe_load(Path(shipped_path("sampling_config")).read_text())
    return {**rates, "score_budget": 0}


@dataclass
class Post:
    replica: int
    spans: list
    retry: bool = False
    """A copy of a body already stored by the other replica (an exporter's retry)."""
    guard_s: float = 0.0
    """Seconds the body and its retry need within one recent-records slot (see ``slot_guard``)."""


@dataclass
class Kill:
    replica: int


@dataclass
class Plan:
    bursts: list[list[Post | Kill]]
    duplicated: set[str] = field(default_factory=set)
    """Traces whose root went to a replica a second time."""
    duplicated_whole: set[str] = field(default_factory=set)
    """Of those, the ones retried with every span sent so far: each is an assembled duplicate there.
    A root retried alone (its other spans came in an earlier body) may not make a record at all
    (an OpenInference root alone is no RAG query: dropped as ``not_rag``): counted once either way."""
    retried_spans: int = 0
    """Spans sent a second time (the receivers count every span they accept)."""
    killed: int | None = None
    orphan_candidates: set[str] = field(default_factory=set)
    """Root-lost traces only the killed replica held: it may die before expiring them (they are
    partial traces, not queries), so the partial-trace count may miss them."""

    @property
    def steps(self) -> list[Post | Kill]:
        return [step for burst in self.bursts for step in burst]


def _is_root(span) -> bool:
    return span.parent is None and span.context.span_id == root_span_id(span.context.trace_id)


def bursts(traffic: Traffic) -> list[list[list]]:
    """Phase 0's bodies cut into bursts where the roots' start times jump by more than a second
    (a body holding both sides is split): a re-ask, seconds after its query, is never in the same
    burst, so checking re-asks between bursts keeps a session's queries in order."""
    groups: list[list[list]] = [[]]
    start = None
    for batch in traffic.phases[0]:
        body: list = []
        for span in batch.spans:
            if _is_root(span):
                if start is not None and span.start_time - start > BURST_NS:
                    if body:
                        groups[-1].append(body)
                    groups.append([])
                    body = []
                    start = span.start_time
                elif start is None:
                    start = span.start_time
            body.append(span)
        if body:
            groups[-1].append(body)
    return _carry_unrooted([g for g in groups if g])


def _carry_unrooted(groups: list[list[list]]) -> list[list[list]]:
    """Move a trace's spans sent before its root into the burst of its root: between bursts the
    harness waits (for re-ask checks, for a kill), and a trace waiting for its root over that
    wait could pass the test's root timeout (2 s) on a loaded machine."""
    roots_in = [{s.context.trace_id for body in g for s in body if _is_root(s)} for g in groups]
    will_root = set().union(*roots_in)
    rooted: set[int] = set()
    carry: list = []
    out = []
    for group, roots in zip(groups, roots_in):
        if carry:
            group = [carry + group[0], *group[1:]]
        rooted |= roots
        carry = []
        kept = []
        for body in group:
            stay = [s for s in body if s.context.trace_id in rooted or s.context.trace_id not in will_root]
            carry += [s for s in body if not (s.context.trace_id in rooted or s.context.trace_id not in will_root)]
            if stay:
                kept.append(stay)
        if kept:
            out.append(kept)
    if carry:
        out.append([carry])
    return out


def plan(traffic: Traffic, seed: int, replicas: int = 2, copy_share: float = COPY_SHARE,
         kill_at: float | None = 0.5) -> Plan:
    """The delivery of phase 0: by trace id to ``replicas``; ``copy_share`` of the bodies retried on
    another replica; the last replica killed at the first burst past ``kill_at`` of the bodies.

    A body is retried only when every trace in it has its root in it or already sent: a retried
    copy of a root-less body would leave the other replica waiting for a root it never gets, and
    it would count the trace as partial after its root timeout, a race with the original
    replica's assembly that a real root timeout (seconds, not the test's 2 s) makes rare.

    The kill: the victim's share of the burst's first body is the last body it acknowledges;
    then it dies and that body is retried on the survivor. The feedback still to come for
    queries rooted before the kill is sent before it (the kill takes seconds; the truth counts
    'late' feedback within the recent-records TTL).
    """
    rng = random.Random(seed ^ 0x5E7D)
    alive = list(range(replicas))
    out = Plan([])
    rooted: set[int] = set()
    receivers: dict[int, set[int]] = {}
    sent: dict[int, set[int]] = {}  # trace id -> span ids sent so far
    groups = bursts(traffic)
    kill_group = _kill_group(groups, kill_at) if replicas > 1 else None
    if kill_group is not None:
        groups = _feedback_before(groups, kill_group)
    lost = {q.trace_id for q in traffic.scenario.queries if q.root_lost}

    def send(steps: list, replica: int, spans: list) -> Post:
        post = Post(replica, spans)
        steps.append(post)
        for span in spans:
            receivers.setdefault(span.context.trace_id, set()).add(replica)
            sent.setdefault(span.context.trace_id, set()).add(span.context.span_id)
        rooted.update(s.context.trace_id for s in spans if _is_root(s))
        return post

    for index, group in enumerate(groups):
        steps: list[Post | Kill] = []
        if index == kill_group:
            out.killed = victim = alive[-1]
            first = group[0]
            last = [s for s in first if s.context.trace_id % replicas == victim]
            group = [[s for s in first if s.context.trace_id % replicas != victim], *group[1:]]
            alive.pop()
            if last:  # its acknowledgement lost with it: the exporter retries on the survivor
                post = send(steps, victim, last)
                post.guard_s = KILL_GUARD_S
                steps.append(Kill(victim))
                _retry(out, steps, post, alive[0], sent)
            else:
                steps.append(Kill(victim))
        for body in group:
            for replica, spans in _runs(body, replicas, alive):
                post = send(steps, replica, spans)
                others = [r for r in alive if r != replica]
                if others and rng.random() < copy_share and all(s.context.trace_id in rooted for s in spans):
                    post.guard_s = RETRY_GUARD_S
                    _retry(out, steps, post, rng.choice(others), sent)
        out.bursts.append(steps)
    if out.killed is not None:
        out.orphan_candidates = {f"{t:032x}" for t in lost if receivers.get(t) == {out.killed}}
    return out


def _kill_group(groups: list[list[list]], kill_at: float | None) -> int | None:
    """The first burst (not the first) after ``kill_at`` of the bodies."""
    if kill_at is None:
        return None
    total, done = sum(len(g) for g in groups), 0
    for index, group in enumerate(groups):
        if index and done >= kill_at * total:
            return index
        done += len(group)
    return None


def _feedback_before(groups: list[list[list]], index: int) -> list[list[list]]:
    """The spans after burst ``index`` of traces rooted before it (their feedback), moved to a
    body at the end of the burst before it."""
    rooted = {s.context.trace_id for g in groups[:index] for body in g for s in body if _is_root(s)}
    moved: list = []
    later = []
    for group in groups[index:]:
        kept_group = []
        for body in group:
            moved += [s for s in body if s.context.trace_id in rooted]
            kept = [s for s in body if s.context.trace_id not in rooted]
            if kept:
                kept_group.append(kept)
        if kept_group:
            later.append(kept_group)
    before = [*groups[:index - 1], [*groups[index - 1], moved] if moved else groups[index - 1]]
    return before + later


def slot_guard(ttl_s: float, guard_s: float, clock=time.time) -> None:
    """Wait for the next recent-records slot when fewer than ``guard_s`` seconds are left in this one.

    The insert-once key is (trace id, slot), the slot taken from the trace's start clamped to
    ``now - ttl/2`` (``RecentRecords.slot_of``): the simulator's traces start months before the
    wall clock, so their slot is the arrival's, and a retry arriving in the next slot would be a
    new key. Real retries come seconds after traces that started seconds before: same slot."""
    if guard_s <= 0:
        return
    from rag_monitor.store.records import slot_seconds

    slot_s = slot_seconds(ttl_s)
    left = slot_s - (clock() - ttl_s / 2) % slot_s
    if left < guard_s:
        time.sleep(left + 0.05)


def _retry(out: Plan, steps: list, post: Post, replica: int, sent: dict[int, set[int]]) -> None:
    steps.append(Post(replica, post.spans, retry=True))
    out.retried_spans += len(post.spans)
    in_body: dict[int, set[int]] = {}
    for span in post.spans:
        in_body.setdefault(span.context.trace_id, set()).add(span.context.span_id)
    for root in (s for s in post.spans if _is_root(s)):
        trace = root.context.trace_id
        out.duplicated.add(f"{trace:032x}")
        if sent[trace] <= in_body[trace]:
            out.duplicated_whole.add(f"{trace:032x}")


def _runs(spans: list, replicas: int, alive: list[int]) -> list[tuple[int, list]]:
    """Consecutive spans for one replica (by trace id, a dead one's share to the first alive):
    roots stay in query order whichever replica each goes to."""
    runs: list[tuple[int, list]] = []
    for span in spans:
        replica = span.context.trace_id % replicas
        if replica not in alive:
            replica = alive[0]
        if runs and runs[-1][0] == replica:
            runs[-1][1].append(span)
        else:
            runs.append((replica, [span]))
    return runs


def counted_by(plan_: Plan, traffic: Traffic, replica: int, until_kill: bool = True) -> int:
    """Queries ``replica`` stores first (and counts) in the steps before the kill."""
    first: dict[int, int] = {}
    for step in plan_.steps:
        if isinstance(step, Kill):
            if until_kill:
                break
            continue
        for span in step.spans:
            if _is_root(span):
                first.setdefault(span.context.trace_id, step.replica)
    return sum(r == replica for r in first.values())


def deliver(plan_: Plan, ttl_s: float, store_url: str):
    """``run_oracle``'s ``deliver`` for agent processes: the plan's bodies back to back (waiting for
    the re-ask checks only before a query whose session's previous one went to another replica),
    the victim killed with ``kill -9`` once
    what it acknowledged is counted and scraped; then the late feedback (``harness.finish``)."""
    from rag_monitor.simulate.wire import Batch
    from tests.oracle.harness import Delivery, LateClock, counters_only, finish, regeneration_checked, scrape, settle
    from tests.services import wait_until

    def run(traffic: Traffic, agents: list):
        late = LateClock()
        live, frozen = list(agents), []
        earlier = session_predecessors(traffic)
        unchecked: dict[int, int] = {}  # root trace id -> the replica it went to, not yet checked for re-asks
        for burst in plan_.bursts:
            for step in burst:
                if isinstance(step, Kill):
                    victim = agents[step.replica]
                    # What it sampled is scored (by whichever replica holds the scorer's lease): a
                    # score written by the victim after its last scrape would be counted nowhere.
                    settle(traffic, live, store_url, partial_traces=0)
                    frozen.append(_last_scrape(victim, counted_by(plan_, traffic, step.replica), scrape,
                                               regeneration_checked, counters_only, wait_until))
                    victim.proc.kill()
                    victim.proc.wait()
                    live.remove(victim)
                    continue
                roots = [s.context.trace_id for s in step.spans if _is_root(s)]
                if any(unchecked.get(earlier.get(t), step.replica) != step.replica for t in roots):
                    # A session's query on another replica: checked there before this one is.
                    regeneration_checked([agents[r] for r in sorted(set(unchecked.values())) if agents[r] in live])
                    unchecked.clear()
                slot_guard(ttl_s, step.guard_s)
                late.post(agents[step.replica].otlp_url, step.spans, Batch(step.spans).body())
                if not step.retry:
                    unchecked.update((t, step.replica) for t in roots)
        counted_elsewhere = int(sum(_sum(text, "rag_queries_total") for text in frozen))
        finish(traffic, live, counted_elsewhere)
        duplicates = sum(a.metric_sum("rag_agent_traces_duplicate_total") for a in live) + \
            sum(_sum(text, "rag_agent_traces_duplicate_total") for text in frozen)
        checks = [duplicates_check(plan_, duplicates)]
        return Delivery(late.longest, live, frozen, plan_.retried_spans, len(plan_.orphan_candidates), checks)

    return run


def duplicates_check(plan_: Plan, found: float):
    """Every retried whole trace found stored already; a root retried alone at most once more."""
    from rag_monitor.simulate.oracle import Check

    low, high = len(plan_.duplicated_whole), len(plan_.duplicated)
    return Check("duplicate traces (retries across replicas, counted where first stored)", f"{low}..{high}", found,
                 low <= found <= high)


def session_predecessors(traffic: Traffic) -> dict[int, int]:
    """trace id -> the trace of its session's previous query when that started within the
    regeneration window before it: the pairs whose order the re-ask check depends on."""
    from rag_monitor.simulate.truth import REGENERATION_WINDOW_NS

    last: dict[str, object] = {}
    out = {}
    for q in sorted(traffic.truth.records, key=lambda q: q.start_ns):
        previous = last.get(q.session_id)
        if previous is not None and q.start_ns - previous.start_ns <= REGENERATION_WINDOW_NS:
            out[q.trace_id] = previous.trace_id
        last[q.session_id] = q
    return out


def _sum(text: str, name: str) -> float:
    from rag_monitor.simulate.oracle import Samples

    return Samples([text]).sum(name)


def _last_scrape(victim, counted: int, scrape, regeneration_checked, counters_only, wait_until) -> str:
    """The victim's counters once every query it stored first is counted, its re-asks checked and
    its sinks drained: Prometheus's last scrape of it before the kill."""
    wait_until(lambda: victim.metric_sum("rag_queries_total") >= counted, timeout=60,
               what=f"the victim's {counted} queries counted")
    regeneration_checked([victim])
    wait_until(lambda: victim.metric_sum("rag_agent_sink_queue_depth") == 0, timeout=60, what="the victim's sinks drained")
    def moving(text: str) -> list[float]:
        return [_sum(text, name) for name in _SETTLED]

    text = scrape(victim)
    while True:  # nothing the traffic moves is moving any more (a sink's worker may hold one item)
        time.sleep(0.3)
        again = scrape(victim)
        if moving(again) == moving(text):
            return counters_only(again)
        text = again


_SETTLED = ("rag_queries_total", "rag_feedback_total", "rag_regenerations_total", "rag_cost_usd_total",
            "rag_faithfulness_weighted_total", "rag_agent_traces_partial_total")
