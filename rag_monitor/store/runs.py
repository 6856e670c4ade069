"""Scheduled drift runs: one row per (profile, scheduled slot), claimed under a lease, so exactly
one replica runs each slot and a run whose replica died is taken over once its lease lapses."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from .engine import Database
from .models import DriftRun, dump_json, now_s
from .schema import drift_runs

RUN_STATUSES = ("ok", "failed")


class DriftRuns:
    """``store.drift_runs``: scheduled drift runs, each run once across replicas.

    Usage::

        if store.drift_runs.claim("answers", slot, holder):      # exactly one replica per slot
            store.drift_runs.finish("answers", slot, holder, result={...})
    """

    def __init__(self, db: Database):
        self._db = db

    def claim(
        self,
        profile: str,
        scheduled_for: float,
        holder: str,
        *,
        lease_s: float = 900.0,
        signal: str | None = None,
        detector: str | None = None,
        now: float | None = None,
    ) -> bool:
        """True if ``holder`` won the run; a run whose holder's lease lapsed unfinished is re-claimable."""
        if not holder:
            raise ValueError("holder must be a non-empty replica id")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be positive, got {lease_s!r}")
        now = now_s() if now is None else now
        r = drift_runs
        with self._db.write() as conn:
            inserted = conn.execute(
                self._db.insert(r)
                .values(profile=profile, scheduled_for=scheduled_for, signal=signal, detector=detector,
                        holder=holder, attempts=1, lease_expires_at=now + lease_s, started_at=now,
                        status="running")
                .on_conflict_do_nothing(index_elements=["profile", "scheduled_for"])
                .returning(r.c.id)
            ).first()
            if inserted is not None:
                return True
            # Someone claimed it before: take over only an interrupted run.
            return conn.execute(
                sa.update(r)
                .where(r.c.profile == profile, r.c.scheduled_for == scheduled_for,
                       r.c.status == "running", r.c.lease_expires_at <= now)
                .values(holder=holder, attempts=r.c.attempts + 1, lease_expires_at=now + lease_s,
                        started_at=now, signal=signal, detector=detector)
            ).rowcount == 1

    def finish(
        self,
        profile: str,
        scheduled_for: float,
        holder: str,
        *,
        status: str = "ok",
        result: dict[str, Any] | None = None,
        now: float | None = None,
    ) -> bool:
        """Store the outcome; False when ``holder`` no longer holds the run (another replica took it over)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {status!r}")
        result_json = None if result is None else dump_json(result, "drift result")
        r = drift_runs
        with self._db.write() as conn:
            return conn.execute(
                sa.update(r)
                .where(r.c.profile == profile, r.c.scheduled_for == scheduled_for, r.c.holder == holder,
                       r.c.status == "running")
                .values(status=status, result=result_json, finished_at=now_s() if now is None else now)
            ).rowcount == 1

    def get(self, profile: str, scheduled_for: float) -> DriftRun | None:
        r = drift_runs
        with self._db.read() as conn:
            row = conn.execute(sa.select(r).where(r.c.profile == profile, r.c.scheduled_for == scheduled_for)).first()
        return _run(row) if row is not None else None

    def list(self, profile: str | None = None, *, limit: int = 100, tested: bool = False) -> list[DriftRun]:
        """Most recent first; ``tested``: only runs that tested a window (their result carries
        the page evidence), skipping the many runs that waited for one."""
        r = drift_runs
        stmt = sa.select(r).order_by(r.c.scheduled_for.desc(), r.c.id.desc()).limit(limit)
        if profile is not None:
            stmt = stmt.where(r.c.profile == profile)
        if tested:
            stmt = stmt.where(r.c.result.like('%"log_evidence":%'))
        with self._db.read() as conn:
            return [_run(row) for row in conn.execute(stmt)]


def _run(row: Any) -> DriftRun:
    return DriftRun(
        row.id, row.profile, row.scheduled_for, row.signal, row.detector, row.holder, row.attempts,
        row.lease_expires_at, row.started_at, row.finished_at, row.status,
        None if row.result is None else json.loads(row.result),
    )
