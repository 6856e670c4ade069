"""The thresholds file (``rag_monitor/defaults/alerts/thresholds.yaml``): its schema, Prometheus durations, validation.

Every number an alert compares against, every range window and every ``for:`` lives there;
unknown or missing keys are errors, so a typo never silently leaves a default in place.

Usage::

    thresholds = load_thresholds(THRESHOLDS_FILE, overrides={"faithfulness.for": "2s"})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rag_monitor.config_files import DEFAULTS_DIR

ALERTS_DIR = DEFAULTS_DIR / "alerts"
"""The shipped alerting configuration, its one source: ``thresholds.yaml`` (edited), ``rules/``
(generated from it), ``alertmanager.yml`` and ``tests/`` (promtool cases, not shipped)."""
THRESHOLDS_FILE = ALERTS_DIR / "thresholds.yaml"
RULES_DIR = ALERTS_DIR / "rules"

# The schema of thresholds.yaml: section -> key -> kind. Unknown or missing keys are errors, so a
# typo never silently leaves a default in place.
SCHEMA: dict[str, dict[str, str]] = {
    "triage": {"min_relative_change": "ratio", "settle": "duration", "sighting_lag": "duration", "hold": "duration"},
    "faithfulness": {"window": "duration", "max_unsupported_ratio": "ratio", "min_scored": "count", "min_labels": "count", "comparison_z": "number", "for": "duration", "severity": "severity"},
    "latency": {
        "window": "duration", "min_queries": "count",
        "p95_slo_seconds": "number", "p95_for": "duration", "p99_slo_seconds": "number", "p99_for": "duration",
    },
    "filter_false_exclusion": {"max_ratio": "ratio", "min_eligible": "count", "for": "duration", "severity": "severity"},
    "regeneration": {
        "window": "duration", "season": "duration", "seasons": "count", "min_seasons": "count",
        "false_pages_per_30d": "number", "min_band": "ratio", "min_queries": "count",
        "for": "duration", "severity": "severity",
    },
    "cost": {"window": "duration", "max_usd_per_query": "number", "min_queries": "count", "for": "duration", "severity": "severity"},
    "freshness": {
        "window": "duration", "p99_slo_seconds": "number", "min_events": "count",
        "max_stale_ratio": "ratio", "min_checked_queries": "count", "for": "duration", "severity": "severity",
    },
    "cache": {
        "window": "duration", "baseline_window": "duration", "max_relative_drop": "ratio", "min_baseline_ratio": "ratio",
        "min_requests": "count", "for": "duration", "severity": "severity",
    },
    "drift": {"min_window_items": "count", "max_result_age": "duration", "for": "duration", "severity": "severity"},
    "neighbour_stability": {"min_rbo": "ratio", "min_probes": "count", "max_result_age": "duration", "for": "duration", "severity": "severity"},
}
SEVERITIES = ("page", "warning")

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION_RE = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_DURATION_TERM = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


class ThresholdsError(ValueError):
    """The thresholds file (or an override) is malformed; the message names the key."""


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration. ``parse_duration("1h30m") == 5400``."""
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        raise ThresholdsError(f"{text!r} is not a Prometheus duration (e.g. 30s, 5m, 2h, 1w)")
    return sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_TERM.findall(text))


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration for whole ``seconds``. ``format_duration(1209600) == '2w'``."""
    if seconds != int(seconds) or seconds < 0:
        raise ThresholdsError(f"{seconds!r} seconds is not a whole, non-negative duration")
    seconds = int(seconds)
    if seconds == 0:
        return "0s"
    out = []
    for unit in ("w", "d", "h", "m", "s"):
        size = int(_DURATION_UNITS[unit])
        if seconds >= size:
            out.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(out)


def _check_value(key: str, kind: str, value: Any) -> Any:
    if kind == "duration":
        parse_duration(value if isinstance(value, str) else repr(value))
        return value
    if kind == "severity":
        if value not in SEVERITIES:
            raise ThresholdsError(f"{key}: severity must be one of {SEVERITIES}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ThresholdsError(f"{key}: expected a number, got {value!r}")
    if kind == "ratio" and not 0 <= value <= 1:
        raise ThresholdsError(f"{key}: a ratio must be within 0..1, got {value!r}")
    if kind == "count" and (value != int(value) or value < 0):
        raise ThresholdsError(f"{key}: expected a non-negative whole number, got {value!r}")
    if value < 0:
        raise ThresholdsError(f"{key}: must not be negative, got {value!r}")
    return int(value) if kind == "count" else value


def validate_thresholds(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Checks ``raw`` against ``SCHEMA``, applies dotted ``overrides`` and returns a fresh dict."""
    if not isinstance(raw, Mapping):
        raise ThresholdsError("the thresholds file must be a mapping of sections")
    unknown = set(raw) - set(SCHEMA)
    if unknown:
        raise ThresholdsError(f"unknown sections {sorted(unknown)}; known: {sorted(SCHEMA)}")
    out: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        values = raw.get(section)
        if not isinstance(values, Mapping):
            raise ThresholdsError(f"missing section {section!r}")
        extra = set(values) - set(keys)
        if extra:
            raise ThresholdsError(f"{section}: unknown keys {sorted(extra)}; known: {sorted(keys)}")
        missing = set(keys) - set(values)
        if missing:
            raise ThresholdsError(f"{section}: missing keys {sorted(missing)}")
        out[section] = dict(values)
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if key not in SCHEMA.get(section, {}):
            raise ThresholdsError(f"override {dotted!r} names no threshold")
        out[section][key] = value
    for section, keys in SCHEMA.items():
        for key, kind in keys.items():
            out[section][key] = _check_value(f"{section}.{key}", kind, out[section][key])
    reg = out["regeneration"]
    if reg["min_seasons"] > reg["seasons"]:
        raise ThresholdsError("regeneration.min_seasons must not exceed regeneration.seasons")
    if reg["min_seasons"] < 2:
        raise ThresholdsError("regeneration.min_seasons must be at least 2 (one season has no week-to-week spread)")
    return out


def load_thresholds(path: str | Path = THRESHOLDS_FILE, overrides: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Reads and validates the thresholds file; ``overrides`` maps ``"section.key"`` to a value."""
    with open(path, encoding="utf-8") as f:
        return validate_thresholds(yaml.safe_load(f) or {}, overrides)
