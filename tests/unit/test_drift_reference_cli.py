"""`rag-monitor drift reference show | set | reset`, the page rule's arithmetic, and the report."""

from __future__ import annotations

import math

import pytest

from rag_monitor.agent.drift.feed import DriftFeed
from rag_monitor.agent.drift.profiles import load_profiles
from rag_monitor.agent.drift.runs import run_profile
from rag_monitor.cli import main as cli
from rag_monitor.detectors.paging import PageRule
from rag_monitor.record import QueryRecord
from rag_monitor.store import open_store


def test_page_rule_from_the_budget():
    daily = PageRule.from_budget(interval_s=86400, false_pages_per_30d=1, p_floor=1 / 301)
    assert daily.threshold == pytest.approx(300)  # 10 x 30 tests per 30 days
    assert daily.expected_false_pages_per_30d(86400) == pytest.approx(0.1)
    assert daily.pages(daily.log_evidence(1 / 301)) and not daily.pages(daily.log_evidence(2 / 301))
    assert daily.log_evidence(0.0) == pytest.approx(math.log(301))  # floored at the smallest p-value
    assert daily.log_evidence(2.0) == 0.0
    # hourly at the same budget needs p <= 1/7200: out of reach of 300 permutations, so refused
    with pytest.raises(ValueError, match="no test can page: the smallest p-value is 0.00332 .* at least 7199 permutations"):
        PageRule.from_budget(interval_s=3600, false_pages_per_30d=1, p_floor=1 / 301)
    hourly = PageRule.from_budget(interval_s=3600, false_pages_per_30d=1)  # asymptotic tests have no floor
    assert hourly.threshold == pytest.approx(7200) and hourly.pages(hourly.log_evidence(1e-4))


def records(n, t0, intent="billing", start=0):
    return [QueryRecord(trace_id=f"{start + i:032x}", root_span_id="1" * 16, start_ns=int((t0 + i) * 1e9), end_ns=1,
                        query=f"q{i}", intent=intent) for i in range(n)]


def test_reference_show_set_reset(tmp_path, capsys):
    (tmp_path / "profiles.yaml").write_text(
        "profiles:\n  - {name: intent-chi, signal: intent, detector: chi_square, reference_size: 50,"
        " current_size: 40, min_current: 20, interval_s: 60}\n")
    (tmp_path / "agent.yaml").write_text(f"data_dir: {tmp_path / 'data'}\ndetector_profiles: {tmp_path / 'profiles.yaml'}\n")
    config = ["--config", str(tmp_path / "agent.yaml")]
    assert cli(["drift", "reference", "show", *config]) == 2  # no store yet: says where it looked
    assert f"no store at {tmp_path / 'data' / 'rag-monitor.db'}" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()

    store = open_store(f"sqlite:///{tmp_path / 'data' / 'rag-monitor.db'}")  # as the agent does
    assert cli(["drift", "reference", "show", *config]) == 0
    assert "intent: the first 7 days (profile default" in capsys.readouterr().out
    profile = load_profiles(tmp_path / "profiles.yaml")[0]
    now = [1_800_000_000.0]
    feed = DriftFeed(store.reservoirs, [profile], clock=lambda: now[0])
    feed.offer(records(40, now[0]))
    now[0] += 60  # the slot is over: its window is written
    feed.tick()
    now[0] -= 60
    assert run_profile(store, profile, "t", now=now[0] + 100)["reason"].startswith("reference still being captured")

    # an explicit range seeds the reference from the current window's items inside it
    start, end = now[0] + 10, now[0] + 30
    assert cli(["drift", "reference", "set", "--from", str(start), "--to", str(end), *config]) == 0
    assert "new reference version 2" in capsys.readouterr().out
    reference = store.reservoirs.window("intent", "reference")
    assert reference.version == 2 and len(reference.trace_ids) == 20 and reference.times.min() >= start
    assert store.reservoirs.window("intent", "current").version == 2  # the current window is kept
    feed.offer(records(20, now[0] + 120, intent="cards", start=100))
    now[0] += 180
    feed.tick()
    result = run_profile(store, profile, "t", now=now[0] + 20)
    assert result["status"] == "done" and result["reference"]["mode"] == "range"
    assert result["window_start"] >= end  # never the reference's own items
    assert result["changes"]["over"][0]["cluster"] == "cards"

    assert cli(["drift", "reference", "set", "--release", "r9", "--days", "2", *config]) == 0
    assert store.reservoirs.reference_spec("intent") == {"mode": "release", "release": "r9", "days": 2.0}
    assert cli(["drift", "reference", "show", *config]) == 0
    assert "the first 2 days of release r9" in capsys.readouterr().out
    assert cli(["drift", "reference", "reset", *config]) == 0
    assert store.reservoirs.reference_spec("intent") is None
    assert cli(["drift", "reference", "set", "--from", "2026-01-02", *config]) == 2  # a clear error
    assert "needs both --from and --to" in capsys.readouterr().err

    assert cli(["drift", "report", *config, "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "intent-chi" in page and "time range" in page and "<td>cards</td>" in page  # what changed
    store.close()
