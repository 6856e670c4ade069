"""Every attribute name in semconv is unique and none collides with another when flattened."""

from __future__ import annotations

import subprocess
import sys

from rag_monitor import semconv

# Values, not attribute names: span kinds, stage names, filter kinds, variants, feedback kinds...
VALUE_PREFIXES = ("SPAN_KIND_", "STAGE_", "FILTER_", "VARIANT_", "FEEDBACK_", "GEN_AI_OPERATION_", "CACHE_")
SPAN_NAMES = ("RAG_QUERY_SPAN_NAME", "RAG_FEEDBACK_SPAN_NAME", "RAG_INDEX_SPAN_NAME")
# Not span attributes: a document metadata key, and the prefix ``cache_attribute`` builds on.
NOT_ATTRIBUTES = ("DOCUMENT_COMMITTED_AT_KEY", "RAG_CACHE_PREFIX")
# Flattened lists: ``{prefix}.{i}.{item attribute}``.
LIST_PREFIXES = {"RETRIEVAL_DOCUMENTS", "RERANKER_INPUT_DOCUMENTS", "RERANKER_OUTPUT_DOCUMENTS", "EMBEDDING_EMBEDDINGS",
                 "LLM_INPUT_MESSAGES", "LLM_OUTPUT_MESSAGES", "RAG_FILTER_EXCLUDED_DOCUMENTS"}
ITEM_ATTRIBUTES = {"DOCUMENT_ID", "DOCUMENT_CONTENT", "DOCUMENT_SCORE", "DOCUMENT_METADATA", "EMBEDDING_VECTOR",
                   "EMBEDDING_TEXT", "MESSAGE_ROLE", "MESSAGE_CONTENT"}


def names() -> dict[str, str]:
    return {
        k: v for k, v in vars(semconv).items()
        if k.isupper() and isinstance(v, str) and not k.startswith(VALUE_PREFIXES) and k not in SPAN_NAMES
        and k not in ("FILTER_ENTITLEMENT", "FILTER_RELEVANCE") and k not in NOT_ATTRIBUTES
    }


def flattened() -> list[str]:
    """Every key a span can carry: leaves, and list items at index 0."""
    all_names = names()
    keys = [v for k, v in all_names.items() if k not in LIST_PREFIXES | ITEM_ATTRIBUTES]
    for prefix in LIST_PREFIXES:
        keys += [f"{all_names[prefix]}.0.{all_names[item]}" for item in ITEM_ATTRIBUTES]
    return keys


def test_attribute_names_are_unique():
    values = list(names().values())
    duplicates = {v for v in values if values.count(v) > 1}
    assert not duplicates


def test_no_flattened_name_is_a_prefix_of_another():
    keys = sorted(set(flattened()))
    clashes = [(a, b) for a in keys for b in keys if a != b and b.startswith(a + ".")]
    assert not clashes, clashes


def test_semconv_depends_on_nothing_outside_the_standard_library():
    code = "import sys; before = set(sys.modules); import rag_monitor.semconv; print(' '.join(set(sys.modules) - before))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    foreign = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "rag_monitor"]
    assert "rag_monitor.semconv" in loaded and not foreign
