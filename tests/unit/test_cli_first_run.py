"""The command line as a new user runs it: from an empty directory, default settings, in a
subprocess. Every mistake is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_cli(cwd: Path, *args: str, prelude: str = "", extra_path: Path | None = None, timeout: float = 120):
    """``rag-monitor ARGS`` in ``cwd`` with no RAG_MONITOR_* from the caller's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_MONITOR_")}
    env["PYTHONPATH"] = os.pathsep.join([*([str(extra_path)] if extra_path else []), str(ROOT)])
    code = f"import sys\n{prelude}\nfrom rag_monitor.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(result, *expected: str) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rag-monitor: error: "), lines
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_drift_reference_with_the_default_settings(tmp_path):
    # The drift runbook's command: the default detector_profiles is the shipped file, not a path 'default'.
    show = run_cli(tmp_path, "drift", "reference", "show")
    assert_one_line_error(show, f"no store at {tmp_path / 'data' / 'rag-monitor.db'}", "--config", "--data-dir")
    assert not (tmp_path / "data").exists()
    migrate = run_cli(tmp_path, "store", "migrate")  # only the agent or `store migrate` creates a store
    assert migrate.returncode == 0, migrate.stderr
    assert "alembic" not in migrate.stderr  # migration steps are DEBUG chatter
    reset = run_cli(tmp_path, "drift", "reference", "reset")
    assert reset.returncode == 0, reset.stderr
    assert "query_embedding: new reference version" in reset.stdout
    show = run_cli(tmp_path, "drift", "reference", "show")
    assert show.returncode == 0, show.stderr
    signals = sorted(line.split(":")[0] for line in show.stdout.splitlines())
    assert signals == ["document_embedding", "intent", "query_embedding"], show.stdout


@pytest.mark.parametrize("command", [
    ["shadow", "report"], ["drift", "report"], ["review", "report", "--baseline", "r1", "--candidate", "r2"],
    ["export", "golden"], ["probes", "show"],
])
def test_a_report_without_a_store_names_the_store_it_looked_for(tmp_path, command):
    result = run_cli(tmp_path, *command)
    assert_one_line_error(result, f"no store at {tmp_path / 'data' / 'rag-monitor.db'}", "the default", "--config")
    assert list(tmp_path.iterdir()) == []  # no empty store left behind


def test_a_report_with_the_config_reads_that_store(tmp_path):
    from rag_monitor.store import open_store

    store_dir = tmp_path / "elsewhere"
    store_dir.mkdir()
    open_store(f"sqlite:///{store_dir / 'rag-monitor.db'}").close()  # as the agent leaves it
    (tmp_path / "agent.yaml").write_text(f"data_dir: {store_dir}\n")
    result = run_cli(tmp_path, "shadow", "report", "--config", "agent.yaml")
    assert result.returncode == 0, result.stderr
    assert "no sampled shadow pairs yet" in result.stdout
    assert not (tmp_path / "data").exists()


def test_malformed_yaml(tmp_path):
    (tmp_path / "agent.yaml").write_text('otlp_port: [4318\nhttp_port: "8080\n')
    line = assert_one_line_error(run_cli(tmp_path, "config", "--config", "agent.yaml"), "agent.yaml", "not valid YAML", "line 2")
    assert "ScannerError" not in line and "ParserError" not in line


def test_a_directory_as_config(tmp_path):
    (tmp_path / "conf").mkdir()
    assert_one_line_error(run_cli(tmp_path, "shadow", "report", "--config", "conf"), "conf", "is a directory")


def test_a_missing_price_table_stops_the_agent_in_one_line(tmp_path):
    from tests.services import free_port

    (tmp_path / "agent.yaml").write_text("price_table: prices/missing.yaml\nhhem_model_path: ''\noffline_scorer: lexical\n")
    result = run_cli(tmp_path, "agent", "--config", "agent.yaml", "--port", str(free_port()), "--http-port", str(free_port()))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert errors == [errors[0]] and errors[0].startswith("rag-monitor: error: setting price_table"), result.stderr
    assert "prices/missing.yaml" in errors[0] and "not found" in errors[0]
    assert len(result.stderr.splitlines()) <= 3, result.stderr  # the error, not pages of startup noise


def test_models_pull_without_its_extra(tmp_path):
    # huggingface_hub comes with the hhem extra: a stand-in that fails to import, as when it is absent.
    shim = tmp_path / "shim" / "huggingface_hub"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named huggingface_hub')\n")
    (tmp_path / "cwd").mkdir()
    result = run_cli(tmp_path / "cwd", "models", "pull", "hhem", "models/hhem", extra_path=tmp_path / "shim")
    assert_one_line_error(result, "needs the hhem extra", "pip install 'rag-monitor[hhem]'")


def test_an_unknown_log_level_is_one_line(tmp_path):
    (tmp_path / "agent.yaml").write_text("log_level: chatty\n")
    assert_one_line_error(run_cli(tmp_path, "config", "--config", "agent.yaml"), "log_level", "'chatty'", "INFO")


def test_demo_help_and_readme_agree_on_how_long_quick_takes(tmp_path):
    from rag_monitor.demo.run import QUICK_DURATION

    result = run_cli(tmp_path, "demo", "--help")
    assert result.returncode == 0 and QUICK_DURATION in " ".join(result.stdout.split()), result.stdout
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`DEMO_ARGS=--quick` takes {QUICK_DURATION}" in readme


def test_drift_report_without_the_report_extra_says_so_once(tmp_path):
    assert run_cli(tmp_path, "store", "migrate").returncode == 0
    assert run_cli(tmp_path, "drift", "reference", "reset").returncode == 0  # a store with the default profiles
    result = run_cli(tmp_path, "drift", "report", "--out", "report", prelude="sys.modules.update(evidently=None)")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "WARNING" in line and "pip install 'rag-monitor[report]'" in line, line
    assert (tmp_path / "report" / "index.html").is_file()  # the agent's own verdicts still render


def test_quiet_agent_logs_nothing_at_info(tmp_path):
    import signal
    import urllib.request

    from tests.services import free_port, wait_until

    ports = [free_port(), free_port()]
    (tmp_path / "agent.yaml").write_text("hhem_model_path: ''\noffline_scorer: lexical\ndetector_profiles: ''\n"
                                         "review_tokens: 'ann:admin:" + "0" * 64 + "'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_MONITOR_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "rag_monitor.cli", "agent", "--quiet", "--config", "agent.yaml",
                             "--port", str(ports[0]), "--http-port", str(ports[1])],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read())
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/readyz", timeout=1) as r:
                return r.status == 200

        wait_until(ready, timeout=120, what="the quiet agent")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert " INFO " not in stderr, stderr  # no start, config or stop lines; warnings would still show


def test_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(tmp_path, "agent", "--port", "0", "--http-port", str(port))
    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{port} (http_host/http_port)")
    assert not (tmp_path / "data").exists()  # stopped before opening a store
