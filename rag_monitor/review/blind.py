"""What a reviewer sees of a review item: nothing that reveals the pipeline's choices.

The blind view has the question, the delivered contexts and the answer; never the release,
model, variant, scores, stratum or trace id. For relevance labels it lists the candidate
documents (delivered and filtered out) shuffled together, under opaque keys, so the reviewer
cannot tell which the pipeline dropped; the server maps the keys back to document ids. A
shadow pair shows both answers in random order.

The shuffle is seeded by the item id, so the same item shows the same order on reload and the
server can map keys back without remembering anything.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from rag_monitor.record import Document, QueryRecord

REASONS = ("wrong", "incomplete", "off-topic", "harmful", "slow")
TRISTATE = ("yes", "no", "unsure")


@dataclass(frozen=True)
class Candidate:
    key: str
    document_id: str | None
    content: str


def _rng(item_id: int, salt: str) -> random.Random:
    return random.Random(hashlib.sha256(f"{salt}:{item_id}".encode()).digest())


def candidates(item_id: int, record: QueryRecord) -> list[Candidate]:
    """Delivered and filtered-out documents, deduplicated by id, shuffled, under opaque keys."""
    docs: dict[str, Document] = {}
    for doc in [*record.delivered, *record.retrieved]:
        key = doc.id or doc.content
        if key and key not in docs:
            docs[key] = doc
    for applied in record.filters:
        for doc in applied.excluded_documents:
            if doc.id and (doc.id not in docs or not docs[doc.id].content):
                docs[doc.id] = doc
        for doc_id in applied.excluded_ids:
            docs.setdefault(doc_id, Document(id=doc_id, content=""))
    shuffled = list(docs.values())
    _rng(item_id, "candidates").shuffle(shuffled)
    return [Candidate(f"d{i + 1}", d.id, d.content) for i, d in enumerate(shuffled)]


def blind_view(item_id: int, record: QueryRecord, paired: QueryRecord | None = None) -> dict[str, Any]:
    """The JSON the review page renders: only what a blind reviewer may see."""
    view: dict[str, Any] = {
        "item": item_id,
        "question": record.query,
        "contexts": [d.content for d in record.delivered],
        "candidates": [{"key": c.key, "content": c.content or "(content not recorded)"} for c in candidates(item_id, record)],
        "reasons": list(REASONS),
    }
    if paired is None:
        view["answer"] = record.answer
    else:
        answers = [record.answer, paired.answer]
        flipped = _rng(item_id, "pair").random() < 0.5
        view["answers"] = answers[::-1] if flipped else answers
    return view


def unblind_labels(item_id: int, record: QueryRecord, labels: dict[str, Any], paired: QueryRecord | None = None) -> dict[str, Any]:
    """Validate labels posted by the page and map opaque keys back to document ids.

    Raises ``ValueError`` with a message naming the bad field.
    """
    if not isinstance(labels, dict):
        raise ValueError("labels must be a JSON object")
    out: dict[str, Any] = {}
    for name in ("faithful", "correct", "refusal_appropriate"):
        value = labels.get(name)
        if value is not None and value not in TRISTATE:
            raise ValueError(f"{name} must be one of {TRISTATE} or null, got {value!r}")
        out[name] = value
    keys = labels.get("relevant", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError("relevant must be a list of candidate keys")
    by_key = {c.key: c for c in candidates(item_id, record)}
    unknown = sorted(set(keys) - set(by_key))
    if unknown:
        raise ValueError(f"relevant names unknown candidates {unknown}")
    out["relevant_documents"] = sorted({by_key[k].document_id for k in keys if by_key[k].document_id})
    reasons = labels.get("reasons", [])
    if not isinstance(reasons, list) or any(r not in REASONS for r in reasons):
        raise ValueError(f"reasons must be a list drawn from {REASONS}")
    out["reasons"] = sorted(set(reasons))
    note = labels.get("note", "")
    if not isinstance(note, str) or len(note) > 4000:
        raise ValueError("note must be a string of at most 4000 characters")
    out["note"] = note
    if paired is not None:
        preferred = labels.get("preferred")
        if preferred not in ("A", "B", "tie", None):
            raise ValueError(f"preferred must be A, B, tie or null, got {preferred!r}")
        flipped = _rng(item_id, "pair").random() < 0.5
        own, other = record.variant, paired.variant
        mapping = {"A": other if flipped else own, "B": own if flipped else other}
        out["preferred"] = mapping.get(preferred, preferred)
    return out
