"""Drift detector profiles: what is tested, how, against what, how often (``rag_monitor/defaults/detectors/profiles.yaml``).

Each profile names a signal, a detector, the window sizes, the significance level, a schedule
and a false-page budget. The reference is a uniform reservoir of ``reference_size`` items over
the first ``reference_days`` days after it (re)starts (see ``detectors/references.py``; the CLI
can pin it to a release or a time range); each run tests the next non-overlapping window of
``min_current`` to ``current_size`` new items (or a sample of the trailing ``window_s``) against
reference items drawn at the same hours (``season``); a test pages when its p-value clears the threshold its schedule and false-page
budget set (``detectors/paging.py``).

The file itself is read by the agent (``rag_monitor.agent.drift.profiles.load_profiles``);
this module turns its parsed content into profiles and does no I/O.

Usage::

    profiles = profiles_from(yaml.safe_load(text), "profiles.yaml")
    profiles[0].build_detector()     # MMDDrift(alpha=0.05, signal="query_embedding")
    score_window(profiles[0], reference_values, current_values, seed).p_value
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

SIGNAL_QUERY_EMBEDDING = "query_embedding"
SIGNAL_DOCUMENT_EMBEDDING = "document_embedding"
SIGNAL_INTENT = "intent"
SIGNAL_ROUTE = "route"
SIGNAL_REFUSAL = "refusal"
EMBEDDING_SIGNALS = (SIGNAL_QUERY_EMBEDDING, SIGNAL_DOCUMENT_EMBEDDING)
CATEGORICAL_SIGNALS = (SIGNAL_INTENT, SIGNAL_ROUTE, SIGNAL_REFUSAL)
SIGNALS = EMBEDDING_SIGNALS + CATEGORICAL_SIGNALS

DETECTORS = {"mmd": EMBEDDING_SIGNALS, "novelty": EMBEDDING_SIGNALS, "classifier": EMBEDDING_SIGNALS,
             "chi_square": CATEGORICAL_SIGNALS}


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
    interval_s: float = 86400.0
    """One test per ``interval_s``: a day by default, the shortest at which a 300-permutation MMD
    test can page within the budget (``detectors/paging.py``)."""
    window_s: float | None = None
    """None: each run tests the next non-overlapping window of new items. A number: each run tests a
    uniform sample of the trailing ``window_s`` seconds before its slot (a multiple of
    ``interval_s``), so windows overlap (the page bound allows it, ``detectors/paging.py``); the
    novelty profile tests the trailing day every 6 hours, a full daily cycle each time."""
    reference_release: str | None = None
    """Capture the reference from this release only (None: every release)."""
    reference_days: float | None = 7.0
    """Length of the reference period; None captures the first ``reference_size`` items instead
    (for demos and tests only: minutes of one time of day are not a reference)."""
    season: str = "day"
    """Match reference items to the current window's hour of the ``day``, of the ``week``, or ``none``."""
    reference_ratio: float = 2.0
    """Reference items drawn per current item (at matching hours), as many as the reference holds."""
    false_pages_per_30d: float = 1.0
    """The false-page budget the page rule is set for (it keeps the expected rate at a tenth of it)."""
    page_threshold: float | None = None
    """A test pages at ``p <= 1 / page_threshold``; None derives it from the budget and ``interval_s``."""
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
        if self.window_s is not None and not (self.window_s >= self.interval_s and _multiple(self.window_s, self.interval_s)):
            raise ValueError(f"profile {self.name!r}: window_s must be a multiple of interval_s ({self.interval_s:g}), got {self.window_s!r}")
        if self.min_current > self.current_size:
            raise ValueError(f"profile {self.name!r}: min_current must not exceed current_size")
        if self.season not in ("day", "week", "none"):
            raise ValueError(f"profile {self.name!r}: season must be day, week or none, got {self.season!r}")
        if self.reference_days is not None and not self.reference_days > 0:
            raise ValueError(f"profile {self.name!r}: reference_days must be positive or null")
        if not self.reference_ratio > 0 or not self.false_pages_per_30d > 0:
            raise ValueError(f"profile {self.name!r}: reference_ratio and false_pages_per_30d must be positive")
        if self.page_threshold is not None and not self.page_threshold > 1:
            raise ValueError(f"profile {self.name!r}: page_threshold must exceed 1")
        self.page_rule()  # refuse a profile that could never page

    def page_rule(self):
        """When a test of this profile pages (``ValueError`` when no p-value it can report would)."""
        from rag_monitor.detectors.paging import NO_FLOOR, PageRule

        # MMD's permutation p-value is at least 1/(1+P); the novelty count's is exact with no floor,
        # the other tests' are asymptotic
        p_floor = 1.0 / (1 + int(self.options.get("n_permutations", 300))) if self.detector == "mmd" else NO_FLOOR
        try:
            if self.page_threshold is not None:
                return PageRule(p_floor=p_floor, threshold=self.page_threshold)
            return PageRule.from_budget(interval_s=self.interval_s, false_pages_per_30d=self.false_pages_per_30d,
                                        p_floor=p_floor)
        except ValueError as exc:
            raise ValueError(f"profile {self.name!r}: {exc}") from None

    def default_reference(self) -> dict[str, Any]:
        """The reference spec used until ``rag-monitor drift reference set`` replaces it."""
        if self.reference_days is None:
            spec: dict[str, Any] = {"mode": "count", "size": self.reference_size}
            if self.reference_release:
                spec["release"] = self.reference_release
            return spec
        from rag_monitor.detectors.references import default_spec

        return default_spec(self.reference_days, self.reference_release)

    def build_detector(self):
        from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift, MMDDrift, NoveltyDrift

        cls = {"mmd": MMDDrift, "novelty": NoveltyDrift, "classifier": ClassifierDrift,
               "chi_square": ChiSquareDrift}[self.detector]
        return cls(alpha=self.alpha, signal=self.signal, min_window_size=min(10, self.min_current), **self.options)


def score_window(profile: DriftProfile, matched: Any, current: Any, seed: int):
    """The profile's detector on ``matched`` (reference) against ``current``: a ``DriftResult``."""
    detector = profile.build_detector()
    if hasattr(detector, "seed") and "seed" not in profile.options:
        detector.seed = seed
    return detector.fit(matched).predict(current)


def _multiple(a: float, b: float) -> bool:
    ratio = a / b
    return abs(ratio - round(ratio)) < 1e-9


def profiles_from(data: Any, where: str) -> list[DriftProfile]:
    """The profiles of a parsed profiles file (``{"profiles": [...]}``); ``where`` names the file in errors."""
    data = data or {}
    entries = data.get("profiles", []) if isinstance(data, Mapping) else None
    if not isinstance(entries, list):
        raise ValueError(f"{where}: expected a mapping with a 'profiles' list")
    known = {f.name for f in fields(DriftProfile)}
    profiles = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: profile {i + 1} must be a mapping")
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ValueError(f"{where}: profile {entry.get('name', i + 1)!r} has unknown keys {unknown}; known: {sorted(known)}")
        profiles.append(DriftProfile(**entry))
    names = [p.name for p in profiles]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: profile names must be unique, got {names}")
    return profiles
