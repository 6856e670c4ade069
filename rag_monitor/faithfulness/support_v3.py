"""``support-v3``: word-level evidence of invented content, combined by a fitted logistic model.

On real LLM answers (RAGTruth) the MiniLM similarity that support-v1 and -v2 rest on barely
separates supported from unsupported answers: a paraphrase and an invented sentence about the
same topic embed alike. What does separate them is *what the answer adds*: content words,
names, numbers and word pairs the contexts do not contain, and, for a structured record, an
attribute the answer asserts that the record sets to false (``structured.py``). support-v3
measures these per answer sentence and over the whole answer (``FEATURES``); a logistic
model over them, with a second set of weights that applies when the context is a JSON record
(an answer describing a record paraphrases differently from a summary of prose), gives the
probability that the answer is supported. It needs no embedding model: an answer costs a few
milliseconds of CPU, and it runs where the embeddings extra is not installed.

The model is fitted by ``benchmarks/faithfulness_ragtruth.py`` on the tuning split only
(RAGTruth even sources, BEGIN dev, HaluEval even questions), each set and each class within a
set weighing the same, so that one threshold serves answer sets whose unsupported shares
differ; its coefficients and threshold ship in ``thresholds.json``.

Claim verdicts: a sentence is ``contradicted`` when it asserts a false attribute of a record,
``not_in_context`` when it carries a number or name the contexts lack or its lexical support
is under ``CLAIM_SUPPORTED``.

Usage::

    scorer = SupportV3Scorer()
    scorer.score([["It opened in 1889."]], ["It opened in 1901."])    # [0.44]: under the shipped 0.51
    answer_features(["It opened in 1889."], "It opened in 1901.")     # the model's inputs
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag_monitor.faithfulness.claims import CONTRADICTED, NOT_IN_CONTEXT, SUPPORTED, Assessment, Claim, ClaimScorer
from rag_monitor.faithfulness.lexical import claim_terms, content_stems, context_vocabulary, stem, support_score
from rag_monitor.faithfulness.structured import attribute_conflicts, flatten_record, parse_record
from rag_monitor.faithfulness.support import _CITATION, SupportPair, sentences
from rag_monitor.faithfulness.support_v2 import LogisticModel
from rag_monitor.faithfulness.thresholds import shipped_calibration, shipped_threshold

SUPPORT_V3_NAME = "support-v3"
CLAIM_SUPPORTED = 0.7
"""A sentence's lexical support under which it counts as weak (and its claim as not in context)."""
DISCOURSE = frozenset(stem(w) for w in """summary summarize word article passage text data structured information
    mention mentioned highlight highlighted include including provide provides overall however despite due within state
    states describe described according reviewer reviewers customer customers express expressed discuss discusses
    report reported note noted emphasize emphasized various another other particular known located offer offers
    available option options""".split())
"""Words an answer uses to talk *about* its source ("the article highlights", "customers praised"): new
to the context without adding a claim, so never counted as novel content."""
BASE_FEATURES = ("answer_lexical", "novel_word_share", "novel_name_share", "novel_number_share", "min_sentence_lexical",
                 "weak_sentence_share", "log_words", "log_length_ratio", "log_novel_words", "log_novel_names",
                 "log_novel_numbers", "log_sentences", "attribute_conflicts", "max_sentence_novel_share",
                 "novel_pair_share")
FEATURES = (*BASE_FEATURES, "structured", *(f"structured*{f}" for f in BASE_FEATURES))
"""The base features, whether the context is a record, and the base features again for records only."""


@dataclass(frozen=True)
class Context:
    """The contexts as the word checks read them: records flattened, vocabulary and word pairs indexed."""

    text: str
    records: tuple[dict, ...]
    numbers: frozenset[str]
    stems: frozenset[str]
    pairs: frozenset[tuple[str, str]]


def _pairs(sentence: str) -> list[tuple[str, str]]:
    stems = content_stems(sentence)
    return list(zip(stems, stems[1:]))


def read_contexts(contexts: Sequence[str]) -> Context:
    """The contexts indexed once per answer (records flattened: ``structured.py``)."""
    parts, records = [], []
    for c in contexts:
        record = parse_record(c)
        if record is not None:
            records.append(record)
        parts.append(c if record is None else flatten_record(record))
    text = "\n".join(parts)
    numbers, stems = context_vocabulary(text)
    pairs: set[tuple[str, str]] = set()
    for s in sentences(text) or [text]:
        pairs.update(_pairs(s))
    return Context(text, tuple(records), numbers, stems, frozenset(pairs))


@dataclass(frozen=True)
class SentenceCheck:
    sentence: str
    lexical: float
    novel_share: float
    novel_numbers: tuple[str, ...]
    novel_names: tuple[str, ...]
    conflicts: tuple[str, ...]


def _check(sentence: str, context: Context) -> SentenceCheck | None:
    terms = claim_terms(sentence)
    if terms.length == 0:
        return None
    content = [*terms.names, *(w for w in terms.words if w not in DISCOURSE)]
    novel = sum(w not in context.stems for w in content)
    conflicts = tuple(c for r in context.records for c in attribute_conflicts(r, [sentence]))
    return SentenceCheck(sentence, support_score(context.text, sentence) or 0.0, novel / max(1, len(content)),
                         tuple(n for n in terms.numbers if n not in context.numbers),
                         tuple(n for n in terms.names if n not in context.stems), conflicts)


def answer_features(contexts: Sequence[str], answer: str, context: Context | None = None) -> np.ndarray | None:
    """The model's inputs for one answer, in ``FEATURES`` order; None when it states nothing checkable."""
    context = context or read_contexts(contexts)
    answer = _CITATION.sub("", answer)
    checks = [c for c in (_check(s, context) for s in sentences(answer)) if c is not None]
    if not checks:
        return None
    return _features(context, answer, checks)


def _features(context: Context, answer: str, checks: Sequence[SentenceCheck]) -> np.ndarray:
    terms = claim_terms(answer)
    words = [w for w in terms.words if w not in DISCOURSE]
    novel_words = sum(w not in context.stems for w in words)
    novel_names = sum(n not in context.stems for n in terms.names)
    novel_numbers = sum(n not in context.numbers for n in terms.numbers)
    answer_pairs = [p for c in checks for p in _pairs(c.sentence)]
    lexical = np.array([c.lexical for c in checks])
    n_words, n_context = len(answer.split()), len(context.text.split())
    base = np.array([
        support_score(context.text, answer) or 0.0,
        novel_words / max(1, len(words)), novel_names / max(1, len(terms.names)), novel_numbers / max(1, len(terms.numbers)),
        lexical.min(), float((lexical < CLAIM_SUPPORTED).mean()), math.log1p(n_words),
        math.log1p(n_words) - math.log1p(n_context), math.log1p(novel_words), math.log1p(novel_names),
        math.log1p(novel_numbers), math.log1p(len(checks)), float(sum(len(c.conflicts) for c in checks)),
        max(c.novel_share for c in checks),
        sum(p not in context.pairs for p in answer_pairs) / max(1, len(answer_pairs)),
    ])
    structured = 1.0 if context.records else 0.0
    return np.concatenate([base, [structured], base * structured])


class SupportV3Scorer(ClaimScorer):
    """``support-v3`` (see the module docstring): the score is P(supported) from the shipped model."""

    name = SUPPORT_V3_NAME
    version = "1"

    def __init__(self, threshold: float | None = None, model: LogisticModel | None = None) -> None:
        if model is None:
            entry = shipped_calibration(self.name, self.version) or {}
            if "model" not in entry:
                raise RuntimeError("support-v3 has no fitted model in thresholds.json (run benchmarks/faithfulness_ragtruth.py)")
            model = LogisticModel.from_dict(entry["model"], FEATURES)
        self.model = model
        self.threshold = shipped_threshold(self.name, self.version) if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> SupportPair:
        contexts = (premise,) if isinstance(premise, str) else tuple(str(p) for p in premise)
        return SupportPair(contexts, hypothesis, sum(len(c.split()) for c in contexts) + len(hypothesis.split()))

    def assess_encoded(self, batch: Sequence[SupportPair]) -> list[Assessment]:
        return [self._assess(pair) for pair in batch]

    def _assess(self, pair: SupportPair) -> Assessment:
        context = read_contexts(pair.contexts)
        answer = _CITATION.sub("", pair.answer)
        checks = [c for c in (_check(s, context) for s in sentences(answer)) if c is not None]
        if not checks:
            return Assessment(None)
        probability = float(self.model.probability(_features(context, answer, checks))[0])
        return Assessment(round(probability, 4), tuple(_claim(c) for c in checks))


def _claim(check: SentenceCheck) -> Claim:
    reasons = list(check.conflicts)
    if check.novel_numbers:
        reasons.append("number not in context: " + ", ".join(check.novel_numbers))
    if check.novel_names:
        reasons.append("name not in context: " + ", ".join(check.novel_names))
    if check.conflicts:
        verdict = CONTRADICTED
    elif reasons or check.lexical < CLAIM_SUPPORTED:
        verdict = NOT_IN_CONTEXT
        reasons = reasons or [f"low word overlap with the context ({check.lexical:.2f})"]
    else:
        verdict = SUPPORTED
    return Claim(check.sentence, verdict, round(check.lexical, 4), reason="; ".join(reasons) or None)
