"""A store one version ahead: this package runs against it when the revisions in between are
additive, and refuses in one line otherwise (``store/versions.py``)."""

from __future__ import annotations

import pytest

from rag_monitor.store import SchemaMismatch, Store, open_store
from rag_monitor.store.versions import package_head, readable_from
from tests.newer_replica import FUTURE, newer_schema, write_migrations
from tests.store.conftest import make_record
from tests.store.test_upgrades import stamped


def migrate_as_newer(url: str, tmp_path, *, additive: bool) -> None:
    with newer_schema(write_migrations(tmp_path / "newer", additive=additive)):
        assert readable_from(FUTURE) == (readable_from(package_head()) if additive else FUTURE)
        store = open_store(url)  # the newer replica's start
        try:
            store.recent.put([make_record(1)], now=1.0)
        finally:
            store.close()
    assert stamped(url) == [FUTURE]


def test_every_revision_says_whether_it_is_additive():
    """A revision that does not say is taken as not additive; the shipped ones say."""
    from alembic.script import ScriptDirectory

    from rag_monitor.store.versions import MIGRATIONS_DIR

    for rev in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions():
        if rev.revision >= "0008":
            assert isinstance(getattr(rev.module, "additive", None), bool), rev.revision
    assert readable_from("0009_score_sample") == "0007_signals"  # 0008 and 0009 only add
    assert readable_from("0010_regenerations") == "0010_regenerations"  # a NOT NULL column without default
    assert readable_from("0013_schema_compat") == "0012_scale_queues"  # a new table after a new layout


def test_an_older_package_runs_against_a_store_ahead_by_additive_revisions(store_url, tmp_path, caplog):
    open_store(store_url).close()
    migrate_as_newer(store_url, tmp_path, additive=True)
    for migrate in (True, False):  # the agent's start, and a report command
        store = open_store(store_url, migrate=migrate)
        try:
            assert store.recent.get(make_record(1).trace_id) == make_record(1)  # the newer one's row
            store.recent.put([make_record(2)], now=1.0)  # and this one still writes
        finally:
            store.close()
    assert stamped(store_url) == [FUTURE]  # left as it is
    state = Store(store_url).schema_state()
    assert state.readable and state.usable and not state.at_head
    message = state.message()
    assert "\n" not in message and FUTURE in message and "additive" in message and "upgrade this replica" in message
    assert message in caplog.text  # the agent's start says so in its log


def test_an_older_package_refuses_a_store_ahead_by_a_revision_that_is_not_additive(store_url, tmp_path):
    open_store(store_url).close()
    migrate_as_newer(store_url, tmp_path, additive=False)
    for migrate in (True, False):
        with pytest.raises(SchemaMismatch) as refused:
            open_store(store_url, migrate=migrate)
        message = str(refused.value)
        assert "\n" not in message and "not readable by it" in message and FUTURE in message
        assert f"store downgrade --to {package_head()}" in message
    assert stamped(store_url) == [FUTURE]


def test_the_newer_version_steps_back_and_the_store_is_this_ones_again(store_url, tmp_path):
    open_store(store_url).close()
    migrate_as_newer(store_url, tmp_path, additive=False)
    ours = package_head()
    with newer_schema(tmp_path / "newer" / "migrations"):
        store = Store(store_url)
        try:
            assert store.downgrade() == (ours,)
        finally:
            store.close()
    store = open_store(store_url, migrate=False)
    try:
        assert store.schema_state().at_head and store.recent.get(make_record(1).trace_id) == make_record(1)
    finally:
        store.close()


def test_store_commands_on_a_store_ahead_by_additive_revisions(tmp_path, capsys):
    from rag_monitor.cli import main

    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    migrate_as_newer(url, tmp_path, additive=True)
    for command in ("status", "migrate"):
        assert main(["store", command, "--store-url", url]) == 0
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and "only by additive revisions" in out
    assert stamped(url) == [FUTURE]
