"""A rolling upgrade on one store: a replica of this version and one a version ahead
(``tests/newer_replica.py``: one more additive schema revision, unknown keys in every JSON object
it writes) take traffic side by side: SDK queries, thumbs-down and regenerate clicks routed to the
other replica, scoring, review claims. Neither logs or counts a reader error, and each reads the
other's rows, for ``RAG_MONITOR_ROLLOUT_S`` seconds (default 60). PostgreSQL only: replicas share
a store there; SQLite mode runs one replica, replaced on upgrade (docs/deploy.md).

The older replica is today's code, not the last landed commit (``ac98599``): that one's record
reader refuses nested keys it does not know, and the schema since it is not additive
(``0010_regenerations``), so it can only be stopped before the upgrade (docs/deploy.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

import rag_monitor
from rag_monitor.store import open_store
from rag_monitor.store.schema import recent_records
from tests.newer_replica import FUTURE
from tests.services import wait_until

pytestmark = pytest.mark.integration

ROLLOUT_S = float(os.environ.get("RAG_MONITOR_ROLLOUT_S", "60"))
ROOT = Path(__file__).resolve().parents[2]
ERROR_COUNTERS = ("rag_agent_ingest_errors_total", "rag_agent_job_failures_total", "rag_agent_store_errors_total")
DOCS = [{"id": "doc-1", "content": "Cancel under Settings > Billing.", "score": 0.8, "metadata": {"locale": "en"}},
        {"id": "doc-2", "content": "Refunds take five days.", "score": 0.4}]


def send_query(monitor, i: int, session: str) -> str:
    with monitor.query(f"how do I cancel plan {i % 5}", session_id=session, intent="billing") as q:
        q.filter(kind="relevance", predicate="score > 0.3", candidates_in=3, candidates_out=2, excluded_ids=["doc-9"])
        with q.retrieve() as r:
            r.documents(DOCS)
        with q.generate(model="gpt-4o-mini") as g:
            g.tokens(prompt=120, completion=20)
        q.answer("Cancel under Settings > Billing.", citations=["doc-1"])
    return q.trace_id


def log_problems(path: str) -> list[str]:
    """ERROR lines and tracebacks of a JSON-logging agent."""
    problems = []
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            problems += [line] if "Traceback" in line or "Error" in line else []
            continue
        if entry.get("level") == "ERROR" or "exception" in entry:
            problems.append(line)
    return problems


def stored(engine: sa.Engine, trace_id: str) -> bool:
    """The query's row is in the store (read without the record reader, whose errors must surface)."""
    with engine.connect() as conn:
        return conn.execute(sa.select(recent_records.c.trace_id).where(recent_records.c.trace_id == trace_id)).first() is not None


def newer_cli(newer_dir: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "tests.newer_replica", *args], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, RAG_MONITOR_NEWER_DIR=str(newer_dir)), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_older_and_a_newer_replica_run_side_by_side(start_agent_process, postgres_url, tmp_path, capsys):
    from rag_monitor.cli import main as cli

    url = postgres_url
    (tmp_path / "sampling.yaml").write_text("base_rate: 0.5\n")
    common = dict(store_url=url, sampling_config=tmp_path / "sampling.yaml", score_interval_s=0.5,
                  regeneration_check_interval_s=0.2, log_format="json",
                  detector_profiles="")  # no drift jobs: no embedding model to load on a busy machine
    newer_dir = tmp_path / "newer"

    # The rollout: the old replica runs (and made the store), the new one starts and migrates, the
    # old one restarts (as pods do during a rollout) against the newer store and keeps running.
    start_agent_process(**common).stop()
    newer = start_agent_process(module="tests.newer_replica", env={"RAG_MONITOR_NEWER_DIR": str(newer_dir)}, **common)
    older = start_agent_process(**common)
    replicas = {"older": older, "newer": newer}
    assert "only by additive revisions" in Path(older.log.name).read_text()
    store = open_store(url, migrate=False)  # the test reads as the older version does
    rows = sa.create_engine(url)
    assert store.schema_state().current == (FUTURE,)

    monitors = [rag_monitor.init(service_name="svc", endpoint=r.otlp_url, release="r1") for r in (older, newer)]
    sent, feedback_to, reviewed_by_older = [], {"older": 0, "newer": 0}, 0
    try:
        deadline, i = time.monotonic() + ROLLOUT_S, 0
        while time.monotonic() < deadline:
            side = i % 2
            sent.append((side, send_query(monitors[side], i, f"s{i // 2}")))  # the next query re-asks on the other
            assert monitors[side].force_flush(30)
            if i >= 4:  # feedback on a query the other replica assembled (and stored: waited for)
                origin, trace = sent[i - 4]
                wait_until(lambda t=trace: stored(rows, t), timeout=20, what="the query stored")
                assert store.recent.get(trace).query  # and this version reads it, whichever replica wrote it
                kind = ("thumbs_down", "regenerate", "copy")[i % 3]
                monitors[1 - origin].feedback(trace, kind, reason="wrong" if kind == "thumbs_down" else None)
                assert monitors[1 - origin].force_flush(30)
                feedback_to["newer" if origin == 0 else "older"] += 1
            if i % 5 == 0 and (item := store.review.claim("older-reviewer", 600)) is not None:
                labels = {"faithful": "yes", "correct": "no", "corrected_answer": "Fixed.",
                          "relevant_documents": [d.id for d in item.query_record.delivered]}
                store.review.submit_review(item.id, "older-reviewer", labels)
                reviewed_by_older += 1
            i += 1
            time.sleep(0.1)
    finally:
        rows.dispose()
        for monitor in monitors:
            monitor.shutdown()

    # Every query assembled and stored by one replica or the other, every sampled answer scored
    # (the scorer reads the items whichever replica wrote them), every feedback counted under the
    # query's release: the replica receiving it read the other one's record.
    wait_until(lambda: sum(r.metric_sum("rag_queries_total") for r in replicas.values()) == len(sent), timeout=30,
               what="every query counted")
    assert all(store.recent.get(t) is not None for _, t in sent)
    wait_until(lambda: store.scores.backlog("lexical-v1") == 0, timeout=60, what="every sampled answer scored")
    wait_until(lambda: sum(r.metric_sum("rag_feedback_total") for r in replicas.values()) == sum(feedback_to.values()),
               timeout=30, what="every feedback counted")
    for name, replica in replicas.items():
        assert replica.metric_sum("rag_feedback_total", release="r1") == feedback_to[name] > 0, name
        assert replica.metric_sum("rag_feedback_total", release="unknown") == 0, name
        assert replica.metric_sum("rag_regenerations_total", source="explicit") > 0, name
        assert replica.metric_sum("rag_regenerations_total", source="explicit", intent="unknown") == 0, name
    scored = sum(r.metric_sum("rag_faithfulness_scored_total") for r in replicas.values())
    assert scored > 0

    # Reviews on both versions; each version's golden export reads every reviewed item.
    reviewed_by_newer = int(newer_cli(newer_dir, "review", url, "5"))
    assert reviewed_by_older > 0 and reviewed_by_newer > 0
    older_rows = tmp_path / "older.jsonl"
    assert cli(["export", "golden", "--store-url", url, "--out", str(older_rows)]) == 0
    capsys.readouterr()
    newer_cli(newer_dir, "export", "golden", "--store-url", url, "--out", str(tmp_path / "newer.jsonl"))
    exported = {v: [json.loads(line) for line in (tmp_path / f"{v}.jsonl").read_text().splitlines()] for v in ("older", "newer")}
    assert len(exported["older"]) == len(exported["newer"]) == reviewed_by_older + reviewed_by_newer
    reviewers = {r["reviewer"] for row in exported["older"] for r in row["reviews"]}
    assert len(reviewers) == 2  # pseudonyms of the older and the newer reviewer
    store.close()

    with capsys.disabled():
        print(f"\nrollout {ROLLOUT_S:.0f} s: {len(sent)} queries, feedback {feedback_to}, {scored:.0f} scored, "
              f"reviews older {reviewed_by_older} newer {reviewed_by_newer}")
    for name, replica in replicas.items():
        assert replica.proc.poll() is None, f"the {name} replica exited"
        assert {c: replica.metric_sum(c) for c in ERROR_COUNTERS} == dict.fromkeys(ERROR_COUNTERS, 0.0), name
        replica.stop()
        assert log_problems(replica.log.name) == [], name
