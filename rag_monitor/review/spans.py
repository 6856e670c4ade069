"""The spans a span scorer (LettuceDetect) flagged in an answer, for the review page *after* the verdict.

Showing them before the reviewer's own verdict is saved would unblind the judgement, so the
claim and step views never carry them: only the answer to a stored verdict does. The answer is
cut into plain and flagged segments on the raw text (the scorer's offsets refer to it), and
each segment is neutralised as the page shows any text; no score, scorer name or threshold is
sent.

Usage::

    flagged_answers(store, [("A", record_a), ("B", record_b)])
    # [{"label": "A", "scored": True, "segments": [{"text": "Paris is in ", "flagged": False}, ...]}, ...]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rag_monitor.record import QueryRecord
from rag_monitor.review.blind import neutralise
from rag_monitor.review.shadow import pair_half_scorer

SPAN_SCORERS = ("lettucedetect",)
"""Scorers whose claims are answer spans (``faithfulness/lettuce.py``'s name: the review plane sits
beside the faithfulness plane, not above it, so it names them; a test keeps the two in step)."""


def _spans(claims_json: str | None) -> list[tuple[int, int]]:
    """The (start, end) offsets of the stored claims (``faithfulness/claims.py``'s JSON; other keys ignored)."""
    rows = json.loads(claims_json) if claims_json else []
    return [(row["start"], row["end"]) for row in rows
            if isinstance(row.get("start"), int) and isinstance(row.get("end"), int)]


def segments(answer: str, spans: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """``answer`` as consecutive segments, flagged where a span covers it (overlaps merged, bad offsets dropped)."""
    cuts: list[tuple[int, int]] = []
    for start, end in sorted((s, e) for s, e in spans if 0 <= s < e <= len(answer)):
        if cuts and start <= cuts[-1][1]:
            cuts[-1] = (cuts[-1][0], max(cuts[-1][1], end))
        else:
            cuts.append((start, end))
    out, at = [], 0
    for start, end in cuts:
        if start > at:
            out.append({"text": neutralise(answer[at:start]), "flagged": False})
        out.append({"text": neutralise(answer[start:end]), "flagged": True})
        at = end
    if at < len(answer) or not out:
        out.append({"text": neutralise(answer[at:]), "flagged": False})
    return out


def _span_score(scores: dict[str, Any]):
    for name in SPAN_SCORERS:
        found = scores.get(name) or scores.get(pair_half_scorer(name))
        if found is not None and found.score is not None:
            return found
    return None


def flagged_answers(store, answers: Sequence[tuple[str, QueryRecord]]) -> list[dict[str, Any]] | None:
    """Each ``(label, record)`` answer with the span scorer's flagged parts; None when no answer was span-scored."""
    out, any_scored = [], False
    for label, record in answers:
        score = _span_score(store.scores.for_trace(record.trace_id))
        spans = _spans(score.claims) if score is not None else []
        any_scored |= score is not None
        out.append({"label": label, "scored": score is not None, "segments": segments(record.answer or "", spans)})
    return out if any_scored else None
