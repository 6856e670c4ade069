"""RAGTruth (Niu et al., ACL 2024, MIT): real LLM answers with human-annotated hallucinations.

Each line of ``summary.jsonl`` / ``data2txt.jsonl`` holds one source (a news article, or a
business record as JSON) and the answers six LLMs wrote from it, each with the hallucinated
spans people marked. An answer with at least one marked span is *unsupported*; with none,
*supported* (RAGTruth's response-level label). A data-to-text record is given to the scorer as
its JSON text, as the LLMs were given it.

Usage::

    data = load_ragtruth("tests/data/ragtruth/summary_20.jsonl")
    scores = scorer.score([[p] for p in data.premises], data.hypotheses)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RagTruthData:
    """One row per answer; ``sources`` keeps the answers of one source together (folds, splits)."""

    premises: list[str] = field(default_factory=list)
    hypotheses: list[str] = field(default_factory=list)
    supported: list[bool] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    """The source's line index in the file: its six answers share it."""
    models: list[str] = field(default_factory=list)


def load_ragtruth(path: str | Path) -> RagTruthData:
    """Read a RAGTruth task file (``source_id, source, responses[{response, model, labels}]``)."""
    data = RagTruthData()
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                source = row["source"]
                premise = source if isinstance(source, str) else json.dumps(source, ensure_ascii=False)
                answers = [(r["response"], not r["labels"], r.get("model", "")) for r in row["responses"]]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{index + 1}: not a RAGTruth row: {exc}") from exc
            for answer, supported, model in answers:
                data.premises.append(premise)
                data.hypotheses.append(answer)
                data.supported.append(supported)
                data.sources.append(index)
                data.models.append(model)
    return data
