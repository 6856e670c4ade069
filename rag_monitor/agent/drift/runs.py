"""Scheduled drift runs: once per profile and schedule slot, across every replica.

Each run tests the next non-overlapping window of new items (or, with ``window_s``, the trailing
``window_s`` seconds; at least ``min_current``, at most ``current_size``: those with the smallest
trace-id hashes, the feed's reservoir of the interval) against a fresh draw of reference items at the window's hours, decides
whether it pages (``detectors/paging.py``) and names what changed (``detectors/explain.py``). The
result records the reference, the seed, the window's span, the p-value, the evidence and the page
decision.

A run belongs to the slot ``floor(now / interval) * interval``. ``store.drift_runs.claim`` lets exactly
one replica take a slot (a unique row in the store). Replicas try the current slot several times
per interval; a run that dies midway leaves a lease that lapses within half a slot, and the next
try redoes it. The agent's one scheduler fires the runs (a ``drift:<profile>`` job each,
``agent/jobs.py``); torch and BLAS stay single-threaded inside the agent. The statistics a run
applies (the hour-matched draw, the test, the page rule, the explanation) are
``rag_monitor.detectors``'; this module reads the windows and writes the result.

Usage::

    runner = DriftRunner(store, holder="agent-1", on_result=...)
    runner.run_due(profile)                         # what each drift:<profile> job calls
    run_profile(store, profile, holder="cli")       # one run now, e.g. from tests
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable

from rag_monitor.detectors.profiles import EMBEDDING_SIGNALS, DriftProfile, score_window
from rag_monitor.detectors.references import draw_reference

# One detector at a time: the BLAS thread count a detector sets is process-wide, and OpenBLAS's
# setter is not safe against another thread's change or running call (the profiles' jobs overlap).
_DETECTOR_WORK = threading.Lock()

log = logging.getLogger(__name__)

EXPLAINED_CLUSTERS = 3
"""Over- and under-represented clusters kept per run (with their example queries)."""


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


def _previous(store, profile: DriftProfile, version: int) -> dict | None:
    """The latest tested window of this profile on this reference version (where the next one starts)."""
    for run in store.drift_runs.list(profile.name, limit=5, tested=True):
        result = run.result or {}
        if result.get("status") in ("done", "degenerate") and result.get("reference", {}).get("version") == version:
            return result
    return None


def _skip(store, profile: DriftProfile, slot: float, holder: str, now: float, reason: str, **extra) -> dict:
    result = {"status": "skipped", "reason": reason, "signal": profile.signal, "detector": profile.detector, **extra}
    store.drift_runs.finish(profile.name, slot, holder, status="ok", result=result, now=now)
    return result


def _example_queries(store, trace_ids: list[str]) -> list[dict]:
    """Redacted example queries (as the agent stored them) for trace ids; hidden queries stay hidden.

    ``forwarded``: the trace is in the review or scoring sample, which the tail sampler always
    forwards to Phoenix (``agent/tail_sampling.py``); the report links only those.
    """
    from rag_monitor.store.queue import DEFAULT_QUEUE, SCORE_QUEUE

    out = []
    for trace_id in trace_ids:
        record = store.recent.get(trace_id)
        hidden = record is None or "query" in (record.hidden or []) or not record.query
        forwarded = any(store.queue.item_for_trace(trace_id, queue=q) is not None for q in (DEFAULT_QUEUE, SCORE_QUEUE))
        out.append({"trace_id": trace_id, "query": None if hidden else record.query[:200], "forwarded": forwarded})
    return out


def _trailing_window(store, profile: DriftProfile, now: float, captured_until: float):
    """The current items of the ``window_s`` seconds before this run's slot (None until they all
    follow the reference period). Consecutive runs overlap; the slot edges are the feed's, so the
    window's smallest hashes are a uniform sample of its span."""
    end = slot_of(profile, now)
    if end - profile.window_s < captured_until:
        return None
    window = store.reservoirs.window(profile.signal, "current", since=end - profile.window_s)
    inside = [i for i, t in enumerate(window.times) if t < end]
    values = window.values[inside] if profile.signal in EMBEDDING_SIGNALS else [window.values[i] for i in inside]
    return dataclasses.replace(window, values=values, trace_ids=[window.trace_ids[i] for i in inside],
                               times=window.times[inside])


def test_window(store, profile: DriftProfile, now: float) -> dict:
    """Test the next full, non-overlapping window against a fresh hour-matched reference draw.

    Returns the result to store (``status`` ``done``, ``degenerate`` or ``skipped``).
    """
    from rag_monitor.detectors.base import DegenerateWindowError, fresh_seed
    from rag_monitor.detectors.explain import category_shifts, cluster_shifts
    from rag_monitor.detectors.references import capture_period, describe, is_complete
    from rag_monitor.detectors.sampling import smallest_hashes

    base = {"signal": profile.signal, "detector": profile.detector}
    spec = store.reservoirs.reference_spec(profile.signal) or profile.default_reference()
    info = store.reservoirs.info(profile.signal, "reference")
    reference = store.reservoirs.window(profile.signal, "reference")
    started_at = info.created_at if info is not None else None
    if not is_complete(spec, started_at, len(reference.trace_ids), now):
        return {"status": "skipped", **base, "n_reference": len(reference.trace_ids),
                "reason": f"reference still being captured: {describe(spec, started_at)}"}
    previous = _previous(store, profile, reference.version)
    # Windows never overlap each other nor the reference: the first starts after the capture.
    # (the period is half-open: an item at its very end belongs to the windows, hence the epsilon)
    captured_until = float(reference.times.max()) if spec["mode"] == "count" else capture_period(spec, started_at)[1] - 1e-6
    after = max(previous["window_end"], captured_until) if previous else captured_until
    if profile.window_s is None:
        window = store.reservoirs.window(profile.signal, "current", after=after)
    else:
        window = _trailing_window(store, profile, now, captured_until)
        if window is None:
            return {"status": "skipped", **base, "reason": f"waiting for a full window: the trailing {profile.window_s / 3600:g} h "
                    "must start after the reference period"}
    if len(window.trace_ids) < profile.min_current:
        return {"status": "skipped", **base, "reason": f"waiting for a full window: {len(window.trace_ids)}/{profile.min_current} new items"}
    # the smallest trace-id hashes: the feed's per-slot reservoirs (one per replica, or two slots
    # when a run was missed) hold them, so the window is a uniform sample of the whole span
    keep = smallest_hashes(window.trace_ids, profile.current_size)
    current_ids, current_times = [window.trace_ids[i] for i in keep], window.times[keep]
    current = window.values[keep] if profile.signal in EMBEDDING_SIGNALS else [window.values[i] for i in keep]
    seed = fresh_seed()
    rule = profile.page_rule()
    result = {
        **base,
        "reference": {**spec, "version": reference.version, "started_at": started_at,
                      "description": describe(spec, started_at), "size": len(reference.trace_ids)},
        "window_start": float(current_times[0]), "window_end": float(window.times[-1]),
        "season": profile.season, "seed": seed, "page_threshold": rule.threshold,
    }
    matched, matched_ids, result["match_hours"] = draw_reference(profile, reference, current_times, seed)
    try:
        with _DETECTOR_WORK:
            verdict = score_window(profile, matched, current, seed)
    except DegenerateWindowError as exc:
        # No p-value means anything: no evidence, no page; the verdict says why.
        return {**result, "status": "degenerate", "reason": str(exc), "n_reference": len(matched_ids),
                "n_current": len(current_ids), "log_evidence": 0.0, "decision": False}
    log_evidence = rule.log_evidence(verdict.p_value)
    result.update({f.name: getattr(verdict, f.name) for f in dataclasses.fields(verdict) if f.name != "metadata"})
    result["metadata"] = {k: v for k, v in verdict.metadata.items() if isinstance(v, (int, float, str, bool)) or v is None}
    result.update(status="done", log_evidence=log_evidence, decision=rule.pages(log_evidence))
    if profile.signal in EMBEDDING_SIGNALS:
        shifts = cluster_shifts(matched, current, matched_ids, current_ids, seed=seed)
        for group in shifts.values():
            for cluster in group[:EXPLAINED_CLUSTERS]:
                cluster["examples"] = _example_queries(store, cluster["examples"])
    else:
        shifts = category_shifts(matched, current)
    result["changes"] = {side: group[:EXPLAINED_CLUSTERS] for side, group in shifts.items()}
    return result


def run_profile(store, profile: DriftProfile, holder: str, now: float | None = None) -> dict | None:
    """Run ``profile`` for its current slot if this holder wins it; the stored result, or None."""
    now = time.time() if now is None else now
    slot = slot_of(profile, now)
    if not store.drift_runs.claim(profile.name, slot, holder, signal=profile.signal, detector=profile.detector,
                           lease_s=run_lease_s(profile), now=now):
        return None
    try:
        result = test_window(store, profile, now)
        store.drift_runs.finish(profile.name, slot, holder, status="ok", result=result, now=now)
        return result
    except Exception as exc:
        log.exception("drift run %s failed", profile.name)
        store.drift_runs.finish(profile.name, slot, holder, status="failed", result={"error": str(exc)}, now=now)
        raise


class DriftRunner:
    """Runs a profile's due slot for the ``drift:<profile>`` jobs; a failed run is logged and stored, the schedule goes on."""

    def __init__(self, store, holder: str, on_result: Callable[[DriftProfile, dict], None] = lambda p, r: None):
        self.store = store
        self.holder = holder
        self.on_result = on_result

    def run_due(self, profile: DriftProfile) -> None:
        try:
            result = run_profile(self.store, profile, self.holder)
        except Exception:  # noqa: BLE001 - logged and stored as failed; the schedule goes on
            return
        if result is not None:
            self.on_result(profile, result)
