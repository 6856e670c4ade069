"""Faithfulness scoring: is the answer supported by the contexts delivered to the generator?

Two scorers share one interface (``Scorer``): HHEM-2.1-Open (``hhem-2.1-open``) when a model
directory is configured, else the lexical support check (``lexical-v1``). Their scores are
not comparable: every metric and export carries the scorer's ``name``.

Usage::

    scorer = load_scorer(settings.hhem_model_path or None)   # logs a warning on the fallback
    worker = FaithfulnessWorker(scorer, on_result=handle_scores)
    worker.start(); worker.submit([Pair(key=trace_id, contexts=docs, answer=answer)])

Nothing here imports torch or transformers until an HHEM directory is loaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rag_monitor.detectors.faithfulness.hhem import HHEM_NAME, HHEMScorer, ModelLoadError
from rag_monitor.detectors.faithfulness.lexical import LEXICAL_NAME, LexicalScorer
from rag_monitor.detectors.faithfulness.worker import FaithfulnessWorker, Pair, Score

__all__ = [
    "FALLBACK_WARNING",
    "HHEM_NAME",
    "LEXICAL_NAME",
    "FaithfulnessWorker",
    "HHEMScorer",
    "LexicalScorer",
    "ModelLoadError",
    "Pair",
    "Score",
    "Scorer",
    "load_scorer",
]

logger = logging.getLogger(__name__)

FALLBACK_WARNING = (
    "no HHEM-2.1-Open weights configured (hhem_model_path is empty): faithfulness uses the lexical "
    "support check 'lexical-v1' (answer terms found in the context), not a faithfulness model; "
    "run `rag-monitor models pull hhem DIR` on an online machine and set hhem_model_path=DIR"
)


@runtime_checkable
class Scorer(Protocol):
    """What the worker, the agent and calibration need from a faithfulness scorer."""

    name: str
    version: str
    threshold: float

    def score(self, premises: Sequence[str | Sequence[str]], hypotheses: Sequence[str]) -> list[float | None]:
        """1.0 = supported; ``None`` = the answer makes no claim."""

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> Any:
        """A batchable form of one pair with ``.length`` and ``.truncated``."""

    def score_encoded(self, batch: Sequence[Any]) -> list[float | None]:
        """Scores for a batch of ``encode`` results."""


def _looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "~"))


def load_scorer(model_path: str | os.PathLike[str] | None, *, threshold: float = 0.5,
                torch_threads: int | None = 1) -> Scorer:
    """HHEM from ``model_path`` when given, else the lexical fallback (with a logged warning).

    ``model_path`` is a directory in ``models pull``'s layout, or a hub id
    (``vectara/hallucination_evaluation_model``) when the hub is reachable. A path that is
    given but unusable raises ``ModelLoadError``: a typo must not silently downgrade scoring.
    """
    if model_path is None or str(model_path).strip() == "":
        logger.warning(FALLBACK_WARNING)
        return LexicalScorer(threshold=threshold)
    path = str(model_path)
    if not Path(path).exists() and _looks_like_hub_id(path):
        from rag_monitor.models import pull_hhem

        if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False"):
            raise ModelLoadError(f"{path!r} is neither a local directory nor reachable: the hub is offline (HF_HUB_OFFLINE)")
        cache = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "rag-monitor" / path.replace("/", "--")
        path = str(pull_hhem(cache, repo_id=path))
    scorer = HHEMScorer.load(path, threshold=threshold, torch_threads=torch_threads)
    logger.info("faithfulness scorer %s (version %s) loaded from %s", scorer.name, scorer.version, path)
    return scorer
