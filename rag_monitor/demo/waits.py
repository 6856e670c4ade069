"""What the demo waits for and collects while it plays: the agent's drift runs as they land,
background loops, stored and scored queries, and the alerts the story should raise."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

DRIFT_PROFILE = "query-mmd"


class DriftRuns:
    """Collects the agent's completed drift runs as they land, each tagged with the phase its slot
    fell in (not the phase it was collected in: on a busy machine a run lands seconds late)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.results: list[dict[str, Any]] = []
        self._seen: set[float] = set()
        self._phase_starts: list[tuple[float, str]] = []

    def phase_started(self, name: str, at: float) -> None:
        self._phase_starts.append((at, name))

    def phase_at(self, t: float) -> str:
        started = [name for at, name in self._phase_starts if at <= t]
        return started[-1] if started else (self._phase_starts[0][1] if self._phase_starts else "")

    def collect(self) -> None:
        for run in reversed(self.store.drift_runs.list(DRIFT_PROFILE, limit=20, tested=True)):
            result = run.result or {}
            if run.scheduled_for in self._seen or result.get("status") != "done":
                continue
            self._seen.add(run.scheduled_for)
            self.results.append({"phase": self.phase_at(run.scheduled_for), **{k: result[k] for k in (
                "signal", "detector", "is_drift", "p_value", "statistic", "n_reference", "n_current")},
                "named_clusters": sum(len(group) for group in (result.get("changes") or {}).values())})


class Every:
    """Runs ``fn`` every ``interval_s`` in a thread until stopped (errors are reported, not fatal)."""

    def __init__(self, interval_s: float, fn: Any, name: str) -> None:
        self._stop = threading.Event()
        self.errors: list[str] = []

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - keep the demo going, report at the end
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

        self._thread = threading.Thread(target=loop, name=f"demo-{name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def wait_for_drift_run(agent: Any, drift: DriftRuns, timeout: float = 30.0) -> None:
    """One more completed drift run over the final traffic, so the summary shows where it ended."""
    deadline = time.monotonic() + timeout
    before = len(drift.results)
    while time.monotonic() < deadline:
        drift.collect()
        if len(drift.results) > before:
            return
        time.sleep(0.5)


def wait_stored(agent: Any, trace_ids: Sequence[str], timeout: float = 20.0) -> None:
    """Until the agent has assembled and stored these queries (exports are batched)."""
    deadline = time.monotonic() + timeout
    pending = list(trace_ids)
    while pending and time.monotonic() < deadline:
        pending = [t for t in pending if agent.store.recent.get(t) is None]
        if pending:
            time.sleep(0.2)


def wait_scored(agent: Any, timeout: float = 60.0) -> None:
    """Until the faithfulness scorer has caught up with the sampled answers (its backlog is empty)."""
    deadline = time.monotonic() + timeout
    while agent.store.scores.backlog(agent.scoring.scorer.name) and time.monotonic() < deadline:
        time.sleep(0.5)


# Alerts the story should raise: drift during the shift; latency after the provider update (full
# demo); latency, false exclusions, unsupported answers and the probes' overlap after the release.
EXPECTED_BY_PHASE = {
    "shift": ("RagDriftDetected",),
    "provider-update": ("RagQueryLatencyOverSLO",),
    "bad-release": ("RagQueryLatencyOverSLO", "RagFilterFalseExclusionsHigh", "RagFaithfulnessLow", "RagNeighbourOverlapDropped"),
}
EXPECTED_ALERTS = tuple(dict.fromkeys(a for alerts in EXPECTED_BY_PHASE.values() for a in alerts))


def wait_for_alerts(alerting: Any, names: Sequence[str], timeout: float) -> bool:
    """Until Alertmanager has delivered a firing notification of every alert in ``names``."""
    deadline = time.monotonic() + timeout
    while True:
        fired = {a["labels"].get("alertname") for a in alerting.webhook.alerts if a.get("status") == "firing"}
        if set(names) <= fired:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def wait_for_drift_page(alerting: Any, quick: bool) -> bool:
    """After the shift: the drift page, before the next release is deployed. On a busy machine the
    drift runs lag; a page that came after the deployment would read as that release's regression."""
    return wait_for_alerts(alerting, ("RagDriftDetected",), 30.0 if quick else 60.0)


def wait_for_story(alerting: Any, quick: bool, alert_wait_s: float | None = None, phases: Sequence[str] | None = None) -> None:
    """Give Prometheus and Alertmanager a few evaluations to deliver what the traffic (of ``phases``;
    None: every phase) caused."""
    expected = EXPECTED_ALERTS if phases is None else tuple(
        dict.fromkeys(a for phase in phases for a in EXPECTED_BY_PHASE.get(phase, ())))
    # A bound, not a pause: it returns once all have fired. The probes' page needs its `for:` (15 s),
    # restarted once when the release is sighted late, after the bad release's traffic, which takes
    # the script's time now that its spans are scripted (demo/timing.py), not longer on a busy machine.
    wait_for_alerts(alerting, expected, alert_wait_s if alert_wait_s is not None else (45.0 if quick else 60.0))
