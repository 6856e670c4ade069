"""What a reviewer sees of a review item, in two blind steps.

Step one, relevance: the question and the candidate documents (delivered, dropped after
retrieval and removed by a relevance filter) shuffled together under opaque keys, each shown
the same way. No answer (its wording would tell which document it used), no delivered
contexts, no order, id, attribute or count that tells delivered from dropped. The server maps
keys back to document ids. Step two, once relevance is locked in: the answer with the
contexts it was given, for faithful, correct and refusal-appropriate; a shadow pair shows
both answers in random order, each with the contexts *that* side was given, and asks faithful
and correct for A and for B apart, plus the preference. The labels record the order
(``pair_order``, the variant shown as A then B) and each side's verdicts by role
(``pair_verdicts``: ``candidate`` and ``production``); ``faithful``/``correct`` are the item's
own answer's, as for any item. An item reviewed twice is shown to its second reviewer in the
other order, so the shadow report can tell a verdict from a position preference.

Never shown to anyone: release, model, variant, scores, stratum, trace id; documents an
entitlement filter removed (the user was not allowed to see them); documents of a tenant the
reviewer is not scoped to; candidates whose content was not recorded (nobody can judge them:
the page says how many were left out). Bidirectional control characters are made visible.

The shuffle is seeded by the item id, so a reload shows the same order and the server maps
keys back without remembering anything.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any

from rag_monitor import semconv
from rag_monitor.record import Document, QueryRecord, document_key

REASONS = ("wrong", "incomplete", "off-topic", "harmful", "slow")
TRISTATE = ("yes", "no", "unsure")
MAX_TEXT = 4000
TYPED_LABELS = ("note", "corrected_answer")
"""Labels the reviewer types freely: redacted like spans before they are stored."""

# Embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), marks (LRM, RLM, ALM):
# shown as their code point, so a question cannot reorder what the reviewer reads.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def neutralise(text: str | None) -> str:
    """``text`` with every bidirectional control character replaced by a visible ``<U+XXXX>``."""
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text or "")


@dataclass(frozen=True)
class Candidate:
    key: str
    document_id: str | None
    content: str


def _rng(item_id: int, salt: str) -> random.Random:
    return random.Random(hashlib.sha256(f"{salt}:{item_id}".encode()).digest())


def _entitlement_excluded(record: QueryRecord) -> tuple[set[str], set[str]]:
    ids: set[str] = set()
    contents: set[str] = set()
    for applied in record.filters:
        if applied.kind == semconv.FILTER_ENTITLEMENT:
            ids.update(applied.excluded_ids)
            for doc in applied.excluded_documents:
                if doc.id:
                    ids.add(doc.id)
                if doc.content:
                    contents.add(doc.content)
    return ids, contents


def visible_document(doc: Document, tenants: frozenset[str] | None) -> bool:
    """A document carrying a tenant outside the reviewer's scope is never shown."""
    tenant = doc.metadata.get("tenant") if isinstance(doc.metadata, dict) else None
    return tenants is None or tenant is None or tenant in tenants


def candidates(item_id: int, record: QueryRecord, tenants: frozenset[str] | None = None) -> tuple[list[Candidate], int]:
    """``(shuffled candidates under opaque keys, how many were left out for lack of content)``."""
    banned_ids, banned_contents = _entitlement_excluded(record)
    docs: dict[str, Document] = {}
    relevance_filtered = [d for f in record.filters if f.kind != semconv.FILTER_ENTITLEMENT for d in f.excluded_documents]
    relevance_ids = [i for f in record.filters if f.kind != semconv.FILTER_ENTITLEMENT for i in f.excluded_ids]
    for doc in [*record.delivered, *record.retrieved, *relevance_filtered, *(Document(i) for i in relevance_ids)]:
        if (doc.id and doc.id in banned_ids) or (doc.content and doc.content in banned_contents):
            continue
        if not visible_document(doc, tenants):
            continue
        key = doc.id or doc.content
        if key and (key not in docs or not docs[key].content):
            docs[key] = doc
    offered = [d for d in docs.values() if d.content and d.content.strip()]
    # Order by a hash of the content first: the shuffle must not depend on the order above.
    offered.sort(key=lambda d: hashlib.sha256(f"{d.id}\0{d.content}".encode()).digest())
    _rng(item_id, "candidates").shuffle(offered)
    return [Candidate(f"d{i + 1}", d.id, d.content) for i, d in enumerate(offered)], len(docs) - len(offered)


def relevance_view(item_id: int, record: QueryRecord, tenants: frozenset[str] | None = None) -> dict[str, Any]:
    """Step one: the question and the candidates, nothing else."""
    shown, left_out = candidates(item_id, record, tenants)
    return {
        "item": item_id,
        "step": "relevance",
        "question": neutralise(record.query),
        "candidates": [{"key": c.key, "content": neutralise(c.content)} for c in shown],
        "left_out": left_out,
    }


def _flipped(item_id: int, swap: bool = False) -> bool:
    """Whether the pair's other answer is shown first; ``swap`` (a second review) reverses it."""
    return (_rng(item_id, "pair").random() < 0.5) != swap


def shown_contexts(record: QueryRecord, tenants: frozenset[str] | None = None) -> list[str]:
    """The contexts delivered to the generator that the reviewer may see."""
    return [neutralise(d.content) for d in record.delivered if d.content and visible_document(d, tenants)]


def answer_view(item_id: int, record: QueryRecord, paired: QueryRecord | None = None,
                tenants: frozenset[str] | None = None, swap: bool = False) -> dict[str, Any]:
    """Step two: the answer and the contexts it was given; a pair: both, each with its own contexts."""
    view: dict[str, Any] = {"item": item_id, "step": "answer", "question": neutralise(record.query), "reasons": list(REASONS)}
    if paired is None:
        view["answer"] = neutralise(record.answer)
        view["contexts"] = shown_contexts(record, tenants)
    else:
        sides = [(record.answer, shown_contexts(record, tenants)), (paired.answer, shown_contexts(paired, tenants))]
        if _flipped(item_id, swap):
            sides.reverse()
        view["answers"] = [neutralise(answer) for answer, _ in sides]
        view["answer_contexts"] = [contexts for _, contexts in sides]
    return view


def _keys(body: dict[str, Any], name: str, known: dict[str, Candidate]) -> list[str]:
    keys = body.get(name, [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"{name} must be a list of candidate keys")
    unknown = sorted(set(keys) - set(known))
    if unknown:
        raise ValueError(f"{name} names unknown candidates {unknown[:10]}")
    return sorted({document_key(known[k].document_id, known[k].content) for k in keys})


def relevance_labels(item_id: int, record: QueryRecord, body: Any, tenants: frozenset[str] | None = None) -> dict[str, Any]:
    """Validate step one's labels and map keys back to document ids; gold implies relevant.

    Raises ``ValueError`` naming the bad field.
    """
    if not isinstance(body, dict):
        raise ValueError("labels must be a JSON object")
    known = {c.key: c for c in candidates(item_id, record, tenants)[0]}
    relevant = _keys(body, "relevant", known)
    gold = _keys(body, "gold", known)
    return {"relevant_documents": sorted(set(relevant) | set(gold)), "gold_documents": gold}


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be a string of at most {MAX_TEXT} characters")
    return value


def answer_labels(item_id: int, record: QueryRecord, body: Any, paired: QueryRecord | None = None,
                  swap: bool = False) -> dict[str, Any]:
    """Validate step two's labels. Raises ``ValueError`` naming the bad field."""
    if not isinstance(body, dict):
        raise ValueError("labels must be a JSON object")
    out: dict[str, Any] = {}
    for name in ("faithful", "correct", "refusal_appropriate"):
        out[name] = _tristate(body, name)
    reasons = body.get("reasons", [])
    if not isinstance(reasons, list) or any(r not in REASONS for r in reasons):
        raise ValueError(f"reasons must be a list drawn from {REASONS}")
    out["reasons"] = sorted(set(reasons))
    for name in TYPED_LABELS:
        out[name] = _text(body, name)
    if paired is not None:
        preferred = body.get("preferred")
        if preferred not in ("A", "B", "tie", None):
            raise ValueError(f"preferred must be A, B, tie or null, got {str(preferred)[:40]!r}")
        order = pair_order(item_id, record, paired, swap)
        out["pair_order"] = order
        out["preferred"] = {"A": order[0], "B": order[1]}.get(preferred, preferred)
        # Per side: A and B as shown, back to the item's own answer and the other one, then to roles.
        shown = {side: {name: _tristate(body, f"{name}_{side.lower()}") for name in PAIR_VERDICTS} for side in "AB"}
        own, other = (shown["B"], shown["A"]) if _flipped(item_id, swap) else (shown["A"], shown["B"])
        out.update(own)
        candidate_is_own = bool(record.shadow_of)  # as shadow.halves tells them apart
        out["pair_verdicts"] = {"candidate": own if candidate_is_own else other,
                                "production": other if candidate_is_own else own}
    return out


PAIR_VERDICTS = ("faithful", "correct")
"""Asked for each answer of a shadow pair (``faithful_a``, ``correct_b`` ...)."""


def _tristate(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and value not in TRISTATE:
        raise ValueError(f"{name} must be one of {TRISTATE} or null, got {str(value)[:40]!r}")
    return value


def shown_order(item_id: int, record: QueryRecord, paired: QueryRecord, swap: bool = False) -> list[QueryRecord]:
    """A pair's two records as the page shows them, A first."""
    return [paired, record] if _flipped(item_id, swap) else [record, paired]


def pair_order(item_id: int, record: QueryRecord, paired: QueryRecord, swap: bool = False) -> list[str]:
    """The variants of a pair's answers as shown, A first (``record`` is the item's own half)."""
    own, other = record.variant, paired.variant
    return [other, own] if _flipped(item_id, swap) else [own, other]
