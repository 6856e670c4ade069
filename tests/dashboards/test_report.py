"""The demo's HTML report: its numbers from known inputs, and the quick demo's report in Chromium."""

from __future__ import annotations

import base64
import re
import shutil
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from rag_monitor.demo.report import alert_spans, drift_runs, phase_windows
from rag_monitor.record import QueryRecord, StageTiming
from tests.services import require, require_module

S = 1_000_000_000  # ns


@dataclass
class _Phase:
    phase: str
    release: str
    trace_ids: list[str] = field(default_factory=list)


class _Store:
    """The two store reads the report makes, from lists (a fake inside a unit test)."""

    def __init__(self, records, runs=()):
        self.records = {r.trace_id: r for r in records}
        self.runs = list(runs)
        self.recent = SimpleNamespace(get=self.records.get)
        self.drift_runs = SimpleNamespace(list=self._runs)

    def _runs(self, profile, limit=100):
        return [r for r in self.runs if r.profile == profile][:limit]


def _record(trace_id: str, start_s: float, retrieve_s: float) -> QueryRecord:
    start = int(start_s * S)
    stage = StageTiming("retrieve", "s" + trace_id, start, start + int(retrieve_s * S))
    return QueryRecord(trace_id, "r" + trace_id, start, start + int((retrieve_s + 0.5) * S), stages=[stage])


def test_phase_windows_and_latencies_come_from_each_phases_records():
    first = [_record(f"a{i}", 1000 + i, retrieve_s=0.01 * (i + 1)) for i in range(20)]  # 10..200 ms
    second = [_record(f"b{i}", 1030 + i, retrieve_s=1.0) for i in range(5)]
    phases = [_Phase("baseline", "r1", [r.trace_id for r in first] + ["expired"]), _Phase("bad", "r2", [r.trace_id for r in second])]
    t0, windows = phase_windows(_Store(first + second), phases)
    assert t0 == 1000
    assert [w.name for w in windows] == ["baseline", "bad"]
    assert [(w.start_s, w.end_s) for w in windows] == [(0, pytest.approx(19.7)), (30, pytest.approx(35.5))]
    assert sorted(windows[0].latencies["retrieve"]) == pytest.approx([0.01 * (i + 1) for i in range(20)])
    assert windows[1].latencies["query"] == pytest.approx([1.5] * 5)


def test_alert_spans_from_alertmanager_notifications():
    alerts = [
        {"status": "firing", "labels": {"alertname": "RagDriftDetected", "signal": "query_embedding", "triage": "drift"},
         "startsAt": "2026-01-01T00:00:10.123456789Z", "endsAt": "0001-01-01T00:00:00Z"},
        {"status": "resolved", "labels": {"alertname": "RagDriftDetected", "signal": "query_embedding", "triage": "drift"},
         "startsAt": "2026-01-01T00:00:10.123456789Z", "endsAt": "2026-01-01T00:00:40Z"},
        {"status": "firing", "labels": {"alertname": "RagQueryLatencyOverSLO", "release": "r2", "triage": "regression",
                                                           "suspected_release": "r2"},
         "startsAt": "2026-01-01T00:00:30+00:00", "endsAt": "0001-01-01T00:00:00Z"},
    ]
    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    spans = alert_spans(alerts, t0, end_s=60.0)
    assert [(s["label"], s["triage"]) for s in spans] == [("RagDriftDetected query_embedding", "drift"),
                                                          ("RagQueryLatencyOverSLO r2 (after r2)", "regression")]
    assert spans[0]["start"] == pytest.approx(10.123456) and spans[0]["end"] == 40.0
    assert spans[1]["start"] == 30.0 and spans[1]["end"] == 60.0  # still firing: to the end of the run


def test_drift_runs_keep_finished_runs_in_time_order():
    @dataclass
    class Run:
        profile: str
        finished_at: float | None
        result: dict

    runs = [Run("p", 1020.0, {"status": "done", "p_value": 0.004, "is_drift": True}),
            Run("p", 1010.0, {"status": "done", "p_value": 0.5, "is_drift": False}),
            Run("p", None, {"status": "running"}), Run("other", 1005.0, {"status": "done", "p_value": 0.1})]
    assert drift_runs(_Store([], runs), "p", t0=1000.0) == [(10.0, 0.5, False), (20.0, 0.004, True)]


# --- the quick demo's report ---------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_writes_the_report_and_prints_its_path(demo_run):
    result, _ = demo_run
    path = result.summary.urls["report"]
    assert path in result.text
    html = open(path).read()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 4
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    for release in ("r1", "r2"):
        assert f"<td>{release}</td>" in html
    # Every alert Alertmanager delivered is on the timeline, with its triage.
    fired = {(a["labels"]["alertname"], a["labels"]["triage"]) for a in result.alerts if a.get("status") == "firing"}
    assert fired and ("RagDriftDetected", "drift") in fired
    rows = set(re.findall(r"<tr><td>(Rag\w+)[^<]*</td><td>(\w+)</td>", html))
    # (one row per alert and subject: its triage when it first fired)
    assert rows <= fired and {name for name, _ in rows} == {name for name, _ in fired}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_report_renders_in_chromium_with_every_plot(demo_run, tmp_path):
    require_module("playwright")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    require(executable is not None, "Debian's chromium")
    from playwright.sync_api import sync_playwright

    from tests.review.conftest import CHROMIUM_ARGS

    result, _ = demo_run
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"file://{result.summary.urls['report']}")
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            assert len(widths) == 4 and min(widths) > 300
            # One page: the four plots side by side two by two, not a long scroll.
            assert page.evaluate("document.body.scrollHeight") < 2200
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000
