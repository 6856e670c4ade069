"""`rag-monitor store status | migrate | downgrade`, and one line (not a traceback) when versions do not meet."""

from __future__ import annotations

import sqlalchemy as sa

from rag_monitor.cli import main as cli
from rag_monitor.store.versions import package_head
from tests.store.test_upgrades import build_at, stamped


def test_reports_refuse_a_store_behind_and_store_migrate_upgrades_it(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'rag-monitor.db'}"
    build_at(url, "0006_signals")
    data_dir = ["--data-dir", str(tmp_path)]
    for report in (["review", "assign", "--to", "alice"], ["shadow", "report"], ["probes", "show"]):
        assert cli([*report, *data_dir]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "older than this rag-monitor" in err and "rag-monitor store migrate" in err
    assert stamped(url) == ["0006_signals"]  # no command migrated it
    assert cli(["store", "status", *data_dir]) == 1
    assert cli(["store", "migrate", *data_dir]) == 0
    assert f"at schema revision {package_head()} (was 0006_signals)" in capsys.readouterr().out
    assert cli(["store", "status", *data_dir]) == 0
    assert cli(["review", "assign", "--to", "alice", *data_dir]) == 0
    assert cli(["store", "downgrade", "--to", "0007_signals", *data_dir]) == 0
    assert cli(["store", "downgrade", *data_dir]) == 0
    assert "to 0006_signals" in capsys.readouterr().out and stamped(url) == ["0006_signals"]


def test_the_agent_stops_with_one_line_on_a_store_newer_than_itself(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'rag-monitor.db'}"
    build_at(url, "head")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099_future'"))
    engine.dispose()
    assert cli(["agent", "--data-dir", str(tmp_path), "--port", "0", "--http-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "0099_future, newer than this rag-monitor" in err and "Traceback" not in err
    assert cli(["store", "migrate", "--data-dir", str(tmp_path)]) == 2
    assert cli(["store", "downgrade", "--data-dir", str(tmp_path)]) == 2
    assert stamped(url) == ["0099_future"]
