"""Every schema revision that ever landed on main upgrades to the head with no row lost or changed.

A store is built at each revision with that revision's schema (the packaged migrations up to it:
their files are the ones those commits shipped, ``0006_signals`` included), every table is filled,
the store is upgraded by the agent's path (``open_store``) and every row read back. Commands other
than ``store migrate`` refuse a store that is behind with one line instead of migrating it.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from rag_monitor.store import SchemaMismatch, Store, open_store
from rag_monitor.store.partitions import partitions_of
from rag_monitor.store.versions import MIGRATIONS_DIR, package_head
from tests.store.conftest import make_record

# The head revision of each run of main's own commits (git log --first-parent main):
# 0006_signals is the head of the 11 commits from 08a8efd (2026-11-30 22:10) to 57bf3d3 (23:00),
# before the rename to 0007_signals; 0006_probes came in with that rename (a branch's head only).
LANDED = ("0001", "0002_semantics", "0003_review", "0004_faithfulness", "0005_runtime",
          "0006_signals", "0006_probes", "0007_signals", "0010_regenerations")
ROWS = 3
# Values that the tables' CHECK constraints accept.
_CHECKED = {"state": "queued", "inclusion_prob": 0.5, "window_name": "reference", "status": "ok"}


def build_at(url: str, revision: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def _value(table: sa.Table, column: sa.Column, i: int):
    if column.name in _CHECKED:
        return _CHECKED[column.name]
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return i % 2 == 0
    if isinstance(kind, sa.Integer):
        return i  # ids, and the foreign keys to them: row i of the parent
    if isinstance(kind, (sa.Float, sa.Numeric)):
        return i + 0.25
    if isinstance(kind, sa.LargeBinary):
        return f"j{table.name}-{i}".encode()  # "j": a plain (uncompressed) recent-records blob
    text = f"{i}-{table.name}.{column.name}"  # unique per row for unique constraints
    return text[: kind.length] if getattr(kind, "length", None) else text


def fill_every_table(url: str) -> dict[str, list[dict]]:
    """ROWS rows in every table of the store as it is; returns them by table."""
    engine = sa.create_engine(url)
    written: dict[str, list[dict]] = {}
    try:
        with engine.begin() as conn:
            meta = sa.MetaData()
            meta.reflect(conn)
            # A hot table's time partitions (PostgreSQL) are written through their parent.
            partitions = partitions_of(conn) if conn.dialect.name == "postgresql" else set()
            for table in meta.sorted_tables:  # parents before the tables that refer to them
                if table.name == "alembic_version" or table.name in partitions:
                    continue
                rows = [{c.name: _value(table, c, i) for c in table.columns} for i in range(1, ROWS + 1)]
                conn.execute(table.insert(), rows)
                written[table.name] = rows
    finally:
        engine.dispose()
    return written


def read_back(url: str, written: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The same columns of the same tables, now."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            meta = sa.MetaData()
            meta.reflect(conn)
            out = {}
            for name, rows in written.items():
                table = meta.tables[name]
                columns = [table.c[c] for c in rows[0]]
                order = list(table.primary_key.columns) or columns
                out[name] = [dict(r._mapping) for r in conn.execute(sa.select(*columns).order_by(*order))]
            return out
    finally:
        engine.dispose()


def cache_as_json(tables: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The recent-records cache's records as JSON text: 0011 keeps each record, encoded as a blob
    (``store/hot.py``: "j" + the JSON, or compressed), and its downgrade decodes them back."""
    out = dict(tables)
    if "recent_records" in tables:
        out["recent_records"] = [{**row, "record": row["record"][1:].decode()} if isinstance(row.get("record"), bytes)
                                 else row for row in tables["recent_records"]]
    return out


def copy_rows(source_url: str, target_url: str, tables: tuple[str, ...]) -> None:
    """Copy ``tables`` from one store to another, only the columns the target's schema has."""
    source, target = sa.create_engine(source_url), sa.create_engine(target_url)
    try:
        with source.connect() as src, target.begin() as dst:
            have, want = sa.MetaData(), sa.MetaData()
            have.reflect(src)
            want.reflect(dst)
            for name in tables:
                columns = [c.name for c in want.tables[name].columns if c.name in have.tables[name].c]
                rows = [dict(r._mapping) for r in src.execute(sa.select(*(have.tables[name].c[c] for c in columns)))]
                if rows:
                    dst.execute(want.tables[name].insert(), rows)
    finally:
        source.dispose()
        target.dispose()


def _schema_at(revision: str) -> dict[str, set[str]]:
    """Table name -> column names of a scratch SQLite store built at ``revision``."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'schema.db'}"
        build_at(url, revision)
        engine = sa.create_engine(url)
        try:
            meta = sa.MetaData()
            with engine.connect() as conn:
                meta.reflect(conn)
            return {t.name: {c.name for c in t.columns} for t in meta.sorted_tables}
        finally:
            engine.dispose()


def stamped(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
    finally:
        engine.dispose()


def test_every_landed_revision_is_in_the_package():
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(MIGRATIONS_DIR))
    assert {r.revision for r in script.walk_revisions()} >= set(LANDED)
    assert script.get_revision("0006_signals").down_revision == "0005_runtime"


@pytest.mark.parametrize("revision", LANDED)
def test_a_store_at_each_landed_revision_upgrades_with_every_row_kept(store_url, revision):
    build_at(store_url, revision)
    written = fill_every_table(store_url)
    assert stamped(store_url) == [revision]
    store = open_store(store_url)  # the agent's start
    store.close()
    assert stamped(store_url) == [package_head()]
    assert cache_as_json(read_back(store_url, written)) == cache_as_json(written)


@pytest.mark.parametrize("revision", ["0006_signals", "0006_probes"])
def test_review_work_in_progress_survives_the_upgrade(store_url, revision, tmp_path):
    """A claimed item stays claimed, a reviewed one is reviewed and exported."""
    from rag_monitor.review.golden import golden_rows

    # The work is done by today's code in a scratch store at head, then its rows are copied into
    # the store at ``revision``, keeping the columns that revision has (what an older agent wrote).
    scratch_url = f"sqlite:///{tmp_path / 'scratch.db'}"
    scratch = open_store(scratch_url)
    try:
        for i in (1, 2):
            assert scratch.queue.enqueue(make_record(i), stratum="base", inclusion_prob=0.5)
        reviewed = scratch.review.claim("bob", 600)
        scratch.review.submit_review(reviewed.id, "bob", {"faithful": "yes", "correct": "no", "corrected_answer": "Fixed."})
        claimed = scratch.review.claim("alice", 3600)
    finally:
        scratch.close()
    build_at(store_url, revision)
    copy_rows(scratch_url, store_url, ("review_items", "reviews"))
    with pytest.raises(SchemaMismatch):  # commands do not migrate
        open_store(store_url, migrate=False)
    store = open_store(store_url)
    try:
        assert store.review.current_claim("alice").id == claimed.id
        rows = golden_rows(store)
        assert [r["trace_id"] for r in rows] == [reviewed.trace_id]
        assert rows[0]["expected_answer"] == "Fixed."
    finally:
        store.close()


def test_a_store_behind_is_refused_by_commands_in_one_line_and_left_as_it_is(store_url):
    build_at(store_url, "0006_signals")
    with pytest.raises(SchemaMismatch) as refused:
        open_store(store_url, migrate=False)
    message = str(refused.value)
    assert "\n" not in message and "older than this rag-monitor" in message
    assert "rag-monitor store migrate" in message and "0006_signals" in message
    assert stamped(store_url) == ["0006_signals"]


def test_a_store_newer_than_the_package_is_refused_in_one_line(store_url):
    build_at(store_url, "head")
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099_future'"))
    finally:
        engine.dispose()
    for migrate in (True, False):
        with pytest.raises(SchemaMismatch) as refused:
            open_store(store_url, migrate=migrate)
        message = str(refused.value)
        assert "\n" not in message and "0099_future" in message and "newer than this rag-monitor" in message
        assert f"store downgrade --to {package_head()}" in message


def test_downgrade_steps_back_one_revision_and_upgrade_returns(store_url):
    build_at(store_url, "head")
    written = fill_every_table(store_url)
    store = Store(store_url)
    try:
        assert store.downgrade("0007_signals") == ("0007_signals",)  # where later revisions go first
        # The merge steps back to its main-line parent: the schema the previous main commits had.
        assert store.downgrade() == ("0006_signals",)
        assert store.downgrade() == ("0005_runtime",)
        assert store.migrate() == package_head()
        # What 0005_runtime's schema holds comes back: tables and columns added later are new.
        at_0005 = _schema_at("0005_runtime")
        kept = {name: [{c: v for c, v in row.items() if c in at_0005[name]} for row in rows]
                for name, rows in written.items() if name in at_0005}
        assert cache_as_json(read_back(store_url, kept)) == cache_as_json(kept)
        assert store.downgrade("0006_probes") == ("0006_probes",)
    finally:
        store.close()


def test_the_recent_records_cache_survives_0011_both_ways(store_url):
    """0011 encodes the cache (documents by reference, the rest compressed); its downgrade gives
    0010's JSON rows back, and upgrading again reads the same records."""
    import json

    from rag_monitor.record import Document
    from rag_monitor.store.models import record_json

    text = "To cancel, open Settings, then Billing, then Cancel plan. " * 4
    records = [make_record(i, retrieved=[Document("doc-1", text, 0.5)], delivered=[Document("doc-1", text, 0.5)])
               for i in (1, 2)]
    build_at(store_url, "head")
    store = Store(store_url)
    try:
        assert store.recent.put(records, now=5.0) == 2
        assert store.downgrade("0010_regenerations") == ("0010_regenerations",)
        engine = sa.create_engine(store_url)
        try:
            with engine.connect() as conn:
                rows = dict(conn.execute(sa.text("SELECT trace_id, record FROM recent_records")).all())
        finally:
            engine.dispose()
        assert {t: json.loads(r) for t, r in rows.items()} == {r.trace_id: json.loads(record_json(r)[1]) for r in records}
        assert store.migrate() == package_head()
        assert [store.recent.get(r.trace_id) for r in records] == records
    finally:
        store.close()
