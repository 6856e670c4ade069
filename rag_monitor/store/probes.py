"""Neighbour-stability probes in the store: pinned baselines, runs and announced index changes.

Replicas agree on all of it: one replica at a time runs the probe set (a job lease), every
replica exports the latest finished run's comparisons at scrape time, and ``rag-monitor probes
pin|announce`` write here::

    probes = store.probes
    probes.pin({"p1": ("refund window", 10, ["doc-a", "doc-b"])}, by="cli")
    run = probes.start_run("agent-1")
    probes.finish_run(run, [Comparison("p1", "refund window", 10, ("doc-b", "doc-a"), 1.0, 0.9, pinned_at)], errors=0)
    probes.results(probes.latest_run().id)          # [ProbeBaseline(..., jaccard=1.0, rbo=0.9)]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from .engine import Database
from .models import now_s
from .schema import index_changes, probe_baselines, probe_runs

KEEP_RUNS = 1000
"""Finished runs kept (for ``probes show``); older rows are deleted as new runs finish."""


@dataclass(frozen=True)
class ProbeBaseline:
    probe_id: str
    name: str
    k: int
    baseline_ids: tuple[str, ...]
    pinned_at: float
    pinned_by: str
    latest_ids: tuple[str, ...] | None = None
    run_id: int | None = None
    jaccard: float | None = None
    rbo: float | None = None


@dataclass(frozen=True)
class ProbeRun:
    id: int
    holder: str
    started_at: float
    finished_at: float | None
    probes: int
    compared: int
    errors: int


@dataclass(frozen=True)
class Comparison:
    """One probe's successful retrieval compared with its baseline (``pinned_at`` is the baseline
    it was compared with; None: the probe had none and this top-k becomes it)."""

    probe_id: str
    name: str
    k: int
    ids: tuple[str, ...]
    jaccard: float
    rbo: float
    pinned_at: float | None


def _baseline(row) -> ProbeBaseline:
    return ProbeBaseline(
        row.probe_id, row.name, int(row.k), tuple(json.loads(row.baseline_ids)), row.pinned_at, row.pinned_by,
        None if row.latest_ids is None else tuple(json.loads(row.latest_ids)),
        row.run_id, row.jaccard, row.rbo,
    )


class ProbeStates:
    def __init__(self, db: Database):
        self._db = db

    def baselines(self, probe_ids: Iterable[str] | None = None) -> dict[str, ProbeBaseline]:
        stmt = sa.select(probe_baselines).order_by(probe_baselines.c.name)
        if probe_ids is not None:
            stmt = stmt.where(probe_baselines.c.probe_id.in_(list(probe_ids)))
        with self._db.read() as conn:
            return {row.probe_id: _baseline(row) for row in conn.execute(stmt)}

    def pin(self, top_k: Mapping[str, tuple[str, int, Sequence[str]]], *, by: str, now: float | None = None) -> int:
        """Make each ``probe_id -> (name, k, ids)`` the new baseline; its last comparison is cleared."""
        now = now_s() if now is None else now
        rows = [{"probe_id": pid, "name": name, "k": k, "baseline_ids": json.dumps(list(ids)), "pinned_at": now,
                 "pinned_by": by, "latest_ids": None, "run_id": None, "jaccard": None, "rbo": None}
                for pid, (name, k, ids) in top_k.items()]
        if not rows:
            return 0
        stmt = self._db.insert(probe_baselines)
        stmt = stmt.on_conflict_do_update(
            index_elements=["probe_id"],
            set_={c: getattr(stmt.excluded, c) for c in ("name", "k", "baseline_ids", "pinned_at", "pinned_by",
                                                          "latest_ids", "run_id", "jaccard", "rbo")},
        )
        with self._db.write() as conn:
            conn.execute(stmt, rows)
        return len(rows)

    def unpin(self, probe_ids: Sequence[str]) -> int:
        """Forget these probes' baselines: the next run that retrieves them pins them."""
        if not probe_ids:
            return 0
        with self._db.write() as conn:
            return conn.execute(sa.delete(probe_baselines).where(probe_baselines.c.probe_id.in_(list(probe_ids)))).rowcount

    def start_run(self, holder: str, *, now: float | None = None) -> int:
        with self._db.write() as conn:
            return int(conn.execute(
                sa.insert(probe_runs).values(holder=holder, started_at=now_s() if now is None else now)
                .returning(probe_runs.c.id)
            ).scalar_one())

    def finish_run(self, run_id: int, comparisons: Sequence[Comparison], *, errors: int, now: float | None = None) -> int:
        """Store a run's comparisons (and pin probes that had no baseline); returns how many were stored.

        A comparison is stored only against the baseline it was made with: a ``probes pin`` that
        landed while the run was retrieving wins, and the next run compares with the new baseline.
        """
        now = now_s() if now is None else now
        stored = 0
        t = probe_baselines
        with self._db.write() as conn:
            for c in comparisons:
                ids = json.dumps(list(c.ids))
                if c.pinned_at is None:
                    result = conn.execute(
                        self._db.insert(t).values(
                            probe_id=c.probe_id, name=c.name, k=c.k, baseline_ids=ids, pinned_at=now, pinned_by="auto",
                            latest_ids=ids, run_id=run_id, jaccard=c.jaccard, rbo=c.rbo,
                        ).on_conflict_do_nothing(index_elements=["probe_id"]).returning(t.c.probe_id)
                    )
                else:
                    result = conn.execute(
                        sa.update(t).where(t.c.probe_id == c.probe_id, t.c.pinned_at == c.pinned_at)
                        .values(name=c.name, latest_ids=ids, run_id=run_id, jaccard=c.jaccard, rbo=c.rbo)
                        .returning(t.c.probe_id)
                    )
                # RETURNING, not rowcount: psycopg reports -1 for an INSERT ... ON CONFLICT DO NOTHING.
                stored += result.first() is not None
            conn.execute(
                sa.update(probe_runs).where(probe_runs.c.id == run_id)
                .values(finished_at=now, probes=len(comparisons) + errors, compared=stored, errors=errors)
            )
            conn.execute(sa.delete(probe_runs).where(probe_runs.c.id <= run_id - KEEP_RUNS))
        return stored

    def latest_run(self) -> ProbeRun | None:
        """The most recent finished run, whichever replica ran it."""
        stmt = (sa.select(probe_runs).where(probe_runs.c.finished_at.is_not(None))
                .order_by(probe_runs.c.id.desc()).limit(1))
        with self._db.read() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else ProbeRun(row.id, row.holder, row.started_at, row.finished_at,
                                                 row.probes, row.compared, row.errors)

    def results(self, run_id: int) -> list[ProbeBaseline]:
        """The probes compared in run ``run_id`` (failed probes and re-pinned ones are not)."""
        stmt = sa.select(probe_baselines).where(probe_baselines.c.run_id == run_id).order_by(probe_baselines.c.name)
        with self._db.read() as conn:
            return [_baseline(row) for row in conn.execute(stmt)]

    def announce(self, until: float, note: str, *, now: float | None = None) -> None:
        """Announce an intended index change: overlap alerts hold off until ``until``."""
        now = now_s() if now is None else now
        if not until > now:
            raise ValueError("an announced index change must end in the future")
        with self._db.write() as conn:
            conn.execute(sa.insert(index_changes).values(announced_at=now, until=until, note=note))

    def announced_until(self, *, now: float | None = None) -> float | None:
        """The end of the latest announced change still in force, or None."""
        now = now_s() if now is None else now
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.max(index_changes.c.until)).where(index_changes.c.until > now)).scalar()
