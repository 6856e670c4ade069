"""Every store test runs on both backends: a SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_monitor.record import QueryRecord
from rag_monitor.store import Store, open_store
from tests.services import PostgresServer


def traversable_tmpdir(prefix: str) -> Path:
    """A directory the ``postgres`` user can reach when the tests run as root.

    pytest's ``tmp_path`` lives under 0700 directories owned by root, so ``initdb`` run as
    ``postgres`` cannot enter it; ``/tmp`` itself is world-traversable.
    """
    return Path(tempfile.mkdtemp(prefix=prefix))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Overrides tests/services.py's fixture for this package (see ``traversable_tmpdir``)."""
    root = traversable_tmpdir("rag-monitor-store-pg-")
    server = PostgresServer(root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


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
