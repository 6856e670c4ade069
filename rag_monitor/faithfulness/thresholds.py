"""The calibrated threshold each scorer version ships with (``thresholds.json``).

``benchmarks/faithfulness.py`` writes ``thresholds.json``: for each ``scorer@version`` the
threshold that maximised balanced accuracy on the calibration split, where it came from, and
its balanced accuracy on the held-out data it was *not* chosen on. A scorer built without an
explicit threshold takes this one; ``rag_scorer_info`` and every export carry it.

Usage::

    shipped_threshold("support-v1", "1")        # e.g. 0.91
    shipped_calibration("support-v1", "1")      # the whole entry, for reports
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.json")
UNCALIBRATED = 0.5
"""For a scorer version nobody calibrated here (HHEM: its publisher's cut-off)."""


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return json.loads(THRESHOLDS_FILE.read_text(encoding="utf-8"))


def shipped_calibration(scorer: str, version: str) -> dict[str, Any] | None:
    """The ``thresholds.json`` entry for ``scorer@version``, or None."""
    entry = _table().get("scorers", {}).get(f"{scorer}@{version}")
    return dict(entry) if entry else None


def shipped_threshold(scorer: str, version: str) -> float:
    """The calibrated threshold of ``scorer@version``; 0.5 when it has none."""
    entry = shipped_calibration(scorer, version)
    return float(entry["threshold"]) if entry else UNCALIBRATED
