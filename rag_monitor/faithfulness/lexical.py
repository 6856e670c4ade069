"""The lexical support check: the fallback when no HHEM weights are configured.

It is *not* a faithfulness model and is labelled ``lexical-v1`` everywhere it reports, so
dashboards never mix it with HHEM. It asks one question: how much of what the answer states
can be found, word for word, in the delivered contexts?

The answer is split into claim terms of three kinds, each weighted by how much a hallucination
in it matters and how reliably a string match detects it:

- numbers (``1997``, ``3.5``, ``12,000`` → ``12000``): weight 3; a wrong number is the
  classic hallucination and numbers rarely paraphrase;
- names: capitalised words that do not start a sentence (``Crayola``, ``ESPN``): weight 2;
- content words: the remaining words, lower-cased, stopwords removed, reduced by a simple
  suffix-stripping stemmer (``stunting`` and ``stunts`` → ``stunt``): weight 1.

The score is the weighted share of the answer's terms present in the context (names are
matched case-insensitively, since contexts are often lower-cased): 1.0 = every term found.
An answer with no terms at all ("Sure!", "I don't know.") makes no claim and scores ``None``:
counted apart, never as faithful. It cannot see negation, paraphrase or wrong relations
between correct words; calibrate its threshold on human labels before trusting it.

Usage::

    scorer = LexicalScorer()
    scorer.score(["The Eiffel Tower is 330 metres tall."], ["It is 330 metres tall."])  # [1.0]
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rag_monitor.faithfulness.thresholds import shipped_threshold

LEXICAL_NAME = "lexical-v1"
NUMBER_WEIGHT = 3.0
NAME_WEIGHT = 2.0
WORD_WEIGHT = 1.0

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?:;\n]\s*$")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during each else
    ever few for from further get got had hadn has hasn have haven having he her here hers herself him himself
    his how i if in into is isn it its itself just let like may me might more most much must mustn my myself
    no nor not now of off on once one only or other ought our ours ourselves out over own quite rather really
    said same say says shall shan she should shouldn so some such than that the their theirs them themselves
    then there these they this those through to too under until up upon us very was wasn we were weren what
    when where which while who whom whose why will with won would wouldn yes yet you your yours yourself
    yourselves s t d ll m o re ve y im ive id youre thats theres dont doesnt didnt isnt arent wasnt cant wont
    oh ok okay well yeah hi hello sure think know thing things lot lots actually maybe pretty great good nice
    love sounds sound interesting cool wow agree believe guess mean right true yes indeed""".split()
)

_SUFFIXES = ("ational", "ization", "fulness", "ousness", "iveness", "ments", "ment", "ness", "ings", "ing",
             "ies", "ied", "edly", "ed", "ly", "es", "s")


def stem(word: str) -> str:
    """A deliberately small suffix stripper: enough to match inflections, no dictionary needed."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                return word + "y"
            # Collapse a doubled final consonant left by -ing/-ed ("stopped" → "stopp" → "stop").
            if suffix in ("ing", "ings", "ed", "edly") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
                word = word[:-1]
            break
    # A silent final e ("hire" / "hired" → "hir") so both forms meet.
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def _normalise_number(token: str) -> str:
    # "12,000" and "12000" are the same claim; a trailing ".0" is not worth a mismatch.
    token = token.replace(",", "")
    return token[:-2] if token.endswith(".0") else token


@dataclass(frozen=True)
class ClaimTerms:
    """The terms of an answer the check looks for, by kind."""

    numbers: tuple[str, ...]
    names: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def weight(self) -> float:
        return NUMBER_WEIGHT * len(self.numbers) + NAME_WEIGHT * len(self.names) + WORD_WEIGHT * len(self.words)

    @property
    def length(self) -> int:
        return len(self.numbers) + len(self.names) + len(self.words)


def _terms(answer: str) -> Iterator[tuple[str, str]]:
    """(kind, term) in text order: kind is "number", "name" or "word"."""
    for match in _TOKEN.finditer(answer):
        token = match.group(0)
        if token[0].isdigit():
            yield "number", _normalise_number(token)
            continue
        lower = token.lower().replace("’", "'")
        bare = lower.replace("'", "")
        if bare in STOPWORDS or len(bare) < 3:
            continue
        before = answer[: match.start()]
        starts_sentence = not before.strip() or bool(_SENTENCE_END.search(before))
        yield ("name" if token[0].isupper() and not starts_sentence else "word"), stem(bare)


def claim_terms(answer: str) -> ClaimTerms:
    """Split an answer into numbers, names (as stems) and content-word stems."""
    kinds: dict[str, list[str]] = {"number": [], "name": [], "word": []}
    for kind, term in _terms(answer):
        kinds[kind].append(term)
    return ClaimTerms(tuple(kinds["number"]), tuple(kinds["name"]), tuple(kinds["word"]))


def content_stems(text: str) -> list[str]:
    """The name and content-word stems of ``text`` in order (for word pairs)."""
    return [term for kind, term in _terms(text) if kind != "number"]


def context_vocabulary(contexts: str | Sequence[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(numbers, word stems) present in the contexts."""
    text = contexts if isinstance(contexts, str) else "\n".join(contexts)
    numbers: set[str] = set()
    stems: set[str] = set()
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token[0].isdigit():
            numbers.add(_normalise_number(token))
        else:
            stems.add(stem(token.lower().replace("’", "").replace("'", "")))
    return frozenset(numbers), frozenset(stems)


def support_score(contexts: str | Sequence[str], answer: str) -> float | None:
    """Weighted share of the answer's claim terms found in the contexts; ``None`` for no claims."""
    terms = claim_terms(answer)
    if terms.length == 0:
        return None
    numbers, stems = context_vocabulary(contexts)
    found = (
        NUMBER_WEIGHT * sum(n in numbers for n in terms.numbers)
        + NAME_WEIGHT * sum(n in stems for n in terms.names)
        + WORD_WEIGHT * sum(w in stems for w in terms.words)
    )
    return found / terms.weight


@dataclass(frozen=True)
class LexicalPair:
    """A pair kept as text; ``length`` (the answer's terms plus context words) drives bucketing."""

    premise: str | tuple[str, ...]
    hypothesis: str
    length: int
    truncated: bool = False


class LexicalScorer:
    """The documented lexical support check (see the module docstring); ``None`` = no claims."""

    name = LEXICAL_NAME
    version = "1"

    def __init__(self, threshold: float | None = None) -> None:
        # None: the threshold this version ships with, calibrated on labelled data.
        threshold = shipped_threshold(LEXICAL_NAME, self.version) if threshold is None else float(threshold)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.threshold = threshold

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> LexicalPair:
        kept = premise if isinstance(premise, str) else tuple(premise)
        text = kept if isinstance(kept, str) else " ".join(kept)
        return LexicalPair(kept, hypothesis, len(text.split()) + len(hypothesis.split()))

    def score_encoded(self, batch: Sequence[LexicalPair]) -> list[float | None]:
        return [support_score(p.premise, p.hypothesis) for p in batch]

    def score(self, premises: Sequence[str | Sequence[str]], hypotheses: Sequence[str]) -> list[float | None]:
        """One support score in [0, 1] per pair, ``None`` where the answer makes no claim."""
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        return [support_score(p, h) for p, h in zip(premises, hypotheses)]
