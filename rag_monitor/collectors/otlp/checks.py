"""Per-span checks both decoders share: ids, string length, embedding vectors."""

from __future__ import annotations

import math
from typing import Any

from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.otlp.spans import DecodeResult

_VECTOR_PREFIX = "embedding.embeddings."
_VECTOR_SUFFIX = ".embedding.vector"


_ZERO_IDS = {8: bytes(8), 16: bytes(16)}


def valid_id(raw: bytes, size: int) -> bool:
    return len(raw) == size and raw != (_ZERO_IDS.get(size) or bytes(size))


class SpanChecks:
    """Base of the protobuf and JSON decoders: the limits, and what they count."""

    def __init__(self, limits: IngestLimits):
        self.max_chars = limits.max_attribute_chars
        self.max_dim = limits.max_embedding_dim
        self.result = DecodeResult()

    def _reject(self, reason: str) -> None:
        self.result.reject(reason)

    def vector_ok(self, key: str, values: list) -> bool:
        """False for an embedding vector with NaN/inf or too many dimensions (other keys: True)."""
        if not (key.startswith(_VECTOR_PREFIX) and key.endswith(_VECTOR_SUFFIX)):
            return True
        try:
            # A finite sum means every element is finite (NaN and inf propagate); only a sum
            # that overflowed needs the element-wise test.
            return len(values) <= self.max_dim and (math.isfinite(sum(values)) or all(map(math.isfinite, values)))
        except (TypeError, OverflowError):  # a non-numeric element, an int past float range: not a vector
            return False

    def _check_vector(self, attrs: dict[str, Any], key: str, values: list) -> None:
        """Drop an embedding vector that is not ``vector_ok`` (counted)."""
        if not self.vector_ok(key, values):
            del attrs[key]
            self.result.rejected_embeddings += 1

    def _truncate(self, value: str) -> str:
        self.result.truncated_attributes += 1
        return value[: self.max_chars]
