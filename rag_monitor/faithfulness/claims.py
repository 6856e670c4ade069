"""What a scorer says about one answer: a score and, where it can, a verdict per claim.

A *claim* is one answer sentence (offline scorer) or one statement the judge extracted. Its
verdict is ``supported``, ``contradicted`` (the context says otherwise) or ``not_in_context``
(nothing in the context backs it). Claims are stored with the score and shown in the Phoenix
annotation's explanation, so a reviewer sees *which* sentence was flagged, not just a number.

Usage::

    Assessment(0.2, (Claim("It opened in 1901.", "not_in_context", 0.2, reason="number 1901 not in context"),))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rag_monitor.record import from_mapping

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
NOT_IN_CONTEXT = "not_in_context"
CLAIM_VERDICTS = (SUPPORTED, CONTRADICTED, NOT_IN_CONTEXT)
EXPLANATION_LIMIT = 1000
"""Characters of explanation sent to Phoenix: enough for a few sentences, never a whole answer dump."""


@dataclass(frozen=True)
class Claim:
    """One checked statement of the answer."""

    text: str
    verdict: str
    score: float | None = None
    evidence: str | None = None
    """The context span that supports or contradicts it (the best-matching sentence)."""
    reason: str | None = None
    start: int | None = None
    """Character offsets in the answer, for scorers that flag spans (LettuceDetect): ``answer[start:end]``."""
    end: int | None = None

    def __post_init__(self) -> None:
        if self.verdict not in CLAIM_VERDICTS:
            raise ValueError(f"claim verdict must be one of {CLAIM_VERDICTS}, got {self.verdict!r}")

    @property
    def unsupported(self) -> bool:
        return self.verdict != SUPPORTED


@dataclass(frozen=True)
class Assessment:
    """A scorer's result for one pair: ``value`` None = no claims (or ``error`` set)."""

    value: float | None
    claims: tuple[Claim, ...] = ()
    error: str | None = None


def claims_json(claims: Sequence[Claim]) -> str | None:
    """The claims as stored with the score (None when the scorer gives none)."""
    if not claims:
        return None
    return json.dumps([{k: v for k, v in asdict(c).items() if v is not None} for c in claims], ensure_ascii=False)


def claims_from_json(text: str | None) -> tuple[Claim, ...]:
    if not text:
        return ()
    # Unknown keys (a newer replica's) are ignored: readers one version behind keep working.
    return tuple(from_mapping(Claim, row) for row in json.loads(text))


def explanation(claims: Sequence[Claim], limit: int = EXPLANATION_LIMIT) -> str | None:
    """One line per unsupported claim, for the Phoenix annotation; None when every claim holds."""
    flagged = [c for c in claims if c.unsupported]
    if claims and all(c.start is not None for c in claims):  # a span scorer: only flagged spans are claims
        lines = [f"{len(claims)} hallucinated span{'s' if len(claims) > 1 else ''}:"]
        lines += [f"- [{c.start}:{c.end}] {c.text!r}" + ("" if c.score is None else f" ({c.score:.2f})") for c in claims]
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if not flagged:
        return f"all {len(claims)} claims supported" if claims else None
    lines = [f"{len(flagged)} of {len(claims)} claims unsupported:"]
    for c in flagged:
        why = f" ({c.reason})" if c.reason else ""
        lines.append(f"- [{c.verdict}] {c.text}{why}")
    text = "\n".join(lines)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ClaimScorer:
    """What every claim-level scorer derives from its ``encode`` and ``assess_encoded``."""

    def score_encoded(self, batch: Sequence) -> list[float | None]:
        return [a.value for a in self.assess_encoded(batch)]

    def score(self, premises: Sequence[str | Sequence[str]], hypotheses: Sequence[str]) -> list[float | None]:
        if len(premises) != len(hypotheses):
            raise ValueError(f"{len(premises)} premises but {len(hypotheses)} hypotheses")
        return self.score_encoded([self.encode(p, h) for p, h in zip(premises, hypotheses)])

    def assess(self, premise: str | Sequence[str], hypothesis: str) -> Assessment:
        return self.assess_encoded([self.encode(premise, hypothesis)])[0]
