"""The demo's corpus: a customer-support policy base plus a CLAP NQ subset, and their questions.

Both ship as package data under ``rag_monitor/demo/data/`` (see ``SOURCES.md`` there)::

    corpus = load_corpus()
    corpus.documents[0].metadata      # {'tenant': '*', 'locale': 'en', 'version': 2, 'archived': False, ...}
    q = corpus.policy_questions[0]
    q.gold_for("acme", "en")          # ('policy-refunds-v2',): the current policy the user should get

Policy families keep an archived older version next to the current one (as real knowledge
bases do); an app that serves the archived one answers wrongly with a perfectly faithful
citation, which is what the demo's bad release does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

PUBLIC_TENANT = "*"
"""Documents every tenant may read."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    """``tenant``, ``locale``, ``version``, ``archived``, ``source`` and, for policies, ``family``."""

    @property
    def content(self) -> str:
        return f"{self.title}. {self.text}"


@dataclass(frozen=True)
class Question:
    text: str
    topic: str
    """``policy:<family>``, ``nq`` (answerable CLAP NQ) or ``nq-unanswerable``."""
    gold_ids: tuple[str, ...] = ()
    """For CLAP NQ: its passage (empty when unanswerable). Policies: see ``gold_for``."""
    family: str | None = None

    def gold_for(self, corpus: Corpus, tenant: str, locale: str) -> tuple[str, ...]:
        """The documents that answer this question for that user (current, entitled, their locale first)."""
        if self.family is None:
            return self.gold_ids
        current = [
            d for d in corpus.documents
            if d.metadata.get("family") == self.family and not d.metadata["archived"]
            and d.metadata["tenant"] in (PUBLIC_TENANT, tenant)
        ]
        localized = [d.id for d in current if d.metadata["locale"] == locale]
        return tuple(localized or [d.id for d in current if d.metadata["locale"] == "en"])


@dataclass(frozen=True)
class Corpus:
    documents: tuple[Document, ...]
    policy_questions: tuple[Question, ...]
    nq_questions: tuple[Question, ...]
    """Answerable CLAP NQ questions (the "new topics" of the query-mix shift)."""
    unanswerable_questions: tuple[Question, ...]

    def by_id(self, doc_id: str) -> Document:
        return self._index[doc_id]

    @property
    def _index(self) -> dict[str, Document]:
        index = self.__dict__.get("_index_cache")
        if index is None:
            index = {d.id: d for d in self.documents}
            object.__setattr__(self, "_index_cache", index)
        return index

    def fingerprint(self) -> str:
        """Changes whenever any document's text changes: keys the embedding cache."""
        import hashlib

        h = hashlib.sha256()
        for d in self.documents:
            h.update(d.id.encode())
            h.update(d.content.encode())
        return h.hexdigest()[:16]


def _read(name: str) -> str:
    return resources.files("rag_monitor.demo").joinpath("data", name).read_text(encoding="utf-8")


def _policies() -> tuple[list[Document], list[Question]]:
    data = json.loads(_read("policies.json"))
    documents, questions = [], []
    for family in data["families"]:
        name = family["family"]
        for d in family["documents"]:
            metadata = {
                "tenant": d["tenant"], "locale": d["locale"], "version": d["version"],
                "archived": d["archived"], "family": name, "source": "policy",
            }
            documents.append(Document(d["id"], d["title"], d["text"], metadata))
        questions += [Question(text, f"policy:{name}", family=name) for text in family["questions"]]
    return documents, questions


def _clapnq() -> tuple[list[Document], list[Question], list[Question]]:
    documents, answerable, unanswerable = [], [], []
    for line in _read("clapnq_subset.jsonl").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        doc_id = f"clapnq-{row['id']}"
        metadata = {"tenant": PUBLIC_TENANT, "locale": "en", "version": 1, "archived": False, "source": "clapnq"}
        documents.append(Document(doc_id, row["title"], row["text"], metadata))
        if row["answerable"]:
            answerable.append(Question(row["question"], "nq", gold_ids=(doc_id,)))
        else:
            # CLAP NQ's unanswerable questions come with a related passage that does not answer them.
            unanswerable.append(Question(row["question"], "nq-unanswerable"))
    return documents, answerable, unanswerable


def load_corpus() -> Corpus:
    """The policy base and the CLAP NQ subset, as shipped with the package."""
    policy_docs, policy_questions = _policies()
    nq_docs, nq_questions, unanswerable = _clapnq()
    return Corpus(tuple(policy_docs + nq_docs), tuple(policy_questions), tuple(nq_questions), tuple(unanswerable))
