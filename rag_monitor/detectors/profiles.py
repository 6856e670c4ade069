"""Drift detector profiles: what is tested, how, against what, how often (``detectors/profiles.yaml``).

Each profile names a signal, a detector, the window sizes, the significance level and a
schedule. The reference window is captured from the first ``reference_size`` items the agent
sees after the reference (re)starts (optionally only from one release) and then stays fixed;
the current window keeps the newest ``current_size`` items no older than ``current_max_age_s``.

Usage::

    profiles = load_profiles("detectors/profiles.yaml")
    profiles[0].build_detector()     # MMDDrift(alpha=0.05, signal="query_embedding")
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SIGNAL_QUERY_EMBEDDING = "query_embedding"
SIGNAL_DOCUMENT_EMBEDDING = "document_embedding"
SIGNAL_INTENT = "intent"
SIGNAL_ROUTE = "route"
SIGNAL_REFUSAL = "refusal"
EMBEDDING_SIGNALS = (SIGNAL_QUERY_EMBEDDING, SIGNAL_DOCUMENT_EMBEDDING)
CATEGORICAL_SIGNALS = (SIGNAL_INTENT, SIGNAL_ROUTE, SIGNAL_REFUSAL)
SIGNALS = EMBEDDING_SIGNALS + CATEGORICAL_SIGNALS

DETECTORS = {"mmd": EMBEDDING_SIGNALS, "classifier": EMBEDDING_SIGNALS, "chi_square": CATEGORICAL_SIGNALS}


@dataclass(frozen=True)
class DriftProfile:
    name: str
    signal: str
    detector: str
    alpha: float = 0.05
    reference_size: int = 500
    current_size: int = 500
    current_max_age_s: float | None = 3600.0
    min_current: int = 50
    """Fewer current items than this and the run is skipped (recorded as ``skipped``)."""
    interval_s: float = 300.0
    reference_release: str | None = None
    """Capture the reference from this release only (None: the first items seen)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra detector arguments (e.g. ``n_permutations`` for MMD)."""

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"profile {self.name!r}: signal must be one of {SIGNALS}, got {self.signal!r}")
        if self.detector not in DETECTORS:
            raise ValueError(f"profile {self.name!r}: detector must be one of {sorted(DETECTORS)}, got {self.detector!r}")
        if self.signal not in DETECTORS[self.detector]:
            raise ValueError(f"profile {self.name!r}: detector {self.detector!r} does not test {self.signal!r} (it tests {DETECTORS[self.detector]})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"profile {self.name!r}: alpha must be in (0, 1), got {self.alpha}")
        for name in ("reference_size", "current_size", "min_current"):
            if getattr(self, name) < 2:
                raise ValueError(f"profile {self.name!r}: {name} must be at least 2")
        if self.interval_s <= 0:
            raise ValueError(f"profile {self.name!r}: interval_s must be positive")

    def build_detector(self):
        from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift, MMDDrift

        cls = {"mmd": MMDDrift, "classifier": ClassifierDrift, "chi_square": ChiSquareDrift}[self.detector]
        return cls(alpha=self.alpha, signal=self.signal, min_window_size=min(self.min_current, self.reference_size), **self.options)


def load_profiles(path: str | Path) -> list[DriftProfile]:
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    entries = data.get("profiles", []) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a mapping with a 'profiles' list")
    known = {f.name for f in fields(DriftProfile)}
    profiles = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: profile {i + 1} must be a mapping")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ValueError(f"{path}: profile {entry.get('name', i + 1)!r} has unknown keys {unknown}; known: {sorted(known)}")
        profiles.append(DriftProfile(**entry))
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: profile names must be unique, got {names}")
    return profiles
