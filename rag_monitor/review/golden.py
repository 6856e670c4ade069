"""The golden evaluation set: reviewed items exported as JSON lines and as a Phoenix dataset.

One row per reviewed item: question, delivered contexts with doc ids, answer, the human
labels, gold doc ids (the documents the reviewer marked relevant), the versions that produced
it (corpus, label schema, scorer), the sampling stratum and weight (1 / inclusion probability),
and the reviewer's pseudonym. Release, model and variant are kept for analysis (the export is
for ML engineers, not blind reviewers).

Usage::

    rows = golden_rows(store, corpus_version="kb-2026-11", scorer_versions={"lexical-v1": "1"})
    write_jsonl(rows, "golden.jsonl"); rows == read_jsonl("golden.jsonl")
    push_to_phoenix(rows, "http://127.0.0.1:6006", dataset="rag-golden")
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

LABEL_SCHEMA_VERSION = "1"


def golden_rows(
    store,
    *,
    corpus_version: str = "",
    since: float | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for item, review in store.reviewed(since=since):
        record = item.query_record
        scores = store.scores_for(item.trace_id)
        rows.append({
            "trace_id": item.trace_id,
            "question": record.query,
            "contexts": [{"id": d.id, "content": d.content} for d in record.delivered],
            "answer": record.answer,
            "labels": {k: v for k, v in review.labels.items() if k != "relevant_documents"},
            "gold_doc_ids": list(review.labels.get("relevant_documents", [])),
            "scores": {name: s.score for name, s in scores.items()},
            # The threshold each verdict was taken at, and which answer sentences were unsupported.
            "score_thresholds": {name: s.threshold for name, s in scores.items()},
            "score_claims": {name: json.loads(s.claims) for name, s in scores.items() if s.claims},
            "versions": {
                "corpus": corpus_version,
                "labels": LABEL_SCHEMA_VERSION,
                "scorers": {name: s.scorer_version for name, s in scores.items()},
            },
            "release": record.release,
            "model": record.llm_model,
            "variant": record.variant,
            "stratum": item.stratum,
            "weight": item.weight,
            "reviewer": review.reviewer,
            "reviewed_at": review.created_at,
        })
    return rows


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
    """Create a Phoenix dataset: input = question and contexts, output = answer and gold labels."""
    try:
        from phoenix.client import Client
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("pushing to Phoenix needs the phoenix extra: pip install 'rag-monitor[phoenix]'") from exc
    if not rows:
        raise ValueError("no reviewed items to export")
    client = Client(base_url=base_url)
    return client.datasets.create_dataset(
        name=dataset,
        inputs=[{"question": r["question"], "contexts": r["contexts"]} for r in rows],
        outputs=[{"answer": r["answer"], "labels": r["labels"], "gold_doc_ids": r["gold_doc_ids"]} for r in rows],
        metadata=[{k: r[k] for k in ("trace_id", "versions", "stratum", "weight", "reviewer", "release", "scores")} for r in rows],
        dataset_description=description or "rag-monitor golden set: human-reviewed production queries",
    )
