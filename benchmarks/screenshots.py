"""The README's demo images and numbers, from one demo run: ``make screenshots``.

Runs the demo, then, while its agent still serves, opens the report and the review page in
headless Chromium (Debian's ``chromium``, driven by Playwright) and writes:

- ``docs/demo-report.png``: the demo's one-page report;
- ``docs/review-page.png``: the review page's two blind steps, side by side, on an item of the
  queue the demo leaves for the person trying it (logged in as the login the demo prints);
- ``benchmarks/results/demo.json``: the figures the README quotes about that run
  (``benchmarks/figures.py`` renders them), with the command that made them.

    python benchmarks/screenshots.py            # the full demo (a few minutes)
    python benchmarks/screenshots.py --quick    # the shortened demo
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "demo.json"
REPORT_PNG = ROOT / "docs" / "demo-report.png"
REVIEW_PNG = ROOT / "docs" / "review-page.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def results_from(result: Any, quick: bool, seconds: float) -> dict[str, Any]:
    """The figures the README quotes, read from the run's summary (what its screen showed)."""
    summary = result.summary
    releases = {r.release: r for r in summary.releases}
    bad = releases.get("r2")
    return {
        "script": "benchmarks/screenshots.py",
        "command": "make screenshots" + (" SCREENSHOT_ARGS=--quick" if quick else ""),
        "quick": quick,
        "duration_s": round(seconds),
        "duration_min": round(seconds / 60, 1),
        "queries": sum(r.queries for r in summary.releases),
        "alerts_fired": len(summary.alerts),
        "alert_names": sorted({a.get("labels", {}).get("alertname", "?") for a in summary.alerts}),
        "bad_release": None if bad is None else {
            "unsupported": bad.faithfulness_unsupported, "false_exclusion": bad.false_exclusion_rate,
            "cost_per_query_usd": bad.cost_per_query_usd,
        },
        "waiting_for_you": summary.human_queue.get("items", 0),
        "waiting_pairs": summary.human_queue.get("pairs", 0),
    }


def image_digests(*images: Path) -> dict[str, str]:
    """SHA-256 of each image, by its path under the checkout: a test checks the committed images
    are the ones this run wrote (images and figures from one run)."""
    return {_relative(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in images}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def review_login(summary: Any) -> tuple[str, str, str]:
    """(page URL, reviewer, token) from the summary's review line."""
    from rag_monitor.demo.reviewer import HUMAN
    from rag_monitor.demo.run import REVIEW_TOKEN

    return summary.urls["review"].split()[0], HUMAN, REVIEW_TOKEN


def capture(result: Any, report_png: Path, review_png: Path) -> None:
    """Screenshots of the report and of the review page's two steps (one item of the person's queue)."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    url, reviewer, token = review_login(result.summary)
    with sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(Path(result.summary.urls["report"]).resolve().as_uri())
            page.screenshot(path=str(report_png), full_page=True)
            page = browser.new_page(viewport={"width": 900, "height": 900})
            page.goto(url)
            page.fill("#reviewer", reviewer)
            page.fill("#token", token)
            page.keyboard.press("Enter")
            page.wait_for_selector("#relevance:visible", timeout=30_000)
            page.keyboard.press("Digit1")
            page.screenshot(path=f"{tmp}/relevance.png", full_page=True)
            page.keyboard.press("Enter")
            page.wait_for_selector("#answer-step:visible", timeout=30_000)
            page.screenshot(path=f"{tmp}/answer.png", full_page=True)
        finally:
            browser.close()
        side_by_side(Path(tmp) / "relevance.png", Path(tmp) / "answer.png", review_png)


def side_by_side(first: Path, second: Path, out: Path) -> None:
    from PIL import Image

    a, b = Image.open(first), Image.open(second)
    canvas = Image.new("RGB", (a.width + b.width + 24, max(a.height, b.height)), "#c9ced8")
    canvas.paste(a, (0, 0))
    canvas.paste(b, (a.width + 24, 0))
    canvas.save(out, optimize=True)


def main(argv: list[str] | None = None, run_demo: Any = None, shoot: Any = capture) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the shortened demo")
    parser.add_argument("--data-dir", type=Path, default=None, help="the demo's data (default: a temporary directory)")
    args = parser.parse_args(argv)
    if run_demo is None:
        from rag_monitor.demo.run import run_demo
    from rag_monitor.demo.run import DemoOptions

    shots: dict[str, Any] = {}

    def before_stop(result: Any) -> None:  # the agent still serves the review page
        shoot(result, REPORT_PNG, REVIEW_PNG)
        shots["done"] = True

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or Path(tmp) / "demo"
        result = run_demo(DemoOptions(quick=args.quick, fresh=True, phoenix=False, data_dir=data_dir,
                                      before_stop=before_stop))
    if not shots:
        print("the demo ended before the screenshots were taken", file=sys.stderr)
        return 1
    results = results_from(result, args.quick, time.monotonic() - started)
    results["images"] = image_digests(REPORT_PNG, REVIEW_PNG)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {REPORT_PNG}, {REVIEW_PNG} and {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
