"""The golden evaluation set: reviewed items exported as JSON lines and as a Phoenix dataset.

One row per reviewed item: question, delivered contexts with doc ids, answer, the expected
answer (the reviewer's correction, else the answer when judged correct), gold doc ids, every
review's labels and the agreement status of items reviewed twice, the versions that produced
it (export, corpus, label schema, scorer), the sampling stratum and weight (1 / inclusion
probability), links back to the trace, and a split. Release, model and variant are kept for
analysis (the export is for ML engineers, not blind reviewers).

Splits (development, judge calibration, release) are drawn per group of connected rows: rows
of one session, or sharing a source document (delivered or gold), land in the same split, so
a set used to tune a prompt or a judge never leaks into the one that decides a release.

Usage::

    rows = golden_rows(store, corpus_version="kb-2026-11", phoenix_url="http://phoenix:6006")
    write_jsonl(rows, "golden.jsonl"); rows == read_jsonl("golden.jsonl")
    push_to_phoenix(rows, "http://127.0.0.1:6006", dataset="rag-golden")
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rag_monitor.review.agreement import item_agreement

LABEL_SCHEMA_VERSION = "2"
EXPORT_VERSION = "2"
"""Version of the row format: 2 added expected answers, gold documents, agreement and splits."""
SPLITS = ("development", "judge_calibration", "release")
DEFAULT_SHARES = (0.6, 0.2, 0.2)


def _expected_answer(record, labels: dict[str, Any]) -> str | None:
    corrected = (labels.get("corrected_answer") or "").strip()
    if corrected:
        return corrected
    return record.answer if labels.get("correct") == "yes" else None


def _gold(labels: dict[str, Any]) -> list[str]:
    gold = labels.get("gold_documents")
    return list(gold if gold is not None else labels.get("relevant_documents", []))


def golden_rows(
    store,
    *,
    corpus_version: str = "",
    since: float | None = None,
    phoenix_url: str = "",
    phoenix_project: str = "rag-monitor",
    shares: Sequence[float] = DEFAULT_SHARES,
) -> list[dict[str, Any]]:
    reviewed = store.queue.reviewed(since=since)
    every_review = store.review.all_reviews([item.id for item, _ in reviewed])
    rows = []
    for item, first in reviewed:
        record = item.query_record
        scores = store.scores.for_trace(item.trace_id)
        reviews = every_review.get(item.id, [first])
        needed = 1 if item.state == "reviewed" else 2
        labels = {k: v for k, v in first.labels.items() if k not in ("relevant_documents", "gold_documents")}
        links = {"trace_id": item.trace_id}
        if phoenix_url:
            # Phoenix's REST query for the trace's spans (the UI routes need internal ids).
            links["phoenix"] = f"{phoenix_url.rstrip('/')}/v1/projects/{quote(phoenix_project, safe='')}/spans?trace_id={item.trace_id}"
        rows.append({
            "export_version": EXPORT_VERSION,
            "trace_id": item.trace_id,
            "links": links,
            "session_id": record.session_id,
            "question": record.query,
            "contexts": [{"id": d.id, "content": d.content} for d in record.delivered],
            "answer": record.answer,
            "expected_answer": _expected_answer(record, first.labels),
            "labels": labels,
            "gold_doc_ids": _gold(first.labels),
            "relevant_doc_ids": list(first.labels.get("relevant_documents", [])),
            "agreement": item_agreement(reviews, needed),
            "reviews": [{"reviewer": r.reviewer, "labels": r.labels, "reviewed_at": r.created_at} for r in reviews],
            "scores": {name: s.score for name, s in scores.items()},
            # The threshold each verdict was taken at, and which answer sentences were unsupported.
            "score_thresholds": {name: s.threshold for name, s in scores.items()},
            "score_claims": {name: json.loads(s.claims) for name, s in scores.items() if s.claims},
            "versions": {
                "export": EXPORT_VERSION,
                "corpus": corpus_version,
                "labels": LABEL_SCHEMA_VERSION,
                "scorers": {name: s.scorer_version for name, s in scores.items()},
            },
            "release": record.release,
            "model": record.llm_model,
            "variant": record.variant,
            "stratum": item.stratum,
            "weight": item.weight,
            "reviewer": first.reviewer,
            "reviewed_at": first.created_at,
        })
    assign_splits(rows, shares)
    return rows


def _group_keys(row: dict[str, Any]) -> list[str]:
    keys = [f"session:{row['session_id']}"] if row.get("session_id") else []
    keys += [f"doc:{c['id']}" for c in row["contexts"] if c.get("id")]
    keys += [f"doc:{d}" for d in row["gold_doc_ids"]]
    return keys or [f"trace:{row['trace_id']}"]


def assign_splits(rows: list[dict[str, Any]], shares: Sequence[float] = DEFAULT_SHARES) -> None:
    """Set ``row['split']``: connected rows (a session, a shared document) share one split.

    The split of a group is a hash of its smallest key, so re-exporting keeps rows where
    they were as long as their group does not merge with another.
    """
    if len(shares) != 3 or any(s < 0 for s in shares) or abs(sum(shares) - 1.0) > 1e-9:
        raise ValueError(f"split shares must be three non-negative numbers summing to 1, got {list(shares)}")
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        parent.setdefault(key, key)
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    row_keys = [_group_keys(row) for row in rows]
    for keys in row_keys:
        root = find(keys[0])
        for key in keys[1:]:
            other = find(key)
            if other != root:
                low, high = sorted((root, other))
                parent[high] = low
                root = low
    for row, keys in zip(rows, row_keys):
        group = find(keys[0])
        u = int.from_bytes(hashlib.sha256(f"split:{group}".encode()).digest()[:8], "big") / 2**64
        row["split"] = SPLITS[0] if u < shares[0] else SPLITS[1] if u < shares[0] + shares[1] else SPLITS[2]
        row["split_group"] = hashlib.sha256(group.encode()).hexdigest()[:16]


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def push_to_phoenix(rows: list[dict[str, Any]], base_url: str, dataset: str, description: str = ""):
    """Create a Phoenix dataset: input = question and contexts, output = expected answer and gold labels."""
    from rag_monitor.extras import require

    Client = require("phoenix.client", extra="phoenix", for_what="pushing to Phoenix").Client
    if not rows:
        raise ValueError("no reviewed items to export")
    client = Client(base_url=base_url)
    return client.datasets.create_dataset(
        name=dataset,
        inputs=[{"question": r["question"], "contexts": r["contexts"]} for r in rows],
        outputs=[{"answer": r["answer"], "expected_answer": r["expected_answer"], "labels": r["labels"],
                  "gold_doc_ids": r["gold_doc_ids"]} for r in rows],
        metadata=[{k: r[k] for k in ("trace_id", "versions", "stratum", "weight", "reviewer", "release", "scores",
                                     "agreement", "split", "export_version")} for r in rows],
        dataset_description=description or "rag-monitor golden set: human-reviewed production queries",
    )
