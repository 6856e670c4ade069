"""Scheduled drift runs: once per profile and schedule slot, across every replica.

A run belongs to the slot ``floor(now / interval) * interval``. ``Store.claim_run`` lets exactly
one replica take a slot (a unique row in the store). Replicas try the current slot several times
per interval; a run that dies midway leaves a lease that lapses within half a slot, and the next
try redoes it. APScheduler fires the jobs; torch and
BLAS stay single-threaded inside the agent.

Usage::

    scheduler = DriftScheduler(store, profiles, holder="agent-1")
    scheduler.start(); ...; scheduler.shutdown()
    run_profile(store, profile, holder="cli")       # one run now, e.g. from tests
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence

from rag_monitor.detectors.profiles import EMBEDDING_SIGNALS, DriftProfile

log = logging.getLogger(__name__)

SHIFTED_EXAMPLES = 10


def slot_of(profile: DriftProfile, now: float) -> float:
    return math.floor(now / profile.interval_s) * profile.interval_s


def run_lease_s(profile: DriftProfile) -> float:
    """How long a claimed run may take before another replica may redo it.

    Half a slot (5 s to 10 minutes): a run whose replica died is redone within its slot.
    """
    return max(5.0, min(profile.interval_s / 2, 600.0))


def fire_interval_s(profile: DriftProfile) -> float:
    """Each replica tries the current slot four times per interval; all but one try are a cheap no-op."""
    return max(1.0, profile.interval_s / 4)


def most_shifted(reference, current, trace_ids: list[str], n: int = SHIFTED_EXAMPLES) -> list[dict]:
    """The current items farthest from the reference (cosine distance to the nearest reference vector)."""
    import numpy as np

    ref = reference / np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
    cur = current / np.maximum(np.linalg.norm(current, axis=1, keepdims=True), 1e-12)
    nearest = np.empty(len(cur), dtype=np.float64)
    for start in range(0, len(cur), 1024):  # chunked: never a full n x m matrix
        nearest[start:start + 1024] = (cur[start:start + 1024] @ ref.T).max(axis=1)
    order = np.argsort(nearest)[:n]
    return [{"trace_id": trace_ids[i], "distance": float(1 - nearest[i])} for i in order]


def run_profile(store, profile: DriftProfile, holder: str, now: float | None = None) -> dict | None:
    """Run ``profile`` for its current slot if this holder wins it; the stored result, or None."""
    now = time.time() if now is None else now
    slot = slot_of(profile, now)
    if not store.claim_run(profile.name, slot, holder, signal=profile.signal, detector=profile.detector,
                           lease_s=run_lease_s(profile), now=now):
        return None
    try:
        reference, _ = store.reservoir_get(profile.signal, "reference")
        since = now - profile.current_max_age_s if profile.current_max_age_s else None
        current, trace_ids = store.reservoir_get(profile.signal, "current", since=since)
        n_ref, n_cur = len(reference), len(current)
        if n_ref < profile.reference_size or n_cur < profile.min_current:
            result = {"status": "skipped", "reason": f"windows too small: reference {n_ref}/{profile.reference_size}, current {n_cur}/{profile.min_current}",
                      "n_reference": n_ref, "n_current": n_cur, "signal": profile.signal, "detector": profile.detector}
            store.finish_run(profile.name, slot, holder, status="ok", result=result, now=now)
            return result
        if profile.signal in EMBEDDING_SIGNALS:
            current = current[-profile.current_size:]
            trace_ids = trace_ids[-profile.current_size:]
        else:
            current = current[-profile.current_size:]
        detector = profile.build_detector().fit(reference)
        verdict = detector.predict(current)
        result = {f.name: getattr(verdict, f.name) for f in dataclasses.fields(verdict) if f.name != "metadata"}
        result["metadata"] = {k: v for k, v in verdict.metadata.items() if isinstance(v, (int, float, str, bool)) or v is None}
        result["status"] = "done"
        if profile.signal in EMBEDDING_SIGNALS:
            result["most_shifted"] = most_shifted(reference, current, trace_ids)
        store.finish_run(profile.name, slot, holder, status="ok", result=result, now=now)
        return result
    except Exception as exc:
        log.exception("drift run %s failed", profile.name)
        store.finish_run(profile.name, slot, holder, status="failed", result={"error": str(exc)}, now=now)
        raise


class DriftScheduler:
    def __init__(self, store, profiles: Sequence[DriftProfile], holder: str,
                 on_result: Callable[[DriftProfile, dict], None] = lambda p, r: None):
        self.store = store
        self.profiles = list(profiles)
        self.holder = holder
        self.on_result = on_result
        self._scheduler = None

    def run_due(self, profile: DriftProfile) -> None:
        try:
            result = run_profile(self.store, profile, self.holder)
        except Exception:  # noqa: BLE001 - logged and stored as failed; the schedule goes on
            return
        if result is not None:
            self.on_result(profile, result)

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        self._scheduler = BackgroundScheduler(daemon=True)
        for profile in self.profiles:
            self._scheduler.add_job(self.run_due, "interval", args=[profile], seconds=fire_interval_s(profile),
                                    id=profile.name, coalesce=True, max_instances=1)
        self._scheduler.start()

    def shutdown(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
