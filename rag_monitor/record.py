"""``QueryRecord``: one RAG query, assembled from the spans of its trace.

The agent builds one per trace (whatever dialect the spans came in), redacts it, updates
metrics from it, decides sampling on it and persists it when it must. Plain dataclasses,
no dependencies beyond the standard library, so every layer can use them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import functools
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class StageTiming:
    """One pipeline stage as timed by its span."""

    name: str
    """A stage from ``semconv.STAGES`` or an app-defined name."""
    span_id: str
    start_ns: int
    end_ns: int
    error: str | None = None

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass
class Document:
    """A document retrieved, reranked or delivered to the generator."""

    id: str | None
    content: str = ""
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str | None:
        """How reviews and filters name the document: its id, else a hash of its content (None: neither)."""
        return document_key(self.id, self.content)


def document_key(document_id: str | None, content: str | None) -> str | None:
    """A document's id, or ``content:<sha256 prefix>`` for one without an id: the one key a review's
    relevant documents and a filter's removed set share, so an id-less document can match."""
    if document_id:
        return document_id
    if content:
        return f"content:{hashlib.sha256(content.encode()).hexdigest()[:16]}"
    return None


@dataclass
class FilterApplied:
    """A filter as the pipeline applied it."""

    kind: str
    """``entitlement`` or ``relevance`` (``semconv.FILTER_KINDS``)."""
    predicate: str = ""
    candidates_in: int | None = None
    candidates_out: int | None = None
    excluded_ids: list[str] = field(default_factory=list)
    excluded_documents: list[Document] = field(default_factory=list)
    """The removed documents with their content, when the app sends it (for blind review)."""

    @property
    def emptied(self) -> bool:
        """The filter removed every candidate it was given."""
        return bool(self.candidates_in) and self.candidates_out == 0

    @property
    def removed_ids(self) -> list[str]:
        """Ids the filter removed, named in ``excluded_ids`` or ``excluded_documents`` (either or both)."""
        ids = dict.fromkeys(self.excluded_ids)
        ids.update((d.id, None) for d in self.excluded_documents if d.id)
        return list(ids)

    @property
    def removed_keys(self) -> list[str]:
        """``removed_ids`` plus the content key of removed documents sent without an id
        (``document_key``): what a review's relevant documents are compared with."""
        keys = dict.fromkeys(self.excluded_ids)
        keys.update((k, None) for k in (d.key for d in self.excluded_documents) if k)
        return list(keys)

    @property
    def removed_any(self) -> bool:
        """The filter removed at least one of its (unfiltered top-k) candidates."""
        fewer = self.candidates_in is not None and self.candidates_out is not None and self.candidates_out < self.candidates_in
        return fewer or bool(self.excluded_ids) or bool(self.excluded_documents)


@dataclass
class Feedback:
    """A user signal about an answer, arriving in the query's trace later."""

    kind: str
    """One of ``semconv.FEEDBACK_KINDS``."""
    time_ns: int
    reason: str | None = None
    value: float | str | None = None
    span_id: str | None = None
    """The feedback span's id: the event's identity, so a resent span is stored once."""


@dataclass
class ModelCall:
    """One model call of the query, priced with its own model: an LLM generation, an embedding, a rerank."""

    kind: str
    """``llm``, ``embedding``, ``rerank`` or ``retrieval`` (``model`` is then the data source searched)."""
    model: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's prompt cache (priced at the cached rate)."""
    cache_write_input_tokens: int = 0
    """Of ``input_tokens``, those written to the provider's prompt cache (priced at the cache-write rate)."""
    requested_model: str | None = None
    """The model name the app asked for (``gen_ai.request.model``, OpenInference's invocation parameters)."""
    response_model: str | None = None
    """The model the provider answered with (``gen_ai.response.model``, OpenInference's ``llm.model_name``)."""


HIDDEN_FIELDS = ("query", "answer", "documents")
"""Content an app can hide at the source (``CaptureConfig``); listed in ``QueryRecord.hidden``."""


@dataclass
class QueryRecord:
    """Everything the agent keeps about one query."""

    trace_id: str
    """32 lowercase hex digits."""
    root_span_id: str
    start_ns: int
    end_ns: int
    dialect: str = "sdk"
    """Which instrumentation produced the spans: ``sdk``, ``openinference`` or ``genai``."""
    service: str = ""
    query: str = ""
    answer: str = ""
    session_id: str | None = None
    user_id: str | None = None
    release: str = ""
    prompt_version: str | None = None
    config_version: str | None = None
    variant: str = "production"
    tenant: str | None = None
    intent: str | None = None
    route: str | None = None
    refused: bool = False
    confidence: float | None = None
    citations: list[str] = field(default_factory=list)
    shadow_of: str | None = None
    candidate: str | None = None
    """A shadow query's candidate pipeline (``rag.shadow.candidate``)."""
    stages: list[StageTiming] = field(default_factory=list)
    filters: list[FilterApplied] = field(default_factory=list)
    retrieved: list[Document] = field(default_factory=list)
    """Documents as retrieved, before reranking."""
    delivered: list[Document] = field(default_factory=list)
    """The contexts delivered to the generator (the reranker's output when there is one)."""
    llm_model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    time_to_first_token_s: float | None = None
    embedding_model: str | None = None
    query_embedding: list[float] | None = None
    document_embeddings: list[list[float]] = field(default_factory=list)
    feedback: list[Feedback] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    """Every LLM, embedding and rerank call, each with its own model and tokens."""
    cache: dict[str, dict[str, int]] = field(default_factory=dict)
    """The app's cache lookups during the query: ``{"embedding": {"hit": 2, "miss": 1}}``."""
    hidden: list[str] = field(default_factory=list)
    """Which of ``HIDDEN_FIELDS`` the app hid: never scored, embedded or compared for regenerations."""
    error: str | None = None
    """The root span's error status message, if the query failed."""

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def stage(self, name: str) -> StageTiming | None:
        """The first stage of that name, if the pipeline ran it."""
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the store's and the export's representation)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueryRecord:
        """Inverse of ``to_dict``. Keys this version does not know are ignored at every depth, so a
        replica reads what a newer one wrote during a rolling upgrade (and old rows still load)."""
        return from_mapping(cls, data)


def from_mapping(cls: type[T], data: dict[str, Any]) -> T:
    """A dataclass (and the dataclasses in its fields) from a JSON-like dict, unknown keys ignored.

    Fields are typed ``X``, ``X | None``, ``list[X]`` or ``tuple[X, ...]`` for a dataclass ``X``;
    anything else is taken as it is.
    """
    fields = _field_builders(cls)
    return cls(**{k: fields[k](v) for k, v in data.items() if k in fields})


@functools.cache
def _field_builders(cls: type) -> dict[str, Callable[[Any], Any]]:
    hints = typing.get_type_hints(cls)
    return {f.name: _builder(hints[f.name]) for f in dataclasses.fields(cls)}


def _identity(value: Any) -> Any:
    return value


def _builder(hint: Any) -> Callable[[Any], Any]:
    if dataclasses.is_dataclass(hint):
        return lambda value: from_mapping(hint, value) if isinstance(value, dict) else value
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (list, tuple) and args:
        item = _builder(args[0])
        if item is _identity:
            return _identity
        return lambda value: type(value)(item(v) for v in value) if isinstance(value, (list, tuple)) else value
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _builder(args[0])
    return _identity
