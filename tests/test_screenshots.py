"""``make screenshots``: one demo run gives the README's images and the figures it quotes.

The wiring is tested here with a stand-in demo (the real one takes minutes); the Chromium part
runs in ``make screenshots`` itself and in tests/review/test_review_browser.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("screenshots", ROOT / "benchmarks" / "screenshots.py")
screenshots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(screenshots)


def _result():
    from rag_monitor.demo.run import REVIEW_TOKEN

    release = lambda name, unsupported, excl: SimpleNamespace(  # noqa: E731
        release=name, queries=100, faithfulness_unsupported=unsupported, false_exclusion_rate=excl, cost_per_query_usd=0.0015)
    summary = SimpleNamespace(
        releases=[release("r1", 0.0, 0.0), release("r2", 0.42, 0.6)],
        alerts=[{"labels": {"alertname": "RagFaithfulnessLow"}}, {"labels": {"alertname": "RagDriftDetected"}}],
        human_queue={"items": 12, "pairs": 2},
        urls={"review": f"http://127.0.0.1:8123/review (reviewer: demo-reviewer, token: {REVIEW_TOKEN})",
              "report": "/tmp/report/index.html"},
    )
    return SimpleNamespace(summary=summary)


def test_one_demo_run_writes_both_images_and_the_results_file(tmp_path, monkeypatch):
    for name in ("REPORT_PNG", "REVIEW_PNG", "RESULTS"):
        monkeypatch.setattr(screenshots, name, tmp_path / name.lower())
    seen = {}

    def fake_demo(options):
        seen["options"] = options
        result = _result()
        options.before_stop(result)  # the screenshots are taken while the demo still serves
        return result

    def fake_shoot(result, report_png, review_png):
        seen["login"] = screenshots.review_login(result.summary)
        report_png.write_bytes(b"png")
        review_png.write_bytes(b"png")

    assert screenshots.main(["--quick"], run_demo=fake_demo, shoot=fake_shoot) == 0
    options = seen["options"]
    assert options.quick and options.fresh and not options.serve
    assert seen["login"] == ("http://127.0.0.1:8123/review", "demo-reviewer", "demo-reviewer-token")
    results = json.loads((tmp_path / "results").read_text())
    assert results["script"] == "benchmarks/screenshots.py" and results["command"] == "make screenshots SCREENSHOT_ARGS=--quick"
    assert results["alerts_fired"] == 2 and results["bad_release"]["unsupported"] == 0.42
    assert (results["waiting_for_you"], results["waiting_pairs"], results["queries"]) == (12, 2, 200)
    assert set(results["images"]) == {"report_png", "review_png"}  # what this run wrote, by digest


def test_no_results_file_when_the_demo_ends_before_the_screenshots(tmp_path, monkeypatch):
    monkeypatch.setattr(screenshots, "RESULTS", tmp_path / "results")
    assert screenshots.main([], run_demo=lambda options: _result(), shoot=lambda *a: None) == 1
    assert not (tmp_path / "results").exists()


def test_make_screenshots_runs_the_script_then_renders_the_figures():
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nscreenshots:", 1)[1].split("\n\n", 1)[0]
    assert "benchmarks/screenshots.py $(SCREENSHOT_ARGS)" in target and "benchmarks/figures.py" in target
    assert ".PHONY: test demo screenshots" in makefile


def test_the_committed_images_are_the_ones_the_results_file_was_written_with():
    """The README's images and its demo figures come from one run: each image's digest is in demo.json."""
    import hashlib

    results = json.loads((ROOT / "benchmarks" / "results" / "demo.json").read_text())
    assert results["script"] == "benchmarks/screenshots.py" and not results["quick"]  # the README shows the full demo
    assert set(results["images"]) == {"docs/demo-report.png", "docs/review-page.png"}
    for path, digest in results["images"].items():
        assert hashlib.sha256((ROOT / path).read_bytes()).hexdigest() == digest, f"{path} is not the image of {results['command']}"
