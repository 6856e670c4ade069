"""Every periodic job of the agent, declared in one place and run by one APScheduler.

A ``Job`` has a name, the callable it runs, its interval (a setting) and, when it must run on
one replica at a time, a lease in the shared store (``store/coordination.py``'s lease locks,
named ``job:<name>``, renewed by each run of the holder and taken over once it lapses). Every run
updates ``rag_agent_job_last_success_timestamp_seconds{job}`` and
``rag_agent_job_duration_seconds{job}``; a run that raises is logged and counted in
``rag_agent_job_failures_total{job}`` and the schedule goes on.

To add a job, declare it in ``agent_jobs`` below with its interval setting (or, for a job outside
the agent's planes, ``agent.jobs.add(Job(...))`` before ``agent.start()``).

    scheduler = JobScheduler(metrics, try_lock=store.locks.try_lock, holder="agent-1")
    scheduler.add(Job("expiry", pipeline.expire, interval_s=5.0))
    scheduler.start(); ...; scheduler.shutdown()
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apscheduler.jobstores.base import JobLookupError

from rag_monitor.agent.component import DEGRADED, FAILED, HEALTHY, Component, Health, Part
from rag_monitor.agent.droplog import REPORT_INTERVAL_S, DropLog
from rag_monitor.alerts.metrics import AgentMetrics

if TYPE_CHECKING:
    from rag_monitor.agent.service import Agent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    name: str
    run: Callable[[], object]
    interval_s: float
    lease_s: float = 0.0
    """> 0: one replica at a time runs it, holding the store lease ``job:<name>`` this long."""


def _quiet_skips(record: logging.LogRecord) -> bool:
    """Drop APScheduler's warning for a tick skipped while the job still runs: on a busy machine the
    no-op second instance (``max_instances=2``) may not have returned yet, and a skipped tick is the
    coalescing ``run`` does on purpose (``rag_agent_job_duration_seconds`` shows the slow runs)."""
    return "maximum number of running instances reached" not in record.getMessage()


class JobScheduler:
    """One APScheduler ``BackgroundScheduler`` for the process: its own thread and worker pool."""

    def __init__(self, metrics: AgentMetrics, try_lock: Callable[[str, str, float], bool] | None = None,
                 holder: str = "agent", max_workers: int = 8):
        self.metrics = metrics
        self.try_lock = try_lock
        self.holder = holder
        self.max_workers = max_workers
        self.jobs: dict[str, Job] = {}
        self._running: dict[str, threading.Lock] = {}
        self._failing: dict[str, str] = {}
        """Jobs whose last run raised, with the error: later failures log one line, not the traceback
        again; the job's component reports itself degraded meanwhile (``health``)."""
        self._scheduler = None

    def add(self, job: Job) -> None:
        if job.name in self.jobs:
            raise ValueError(f"job {job.name!r} is declared twice")
        if not job.interval_s > 0:
            raise ValueError(f"job {job.name!r}: interval must be positive, got {job.interval_s!r}")
        if job.lease_s and self.try_lock is None:
            raise ValueError(f"job {job.name!r} needs a lease but the scheduler has no store")
        self.jobs[job.name] = job
        self._running[job.name] = threading.Lock()
        if self._scheduler is not None:
            self._schedule(job)

    def run(self, name: str) -> bool:
        """Run one job now (the scheduler's entry point, and tests'); False when another replica holds its lease."""
        job = self.jobs[name]
        running = self._running[name]
        if not running.acquire(blocking=False):
            return False  # still running from the last tick: this tick is skipped (coalesced)
        try:
            if job.lease_s and not self.try_lock(f"job:{job.name}", self.holder, job.lease_s):
                return False
            started = time.monotonic()
            try:
                job.run()
            except Exception as exc:  # noqa: BLE001 - one bad run must not stop the schedule
                self.metrics.job_failures.labels(job.name).inc()
                if job.name in self._failing:  # the traceback was logged at the first failure
                    log.error("periodic job %s failed again: %s: %s", job.name, type(exc).__name__, exc)
                else:
                    log.exception("periodic job %s failed", job.name)
                self._failing[job.name] = f"{type(exc).__name__}: {exc}"[:200]
                return True
            finally:
                self.metrics.job_duration.labels(job.name).observe(time.monotonic() - started)
            self.metrics.job_last_success.labels(job.name).set(time.time())
            if job.name in self._failing:
                del self._failing[job.name]
                log.info("periodic job %s succeeded again", job.name)
            return True
        finally:
            running.release()

    def wakeup(self, name: str) -> None:
        """Run a job now rather than at its next tick (e.g. forwarding, when spans arrive in an empty queue)."""
        from datetime import datetime, timezone

        if self._scheduler is not None and self._scheduler.running:
            with contextlib.suppress(JobLookupError):
                self._scheduler.modify_job(name, next_run_time=datetime.now(timezone.utc))

    def _schedule(self, job: Job) -> None:
        # A slow run makes the next ticks no-ops (``run`` skips while one runs) instead of piling up;
        # two instances let that skip happen quietly rather than as APScheduler's warning.
        self._scheduler.add_job(functools.partial(self.run, job.name), "interval", seconds=job.interval_s,
                                id=job.name, name=job.name, coalesce=True, max_instances=2,
                                misfire_grace_time=None)

    def start(self) -> None:
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler

        # APScheduler logs "Running job ... executed successfully" at INFO on every tick: DEBUG
        # chatter, unless the host configured its logger (rag_monitor.logs does for the CLI).
        chatter = logging.getLogger("apscheduler")
        if chatter.level == logging.NOTSET and not logging.getLogger().isEnabledFor(logging.DEBUG):
            chatter.setLevel(logging.WARNING)
        logging.getLogger("apscheduler.scheduler").addFilter(_quiet_skips)
        self._scheduler = BackgroundScheduler(daemon=True, executors={"default": ThreadPoolExecutor(self.max_workers)})
        for job in self.jobs.values():
            self._schedule(job)
        self._scheduler.start()

    def shutdown(self, wait: bool = True) -> None:
        """Stop firing; with ``wait``, return once running jobs have finished."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    def health(self, *names: str) -> Health:
        """Degraded while one of the jobs ``names`` failed its last run (the component of a job)."""
        failing = [f"{name}: {self._failing[name]}" for name in names if name in self._failing]
        return Health(DEGRADED, "last run failed: " + "; ".join(failing)) if failing else HEALTHY

    def component(self) -> Component:
        """The ``scheduler`` component: last to start (every job's work exists), first to stop."""
        return Part("scheduler", start=self.start, stop=self.shutdown,
                    health=lambda: HEALTHY if self.running else Health(FAILED, "not running"),
                    settings={"max_workers": self.max_workers})


CALIBRATION_INTERVAL_S = 600.0
"""How often scorer_threshold auto recalibrates on the store's labels (labels arrive by the hour)."""


def agent_jobs(agent: Agent) -> list[Job]:
    """The agent's periodic jobs, with their interval settings and leases."""
    from rag_monitor.agent.drift.runs import fire_interval_s

    s = agent.settings
    expiry_s = max(1.0, min(10.0, agent.limits.root_timeout_s / 4))
    jobs = [
        # Pending traces live in this process: every replica expires its own.
        Job("expiry", agent.pipeline.expire, expiry_s),
        # Every replica checks the queries it received against the shared session windows.
        Job("regeneration", agent.regeneration.tick, s.regeneration_check_interval_s),
        # Store-wide clean-up: one replica is enough.
        Job("store_pruning", agent.prune_store, s.prune_interval_s, lease_s=max(30.0, 3 * s.prune_interval_s)),
        # ScoringLoop takes its own (fenced) scoring lease inside the tick.
        Job("scoring", agent.scoring.tick, s.score_interval_s),
        # Every replica answers scrapes, so every replica refreshes its cache (incrementally).
        Job("scrape_cache", agent.reviewed.refresh, s.scrape_cache_interval_s),
    ]
    if agent.store.dialect == "sqlite":  # the log's copy into the database, off the request path
        jobs.append(Job("store_checkpoint", agent.store.checkpoint, s.checkpoint_interval_s))
    if getattr(agent, "probe_runner", None) is not None:
        # One replica runs the probe set; the lease outlasts a run whose every probe times out.
        runner = agent.probe_runner
        worst_run_s = -(-len(runner.probes) // runner.concurrency) * s.probes_timeout_s
        jobs.append(Job("probes", agent.run_probes, s.probes_interval_s, lease_s=2 * s.probes_interval_s + worst_run_s))
    if getattr(agent, "threshold_adopter", None) is not None:  # scorer_threshold auto; every replica sets its own scorer
        jobs.append(Job("scorer_threshold", agent.threshold_adopter.tick, CALIBRATION_INTERVAL_S))
    if getattr(agent, "judging", None) is not None:  # the LLM judge beside the scorer, its own lease inside
        jobs.append(Job("judging", agent.judging.tick, s.score_interval_s))
    # One line a minute at most when spans or traces were dropped (the counters say by reason).
    drops = DropLog([agent.metrics.spans_dropped, agent.metrics.traces_dropped, agent.metrics.forwarded_spans],
                    keep=lambda labels: labels.get("outcome", "dropped") == "dropped")
    jobs.append(Job("drop_log", drops.tick, REPORT_INTERVAL_S))
    if agent.forwarder is not None:
        jobs.append(Job("forwarding", agent.forwarder.drain, s.forward_interval_s))
    if agent.profiles:
        jobs.append(Job("drift_feed", agent.drift_feed.tick, s.drift_feed_interval_s))
        # Each run claims its schedule slot in the store (store.drift_runs.claim): once across replicas.
        jobs += [Job(f"drift:{p.name}", functools.partial(agent.drift.run_due, p), fire_interval_s(p))
                 for p in agent.profiles]
    return jobs
