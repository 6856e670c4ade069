"""The recent-records cache's encoding: document contents by reference, the rest compressed.

Most of a redacted record's bytes are document text that repeats across queries (popular
chunks). ``encode_record`` replaces every document content of at least ``MIN_SHARED`` bytes by
its hash and returns the contents apart, to be stored once per time slot; what remains is JSON
compressed with zstd (``benchmarks/hot_state.py`` measures the options)::

    blob, contents = encode_record(record)          # contents: {hash: text}
    record == decode_record(blob, contents)
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from functools import lru_cache
from typing import Any

import orjson
import zstandard

from rag_monitor.record import Document, FilterApplied, QueryRecord

from .models import record_json

MIN_SHARED = 64
"""Shorter contents stay inline: a reference (and its row) would cost more than the text."""
_REF = "content_ref"
_ZSTD, _ZLIB, _PLAIN = b"s", b"z", b"j"  # a blob's first byte: how the rest is stored
ZSTD_LEVEL = 1
"""zstd level 1 writes the bytes zlib level 1 did (966 against 975 of 2.4 KB of JSON at
``benchmarks/scale.py``'s queries) at about a third of its CPU (20 against 56 us a record), and the
compression was most of the encoding's CPU on the request path. Blobs zlib wrote still read."""
_codecs = threading.local()  # zstandard's (de)compressors are not for concurrent use: one per thread


def _compressor() -> zstandard.ZstdCompressor:
    try:
        return _codecs.compressor
    except AttributeError:
        _codecs.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        return _codecs.compressor


def _decompressor() -> zstandard.ZstdDecompressor:
    try:
        return _codecs.decompressor
    except AttributeError:
        _codecs.decompressor = zstandard.ZstdDecompressor()
        return _codecs.decompressor


@lru_cache(maxsize=4096)  # popular chunks come back query after query
def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def encode_record(record: QueryRecord | dict[str, Any], *, compress: bool = True) -> tuple[bytes, dict[str, str]]:
    """``(blob, {hash: content})`` of a record (see the module docstring)."""
    contents: dict[str, str] = {}
    if isinstance(record, QueryRecord):
        try:
            text = orjson.dumps(_by_reference(record, contents))
        except (TypeError, ValueError, orjson.JSONEncodeError):
            record_json(record)  # raises its error, which names the record
            raise
    else:
        payload = orjson.loads(record_json(record)[1])
        _walk(payload, contents)
        text = orjson.dumps(payload)
    return (_ZSTD + _compressor().compress(text)) if compress else (_PLAIN + text), contents


# --- a QueryRecord by reference without a JSON round trip ------------------------------------
# The JSON is the same, byte for byte, as ``_walk`` over ``record_json``'s: orjson writes a
# dataclass as its fields in order, so only the objects that hold a shared content (documents,
# and dicts within their metadata) are rewritten as dicts; everything else is serialised as is.


def _by_reference(record: QueryRecord, contents: dict[str, str]) -> dict[str, Any]:
    payload = _fields(record)
    for name in ("retrieved", "delivered"):
        docs = payload[name]
        if docs:
            payload[name] = [_document(d, contents) for d in docs]
    if any(f.excluded_documents for f in record.filters):
        payload["filters"] = [_filter(f, contents) for f in record.filters]
    return payload


def _filter(applied: FilterApplied, contents: dict[str, str]) -> FilterApplied | dict[str, Any]:
    if not applied.excluded_documents:
        return applied
    out = _fields(applied)
    out["excluded_documents"] = [_document(d, contents) for d in applied.excluded_documents]
    return out


def _document(doc: Document, contents: dict[str, str]) -> Document | dict[str, Any]:
    content, metadata = doc.content, doc.metadata
    nested = bool(metadata) and _holds_shared(metadata)
    if not nested and not (type(content) is str and len(content) >= MIN_SHARED):
        return doc
    out = _fields(doc)
    if nested:  # a copy: the record's own metadata stays as it is
        out["metadata"] = metadata = orjson.loads(orjson.dumps(metadata))
        _walk(metadata, contents)
    if type(content) is str and len(content) >= MIN_SHARED:
        key = content_hash(content)
        contents[key] = content
        del out["content"]
        out[_REF] = key
    return out


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's attributes as orjson writes them (its ``__dict__`` less ``_``-names)."""
    attrs = obj.__dict__
    if len(attrs) == len(obj.__dataclass_fields__):  # its fields only: nothing else was set on it
        return attrs.copy()
    return {k: v for k, v in attrs.items() if k[:1] != "_"}


def _holds_shared(node: Any) -> bool:
    """True when ``_walk`` would replace a content somewhere inside ``node``."""
    if type(node) is dict:
        content = node.get("content")
        if "id" in node and type(content) is str and len(content) >= MIN_SHARED:
            return True
        children = node.values()
    elif type(node) is list or type(node) is tuple:
        children = node
    else:
        return False
    for value in children:
        kind = type(value)
        if (kind is dict or kind is list or kind is tuple) and _holds_shared(value):
            return True
    return False


def referenced(blob: bytes) -> set[str]:
    """The content hashes a blob refers to."""
    found: set[str] = set()
    _collect(orjson.loads(_text(blob)), found)
    return found


def decode_record(blob: bytes, contents: dict[str, str]) -> QueryRecord:
    """The record ``encode_record`` was given; a content missing from ``contents`` reads as ""."""
    payload = orjson.loads(_text(blob))
    _restore(payload, contents)
    return QueryRecord.from_dict(payload)


def _text(blob: bytes) -> bytes:
    blob = bytes(blob)
    kind = blob[:1]
    if kind == _ZSTD:
        return _decompressor().decompress(blob[1:])
    return zlib.decompress(blob[1:]) if kind == _ZLIB else blob[1:]


def _walk(node: Any, contents: dict[str, str]) -> None:
    # ``node``: a dict or a list from orjson. Only containers are visited: a record is mostly
    # strings and numbers (vectors included), and a call per leaf was most of the walk's cost.
    if type(node) is dict:
        content = node.get("content")
        if "id" in node and type(content) is str and len(content) >= MIN_SHARED:
            key = content_hash(content)
            contents[key] = content
            del node["content"]
            node[_REF] = key
        children = node.values()
    else:
        children = node
    for value in children:
        if type(value) is dict or type(value) is list:
            _walk(value, contents)


def _collect(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get(_REF), str):
            found.add(node[_REF])
        for value in node.values():
            _collect(value, found)
    elif isinstance(node, list):
        for value in node:
            _collect(value, found)


def _restore(node: Any, contents: dict[str, str]) -> None:
    if isinstance(node, dict):
        key = node.pop(_REF, None)
        if key is not None:
            node["content"] = contents.get(key, "")
        for value in node.values():
            _restore(value, contents)
    elif isinstance(node, list):
        for value in node:
            _restore(value, contents)
