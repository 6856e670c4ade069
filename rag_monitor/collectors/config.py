"""Ingest settings: size limits, buffer bounds and timeouts, loadable from ``rag_monitor/defaults/collectors/ingest.yaml``.

    limits = IngestLimits.load("rag_monitor/defaults/collectors/ingest.yaml")   # missing keys keep their defaults
    limits = IngestLimits(max_body_bytes=1 << 20)          # or directly, in tests

Precedence is argument (``IngestLimits(...)`` / ``load(..., **overrides)``), then the file, then
the defaults below. A bad value raises ``ValueError`` naming the key and the value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """Bounds that keep one bad exporter from hurting the agent."""

    max_body_bytes: int = 8 * 1024 * 1024
    """Largest OTLP body accepted, after decompression (larger: 413)."""
    max_attribute_chars: int = 32 * 1024
    """Longer string attribute values are truncated to this many characters and counted."""
    max_embedding_dim: int = 8192
    """Embedding vectors longer than this are dropped and counted."""
    max_pending_traces: int = 10_000
    """Traces waiting for their root span; when full the oldest is evicted and counted."""
    max_spans_per_trace: int = 2_000
    """Spans kept per pending trace; more are dropped and counted (a runaway loop, not a query)."""
    root_timeout_s: float = 60.0
    """A trace whose root span has not arrived this long after its first span is expired."""
    completed_trace_memory: int = 50_000
    """How many completed trace ids are remembered to recognise late spans and feedback."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"ingest limit {f.name} must be a positive number, got {value!r}")

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None, **overrides: Any) -> IngestLimits:
        """Build from a parsed YAML mapping (its ``limits:`` section or the top level)."""
        data = data or {}
        if "limits" in data or "mapping" in data:  # a whole ingest.yaml, not just its limits
            data = data.get("limits") or {}
        data = dict(data)
        data.update(overrides)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ingest limit(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> IngestLimits:
        """Read ``limits:`` from an ingest YAML file."""
        import yaml  # the agent extra; the SDK never loads this

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
        return cls.from_mapping(data, **overrides)
