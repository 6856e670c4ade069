"""Golden-set export, the release report and secret masking, through the real CLI and store."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from rag_monitor.record import Document
from rag_monitor.review.golden import EXPORT_VERSION, SPLITS, assign_splits, golden_rows
from rag_monitor.store import open_store
from tests.review.test_review_api import sample_record


def review(store, trace_id: str, reviewer: str, labels: dict, draft: dict, needed: int = 1) -> None:
    item = store.review.claim(reviewer, 60)
    assert item.trace_id == trace_id
    store.review.save_draft(item.id, reviewer, draft)
    store.review.submit_review(item.id, reviewer, {**draft, **labels}, reviews_needed=needed)


@pytest.fixture
def reviewed_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    # two releases; r2's first item is reviewed twice (disagreeing on correct)
    store.queue.enqueue(sample_record("01" * 16, release="r1", session_id="s1"), stratum="base", inclusion_prob=0.5)
    store.queue.enqueue(sample_record("02" * 16, release="r2", session_id="s2"), stratum="base", inclusion_prob=1.0)
    gold = {"relevant_documents": ["doc-archived"], "gold_documents": ["doc-archived"]}
    review(store, "01" * 16, "alice", {"correct": "no", "faithful": "yes", "corrected_answer": "Cancel online."}, gold)
    review(store, "02" * 16, "alice", {"correct": "yes", "faithful": "yes"}, gold, needed=2)
    review(store, "02" * 16, "bob", {"correct": "no", "faithful": "yes"}, gold, needed=2)
    yield url, store
    store.close()


def test_a_golden_row_carries_expected_answer_gold_documents_version_agreement_and_links(reviewed_store):
    url, store = reviewed_store
    rows = {r["trace_id"]: r for r in golden_rows(store, phoenix_url="http://phoenix:6006")}
    first, second = rows["01" * 16], rows["02" * 16]
    assert first["expected_answer"] == "Cancel online." and first["gold_doc_ids"] == ["doc-archived"]
    assert first["export_version"] == EXPORT_VERSION and first["agreement"] == "single"
    assert first["links"]["phoenix"] == f"http://phoenix:6006/v1/projects/rag-monitor/spans?trace_id={'01' * 16}"
    assert second["expected_answer"] == second["answer"]  # judged correct by the first reviewer, no correction
    assert second["agreement"] == "disagreed" and [r["reviewer"] for r in second["reviews"]] == ["alice", "bob"]
    assert first["weight"] == 2.0 and first["split"] in SPLITS
    # both rows delivered doc-archived: they share a source document, hence a split
    assert first["split"] == second["split"] and first["split_group"] == second["split_group"]


def test_rows_of_one_session_or_sharing_documents_stay_in_one_split():
    def row(trace, session, docs, gold=()):
        return {"trace_id": trace, "session_id": session, "contexts": [{"id": d} for d in docs], "gold_doc_ids": list(gold)}

    # a - b share a document, b - c a session; d .. stand alone
    rows = [row("a", "s1", ["d1"]), row("b", "s2", ["d1"]), row("c", "s2", ["d9"], gold=["g"]),
            *[row(f"x{i}", f"t{i}", [f"e{i}"]) for i in range(300)]]
    assign_splits(rows, (0.6, 0.2, 0.2))
    assert rows[0]["split"] == rows[1]["split"] == rows[2]["split"]
    counts = {s: sum(r["split"] == s for r in rows[3:]) for s in SPLITS}
    assert 150 < counts["development"] < 210 and 35 < counts["judge_calibration"] < 85 and 35 < counts["release"] < 85
    with pytest.raises(ValueError, match="shares"):
        assign_splits(rows, (0.5, 0.5, 0.5))


def test_cli_exports_golden_rows_and_compares_two_releases(reviewed_store, tmp_path):
    url, _ = reviewed_store
    out = tmp_path / "golden.jsonl"
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "export", "golden", "--store-url", url, "--out", str(out)],
                          capture_output=True, text=True, check=True)
    assert "wrote 2 reviewed items" in done.stdout
    # Both rows share a document, hence one split: the two empty ones are said, in one line.
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert re.fullmatch(r"warning: the \w+ and \w+ splits are empty: 2 items fall in 1 group .*--split-shares", warning), warning
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["expected_answer"] for r in rows} == {"Cancel online.", "Cancel under Settings > Billing."}
    html = tmp_path / "release.html"
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "review", "report", "--store-url", url,
                           "--baseline", "r1", "--candidate", "r2", "--variant", "shadow", "--out", str(html)],
                          capture_output=True, text=True, check=True)
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line}
    # r1: one query judged not correct; r2: the first review (correct) counts
    assert "0.0% [" in lines["correct"] and "(0/1)" in lines["correct"] and "100.0% [" in lines["correct"]
    assert "+100.0%" in lines["correct"] and "(1/1)" in lines["evidence_coverage"]
    # one pair: agreeing on faithful (kappa undefined: both said yes), disagreeing on correct (kappa 0)
    assert "faithful - (1 pairs), correct 0.00 (1 pairs)" in done.stdout
    assert "Cohen" in html.read_text()
    failed = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "review", "report", "--store-url", url,
                             "--baseline", "nope", "--candidate", "r2"], capture_output=True, text=True)
    assert failed.returncode == 2 and "no reviewed query of release 'nope'" in failed.stderr


def test_config_and_errors_print_no_secret(tmp_path):
    env = {"RAG_MONITOR_OTLP_TOKEN": "otlp-s3cret-token", "RAG_MONITOR_STORE_URL": "postgresql+psycopg://rag:pg-pa55word@127.0.0.1:1/rag",
           "RAG_MONITOR_REVIEW_TOKENS": "alice:reviewer:" + "ab" * 32, "RAG_MONITOR_PHOENIX_URL": "http://user:phx-pa55@127.0.0.1:6006"}
    import os

    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "config"], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    for secret in ("otlp-s3cret-token", "pg-pa55word", "ab" * 32, "phx-pa55"):
        assert secret not in done.stdout
    assert "store_url = 'postgresql+psycopg://rag:***@127.0.0.1:1/rag'" in done.stdout
    assert "otlp_token = '***'" in done.stdout
    # an unreachable store: the error names it without its password, and so does any log line
    failed = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "-v", "export", "golden", "--out", str(tmp_path / "g.jsonl")],
                            capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    assert failed.returncode == 2 and "rag-monitor: error:" in failed.stderr
    assert "pg-pa55word" not in failed.stderr + failed.stdout


def test_log_records_are_masked_once_secrets_are_registered(caplog):
    import logging

    from rag_monitor.masking import install_log_masking, mask
    from rag_monitor.settings import load_settings

    load_settings(environ={"RAG_MONITOR_OTLP_TOKEN": "tok-123456"})
    install_log_masking()
    caplog.set_level(logging.INFO)
    logging.getLogger("rag_monitor.test").info("bearer %s refused", "tok-123456")
    assert "tok-123456" not in caplog.text and "bearer *** refused" in caplog.text
    assert mask("x tok-123456 y") == "x *** y"
