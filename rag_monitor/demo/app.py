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
and its retriever and generator are slower by a scripted delay. Every stage's span is timed by the
traffic script (a base duration per stage plus the release's delays, ``demo/timing.py``), not by
the time this machine's load gave the Python code. Its generator also adds an
unsupported sentence (an invented number or step, or a contradiction) to a share of answers
(``demo/embellish.py``), so faithfulness regresses with it. Its index rebuild dropped the
keyword (BM25) side of retrieval: the neighbour-stability probes catch the reshuffle.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_monitor import semconv
from rag_monitor.demo.corpus import PUBLIC_TENANT, Corpus, Document
from rag_monitor.demo.embellish import embellish
from rag_monitor.demo.retrieval import BM25, MiniLMEmbedder, corpus_embeddings, reciprocal_rank_fusion, terms
from rag_monitor.demo.signals import LookupCache
from rag_monitor.demo.timing import StageDurations, Timeline

EMBEDDING_MODEL = "all-MiniLM-L6-v2"
GENERATOR_MODEL = "demo-extractive-1"
RERANKER_MODEL = "demo-hybrid-reranker-1"
INDEX_NAME = "demo-help-center"
"""The data source the retriever searches (priced per call in the demo's price table)."""
SYSTEM_PROMPT_TOKENS = 400
"""The generator's fixed prompt prefix: read from the provider's prompt cache when the prefix is stable."""

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


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
    stale_index: bool = False
    """The bad release's index is a snapshot from before the latest policy updates (``demo/signals.py``)."""
    cache_key_per_session: bool = False
    """The bad release's cache bug: the session id in the cache keys and the prompt prefix, so they rarely hit."""
    keyword_index: bool = True
    """False: the bad release's index rebuild lost its BM25 side, so dense-only retrieval reshuffles
    the candidates (the neighbour-stability probes see it; ``demo/probes.py``)."""
    slow_every: int = 0
    """The provider update's long tail: every ``slow_every``-th answer waits ``slow_delay_s`` more (0: none)."""
    slow_delay_s: float = 0.0
    durations: StageDurations = StageDurations()
    """Each stage's base duration: the spans are timed by the script (``demo/timing.py``), the scripted
    delays above added to it, so a busy machine does not decide the story's latency."""
    model_version: str | None = None
    """The provider's version answering ``GENERATOR_MODEL``, reported as the generate span's response
    model (None: not reported). A new one under the same requested name, with no release, is the
    full demo's provider update: a ``model`` change the alerts' triage compares across."""


GOOD_RELEASE = ReleaseConfig("r1")
BAD_RELEASE = ReleaseConfig("r2", serve_archived_versions=True, retrieval_delay_s=0.15, generation_delay_s=0.35,
                            embellish_share=0.5, keyword_index=False, stale_index=True, cache_key_per_session=True)


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
    """How a query waits until its scripted end (``Timeline.wait``)."""
    shadow: SupportApp | None = None
    """A candidate pipeline answering beside this one, in shadow (``q.shadow``): never seen by users."""
    _vectors: Any = field(default=None, init=False, repr=False)
    _bm25: BM25 | None = field(default=None, init=False, repr=False)
    _versioned_families: frozenset[str] = field(default=frozenset(), init=False, repr=False)
    _intent_centroids: Any = field(default=None, init=False, repr=False)
    _intent_names: list[str] = field(default_factory=list, init=False, repr=False)
    _answers: int = field(default=0, init=False, repr=False)
    """Answers generated by this deployment (``_tail_delay``)."""
    _asked: int = field(default=0, init=False, repr=False)
    """Questions asked of this deployment: the n-th question's stage jitter is its own (``Timeline``)."""
    versions: dict[str, float] = field(default_factory=dict)
    """Commit time of the version of each document this release's index serves (``DemoIndex``)."""
    caches: dict[str, LookupCache] = field(default_factory=lambda: {"embedding": LookupCache(), "retrieval": LookupCache()})

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

    def _tail_delay(self) -> float:
        """Deterministic, not random: every ``slow_every``-th answer of this deployment is slow, so each
        latency window holds slow answers and the quantiles the alerts read move by the full delay."""
        if not self.release.slow_every:
            return 0.0
        self._answers += 1
        return self.release.slow_delay_s if self._answers % self.release.slow_every == 0 else 0.0

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
        """Answer ``question`` for ``user``; every stage is a span of the query's trace, timed by the
        traffic script (``demo/timing.py``), not by how long this machine took.

        ``into``: record on this query handle (a shadow candidate's ``ctx.query``) instead of a new one.
        """
        monitor, release, durations = self.monitor, self.release, self.release.durations
        key = (question, user.session_id) if release.cache_key_per_session else question
        self._asked += 1
        timeline = Timeline.starting_now((release.name, question, user.session_id, self._asked), durations.jitter)
        opened = (contextlib.nullcontext(into) if into is not None
                  else monitor.query(question, session_id=user.session_id, user_id=user.id, tenant=user.tenant,
                                     start_time_ns=timeline.start_ns))
        with opened as q:
            if self.shadow is not None and into is None:
                candidate = self.shadow
                q.shadow(candidate.release.name, lambda ctx: candidate.ask(ctx.text, user, into=ctx.query))
            vector, retrieved = self.caches["embedding"].get(key), self.caches["retrieval"].get(key)
            q.cache("embedding", hit=vector is not None)
            q.cache("retrieval", hit=retrieved is not None)
            embedded = vector is None
            if embedded:
                vector = self.embedder.encode([question])[0]
                self.caches["embedding"].put(key, vector)
            # The query's vector, so the agent can watch the query mix drift; tokens when it was computed.
            start, end = timeline.next("embed", durations.embed_s if embedded else durations.cache_hit_s)
            q.embed(model=EMBEDDING_MODEL, vectors=[vector], tokens=_tokens(len(question.split())) if embedded else None,
                    start_time_ns=start).end(end)
            searched = retrieved is None
            start, end = (timeline.next("retrieve", durations.retrieve_s, release.retrieval_delay_s) if searched
                          else timeline.next("retrieve", durations.cache_hit_s))
            with q.retrieve(data_source=INDEX_NAME if searched else None, start_time_ns=start) as r:  # a cached result searched nothing
                if searched:
                    retrieved = self._retrieve(question, vector)
                    self.caches["retrieval"].put(key, retrieved)
                r.documents([
                    {"id": d.id, "content": d.content, "score": score,
                     "metadata": {**d.metadata, "committed_at": self.versions[d.id]} if d.id in self.versions else d.metadata}
                    for d, score in retrieved
                ])
                r.end(end)
            intent = self._intent(vector)
            q.set_attribute(semconv.RAG_INTENT, intent)

            allowed = [(d, s) for d, s in retrieved if entitled(d, user)]
            q.filter(
                semconv.FILTER_ENTITLEMENT, predicate=f"tenant IN ('{PUBLIC_TENANT}', '{user.tenant}')",
                candidates_in=len(retrieved), candidates_out=len(allowed),
                excluded_ids=[d.id for d, _ in retrieved if not entitled(d, user)], start_time_ns=timeline.at(),
            )
            relevant = [(d, s) for d, s in allowed if self._relevance_keep(d, user)]
            excluded = tuple(d.id for d, _ in allowed if not self._relevance_keep(d, user))
            q.filter(
                semconv.FILTER_RELEVANCE, predicate=self._relevance_predicate(user),
                candidates_in=len(allowed), candidates_out=len(relevant), excluded_ids=excluded, start_time_ns=timeline.at(),
            )
            start, end = timeline.next("rerank", durations.rerank_s)
            with q.rerank(model=RERANKER_MODEL, top_k=release.context_k, start_time_ns=start) as rr:
                rr.input_documents([{"id": d.id, "content": d.content, "score": s} for d, s in relevant])
                reranked = self._rerank(question, vector, relevant)
                rr.documents([{"id": d.id, "content": d.content, "score": s} for d, s in reranked])
                rr.end(end)
            context = [d for d, _ in reranked]
            prompt_words = len(question.split()) + sum(len(d.content.split()) for d in context)
            q.context(document_ids=[d.id for d in context], tokens=_tokens(prompt_words), start_time_ns=timeline.at())
            start, end = timeline.next("generate", durations.generate_s, release.generation_delay_s + self._tail_delay())
            with q.generate(model=GENERATOR_MODEL, provider="local", start_time_ns=start) as g:
                if release.model_version:
                    g.response_model(f"{GENERATOR_MODEL}-{release.model_version}")
                text, citations, confidence = self._generate(question, context)
                text = embellish(text, question, user.id, "\n".join(d.content for d in context), release.embellish_share)
                g.first_token(time_ns=end)  # extractive: the whole answer at once
                g.tokens(prompt=SYSTEM_PROMPT_TOKENS + _tokens(prompt_words), completion=_tokens(len(text.split())) if text else 0,
                         cached_prompt=0 if release.cache_key_per_session else SYSTEM_PROMPT_TOKENS)
                g.end(end)
            if text:
                q.answer(text, citations=citations, confidence=confidence)
            else:
                text = "I could not find this in our help articles. A support agent can help you further."
                q.refuse(reason="no supporting sentence in the retrieved documents", answer=text)
            timeline.wait(self.sleep)
            q.end(timeline.end_ns)  # the last stage's end, whatever this machine's load made of the wall clock
            return Answer(
                trace_id=q.trace_id, text=text, citations=citations, refused=not citations,
                confidence=confidence, intent=intent,
                retrieved_ids=tuple(d.id for d, _ in retrieved), delivered_ids=tuple(d.id for d in context),
                relevance_excluded_ids=excluded,
            )


def _tokens(words: int) -> int:
    """About 1.3 tokens per English word, as a tokenizer would count them."""
    return int(round(words * 1.3))
