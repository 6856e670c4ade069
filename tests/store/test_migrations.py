from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from rag_monitor.store import Store
from rag_monitor.store.partitions import partitions_of
from rag_monitor.store.schema import metadata
from rag_monitor.store.versions import MIGRATIONS_DIR


def _heads() -> list[str]:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR)).get_heads()


HEAD = _heads()[0]


def test_revisions_form_one_chain():
    # Two heads: a branch's migration merged without re-chaining it after the others.
    assert len(_heads()) == 1, _heads()


def test_migrate_from_empty_creates_every_table_at_head(store_url):
    store = Store(store_url)
    try:
        head = store.migrate()
        engine = sa.create_engine(store_url)
        try:
            with engine.connect() as conn:
                # The hot tables' time partitions (PostgreSQL) are made and dropped at run time.
                partitions = partitions_of(conn) if conn.dialect.name == "postgresql" else set()
                tables = set(sa.inspect(conn).get_table_names()) - partitions
                version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
                # The hand-written revision must build exactly what schema.py declares.
                diff = compare_metadata(MigrationContext.configure(conn, opts={
                    "compare_type": True,
                    "include_name": lambda name, kind, _: kind != "table" or name not in partitions}), metadata)
        finally:
            engine.dispose()
    finally:
        store.close()
    assert tables == set(metadata.tables) | {"alembic_version"}
    assert version == head == HEAD
    assert diff == []


def test_migrate_twice_is_a_no_op_and_keeps_data(store_url):
    from tests.store.conftest import make_record

    store = Store(store_url)
    try:
        head = store.migrate()
        assert store.queue.enqueue(make_record(1), stratum="base", inclusion_prob=0.5)
        assert store.migrate() == HEAD
        assert store.queue.depth()["queued"] == 1
    finally:
        store.close()
