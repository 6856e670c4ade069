"""Which attribute keys mean what to the redactor, and renaming keys whose text held PII."""

from __future__ import annotations

from typing import Any

from rag_monitor import semconv as sc

# Controlled vocabulary, never free text and never personal: skipped cheaply.
VOCABULARY_KEYS = frozenset(
    {
        sc.OPENINFERENCE_SPAN_KIND, sc.RAG_STAGE, sc.RAG_VARIANT, sc.RAG_RELEASE, sc.RAG_FILTER_KIND,
        sc.LLM_MODEL_NAME, sc.LLM_PROVIDER, sc.EMBEDDING_MODEL_NAME, sc.RERANKER_MODEL_NAME, sc.GEN_AI_REQUEST_MODEL,
        sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_SYSTEM, sc.GEN_AI_PROVIDER_NAME,
        sc.INPUT_MIME_TYPE, sc.OUTPUT_MIME_TYPE, sc.RAG_SHADOW_OF, sc.RAG_SHADOW_CANDIDATE, sc.RAG_CONTENT_HIDDEN,
    }
)
# Identifiers (a string or an array of them): pseudonymised whole when they contain PII.
ID_KEYS = frozenset(
    {
        sc.SESSION_ID, sc.USER_ID, sc.GEN_AI_CONVERSATION_ID, sc.RAG_TENANT, sc.RAG_CITATIONS,
        sc.RAG_CONTEXT_DOCUMENT_IDS, sc.RAG_FILTER_EXCLUDED_IDS,
        sc.RAG_INDEX_DOCUMENT_ID,  # the same pseudonym as the retrieved document's id, so versions still join
        sc.DOCUMENT_ID,  # a citation click's document (on the feedback span): joins its retrieved document
    }
)
ID_SUFFIX = "." + sc.DOCUMENT_ID
# Keys of JSON objects (document metadata, gen_ai.retrieval.documents) that hold an identifier:
# a document's id may come from its metadata, and must match its citations.
JSON_ID_KEYS = frozenset({"id", "doc_id", "document_id", "source", "file_name", "url", "session_id", "user_id"})
VECTOR_SUFFIX = "." + sc.EMBEDDING_VECTOR


def rename_keys(attrs: dict[str, Any], renamed: dict[str, str]) -> None:
    """Rename keys in place, in order; two keys that redact alike both stay (``#2``, ``#3``)."""
    items = list(attrs.items())
    attrs.clear()
    for key, value in items:
        new = renamed.get(key, key)
        if new in attrs:
            n = 2
            while f"{new}#{n}" in attrs:
                n += 1
            new = f"{new}#{n}"
        attrs[new] = value
