"""Fixtures for SDK tests: a monitor exporting synchronously to an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rag_monitor
from rag_monitor.sdk import Monitor


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def monitor(exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> Iterator[Monitor]:
    for name in ("RAG_MONITOR_DISABLED", "RAG_MONITOR_MAX_STRING_LENGTH", "RAG_MONITOR_HIDE_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    m = rag_monitor.init(service_name="support-bot", release="2026.11.30", span_exporter=exporter, batch=False)
    yield m
    m.shutdown()


def spans_by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    by_name = {s.name: s for s in spans}
    assert len(by_name) == len(spans), f"duplicate span names: {[s.name for s in spans]}"
    return by_name
