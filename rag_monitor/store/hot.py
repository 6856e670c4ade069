"""The recent-records cache's encoding: document contents by reference, the rest compressed.

Most of a redacted record's bytes are document text that repeats across queries (popular
chunks). ``encode_record`` replaces every document content of at least ``MIN_SHARED`` bytes by
its hash and returns the contents apart, to be stored once per time slot; what remains is JSON
compressed with zlib (``benchmarks/hot_state.py`` measures the options)::

    blob, contents = encode_record(record)          # contents: {hash: text}
    record == decode_record(blob, contents)
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import orjson

from rag_monitor.record import QueryRecord

from .models import record_json

MIN_SHARED = 64
"""Shorter contents stay inline: a reference (and its row) would cost more than the text."""
_REF = "content_ref"
_ZLIB, _PLAIN = b"z", b"j"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def encode_record(record: QueryRecord | dict[str, Any], *, compress: bool = True) -> tuple[bytes, dict[str, str]]:
    """``(blob, {hash: content})`` of a record (see the module docstring)."""
    payload = orjson.loads(record_json(record)[1])
    contents: dict[str, str] = {}
    _walk(payload, contents)
    text = orjson.dumps(payload)
    return (_ZLIB + zlib.compress(text, 6)) if compress else (_PLAIN + text), contents


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
    return zlib.decompress(blob[1:]) if blob[:1] == _ZLIB else blob[1:]


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
