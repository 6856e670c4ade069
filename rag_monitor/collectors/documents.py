"""Documents and embedding vectors out of span attributes, in every dialect's shape."""

from __future__ import annotations

from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.values import as_float, as_text, json_object
from rag_monitor.record import Document, QueryRecord

__all__ = ["assign_embeddings", "documents", "genai_documents", "output_document_ids", "vectors"]

_DOCUMENT_FIELDS = (sc.DOCUMENT_ID, sc.DOCUMENT_CONTENT, sc.DOCUMENT_SCORE, sc.DOCUMENT_METADATA)
HIDDEN_VALUE = "__REDACTED__"
"""OpenInference's placeholder for content an app hid (``TraceConfig``): hidden, not text."""

Vectors = list[tuple[int, list[float], "str | None"]]


def documents(attrs: dict[str, Any], prefix: str, id_keys: tuple[str, ...], output_ids: list | None = None) -> list[Document]:
    """Parse ``{prefix}.{i}.document.{field}`` attributes into Documents, in index order.

    A document without ``document.id`` takes the id at its index in ``output_ids`` (LangChain's
    ``Document.id``, from the span's output), else the first of ``id_keys`` in its metadata.
    OpenInference indexes are dense from 0, so look the fields up index by index (a few dict
    lookups per document) instead of parsing every attribute key.
    """
    found = []
    get = attrs.get
    id_key, content_key, score_key, metadata_key = _DOCUMENT_FIELDS
    index = 0
    while True:
        base = f"{prefix}.{index}."
        doc_id, content, score, metadata = get(base + id_key), get(base + content_key), get(base + score_key), get(base + metadata_key)
        if doc_id is None and content is None and score is None and metadata is None:
            break
        if metadata is None:
            metadata = {}
        else:
            metadata = _metadata(metadata)
        if doc_id is None or doc_id == "":
            if output_ids is not None and index < len(output_ids):
                doc_id = output_ids[index]
            if doc_id is None or doc_id == "":
                doc_id = next((metadata[k] for k in id_keys if metadata.get(k) not in (None, "")), None)
        index += 1
        found.append(Document(
            None if doc_id is None else doc_id if type(doc_id) is str else str(doc_id),
            "" if content == HIDDEN_VALUE else as_text(content),
            as_float(score),
            metadata,
        ))
    return found


_SCALARS = (str, int, float, bool, type(None))
_METADATA_CACHE_ENTRIES = 1024
_flat_metadata: dict[str, dict[str, Any]] = {}
"""Parsed metadata JSON of recent documents (popular chunks repeat), flat objects only: each
document gets its own copy, which a flat object's ``dict()`` is (bounded; cleared when full)."""


def _metadata(value: Any) -> dict[str, Any]:
    """A document's metadata attribute as a dict (JSON text parsed; anything else under ``value``)."""
    if type(value) is str:
        cached = _flat_metadata.get(value)
        if cached is not None:
            return dict(cached)
    parsed = json_object(value)
    if not isinstance(parsed, dict):
        return {} if parsed == "" else {"value": parsed}
    if type(value) is str and all(type(v) in _SCALARS for v in parsed.values()):
        if len(_flat_metadata) >= _METADATA_CACHE_ENTRIES:
            _flat_metadata.clear()
        _flat_metadata[value] = dict(parsed)
    return parsed


def output_document_ids(output_value: Any) -> list | None:
    """Ids of the documents in a retriever's JSON output (LangChain: ``{"documents": [{"id": ...}]}``)."""
    parsed = json_object(output_value)
    if isinstance(parsed, dict):
        parsed = parsed.get("documents")
    if not isinstance(parsed, list):
        return None
    return [item.get("id") if isinstance(item, dict) and isinstance(item.get("id"), (str, int)) else None for item in parsed]


def genai_documents(attrs: dict[str, Any]) -> list[Document]:
    """``gen_ai.retrieval.documents``: a JSON array of ``{"id", "score", "content"?}`` objects."""
    value = json_object(attrs.get(sc.GEN_AI_RETRIEVAL_DOCUMENTS))
    if not isinstance(value, list):
        return []
    found = []
    for item in value:
        if isinstance(item, dict):
            metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
            doc_id = item.get("id")
            found.append(Document(None if doc_id is None else str(doc_id), as_text(item.get("content")), as_float(item.get("score")), metadata))
    return found


def vectors(attrs: dict[str, Any]) -> Vectors:
    """(index, vector, text) of every ``embedding.embeddings.{i}.embedding.vector``."""
    out = []
    prefix = sc.EMBEDDING_EMBEDDINGS + "."
    suffix = "." + sc.EMBEDDING_VECTOR
    for key, value in attrs.items():
        if key.startswith(prefix) and key.endswith(suffix) and isinstance(value, list):
            index = key[len(prefix) : -len(suffix)]
            if index.isdigit():
                text = attrs.get(f"{prefix}{index}.{sc.EMBEDDING_TEXT}")
                out.append((int(index), value, text if isinstance(text, str) and text != HIDDEN_VALUE else None))
    out.sort(key=lambda item: item[0])
    return out


def assign_embeddings(record: QueryRecord, found: list[tuple[str | None, Vectors]]) -> None:
    """The query's vector and the documents' vectors, each identified, never guessed.

    ``found`` is (role, vectors) per embedding span, role being the span's ``rag.embedding.role``.
    The query's vector is the first of a span whose role is ``query`` or whose text is the
    query; a document vector has role ``document`` or a text other than the query. A vector
    with neither text nor role is not used (it could be either).
    """
    query = record.query
    for role, items in found:
        for _index, vector, text in items:
            is_query = role == sc.EMBEDDING_ROLE_QUERY or (query and text == query)
            if is_query:
                if record.query_embedding is None:
                    record.query_embedding = vector
            elif role == sc.EMBEDDING_ROLE_DOCUMENT or text is not None:
                record.document_embeddings.append(vector)
