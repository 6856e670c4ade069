"""Drift detectors: is the current window of traffic still like the reference window?

``fit(reference)``, then ``predict(current) -> DriftResult`` (``score`` gives the statistic and
p-value alone). ``predict`` never changes the reference.

>>> from rag_monitor.detectors import MMDDrift, ClassifierDrift, ChiSquareDrift  # doctest: +SKIP
>>> MMDDrift(signal="query_embedding").fit(reference_vectors).predict(current_vectors)  # doctest: +SKIP

The detector classes load lazily: importing this package imports neither numpy, scipy nor
scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rag_monitor.detectors.base import DegenerateWindowError, DriftDetector, DriftResult, DriftScore, NotFittedError

if TYPE_CHECKING:  # pragma: no cover
    from rag_monitor.detectors.categorical import ChiSquareDrift
    from rag_monitor.detectors.classifier import ClassifierDrift
    from rag_monitor.detectors.mmd import MMDDrift
    from rag_monitor.detectors.novelty import NoveltyDrift

__all__ = [
    "ChiSquareDrift",
    "ClassifierDrift",
    "DegenerateWindowError",
    "DriftDetector",
    "DriftResult",
    "DriftScore",
    "MMDDrift",
    "NotFittedError",
    "NoveltyDrift",
]

_LAZY = {
    "MMDDrift": "rag_monitor.detectors.mmd",
    "NoveltyDrift": "rag_monitor.detectors.novelty",
    "ClassifierDrift": "rag_monitor.detectors.classifier",
    "ChiSquareDrift": "rag_monitor.detectors.categorical",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
