"""The store turns "cannot reach / cannot lock the database" into StoreUnavailable."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from rag_monitor.store import StoreUnavailable, open_store
from tests.services import PostgresServer, free_port, traversable_tmpdir
from tests.store.conftest import make_record


def test_locked_sqlite_file_raises_store_unavailable(tmp_path):
    path = tmp_path / "store.db"
    store = open_store(f"sqlite:///{path}", busy_timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="locked"):
            store.queue.enqueue(make_record(1), stratum="base", inclusion_prob=0.1)
        with pytest.raises(StoreUnavailable):
            store.review.claim("rev", lease_s=60)
        holder.execute("ROLLBACK")
        # The lock is gone: the same call now goes through.
        assert store.queue.enqueue(make_record(1), stratum="base", inclusion_prob=0.1)
    finally:
        holder.close()
        store.close()


def test_closed_postgres_port_raises_store_unavailable():
    url = f"postgresql+psycopg://postgres:secret@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(StoreUnavailable) as raised:
        open_store(url, connect_timeout_s=2)
    assert "secret" not in str(raised.value)


@pytest.mark.integration
def test_stopped_postgres_raises_store_unavailable():
    # A server of its own: stopping the session's shared one would break other tests.
    root = traversable_tmpdir("rag-monitor-store-pg-stop-")
    server = PostgresServer(root)
    store = None
    try:
        server.start()
        store = open_store(server.url(), connect_timeout_s=2)
        store.recent.put([make_record(1)])  # the pool now holds a live connection
        server.stop()
        with pytest.raises(StoreUnavailable):
            store.recent.put([make_record(2)])
        with pytest.raises(StoreUnavailable):
            store.queue.depth()
    finally:
        if store is not None:
            store.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
