"""Every store test runs on both backends: a SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rag_monitor.record import QueryRecord
from rag_monitor.store import Store, open_store


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    # Resolved lazily so the SQLite half runs (and PostgreSQL skips) without a server.
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url) -> Iterator[Store]:
    s = open_store(store_url, seed=1234)
    try:
        yield s
    finally:
        s.close()


def make_record(i: int, tenant: str | None = None, **fields) -> QueryRecord:
    return QueryRecord(
        trace_id=f"{i:032x}", root_span_id=f"{i:016x}", start_ns=1_000_000_000 * i,
        end_ns=1_000_000_000 * i + 250_000_000, query=f"question {i}", answer=f"answer {i}",
        tenant=tenant, **fields,
    )
