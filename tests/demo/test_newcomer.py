"""From the demo to a submitted blind review, following only the README (issue 26).

As a person does it: the demo runs from an empty directory with its default data directory (what
`make demo` runs, shortened with --quick); the README and the demo's last lines say how to serve
the review page again once the demo has stopped; the printed login opens the person's own queue in
real headless Chromium (Debian's), both blind steps are labelled with the keyboard and submitted,
and the review is in the demo's store under that login, an item the simulated reviewer never saw.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.review.conftest import browser  # noqa: F401 - the Chromium fixture
from tests.services import require, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text().split())
CLI = [sys.executable, "-m", "rag_monitor.cli"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_MONITOR_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _typed(command: str) -> list[str]:
    """A printed `rag-monitor ...` line as argv (the venv's console script is this module)."""
    words = shlex.split(command)
    assert words[0] == "rag-monitor", command
    return CLI + words[1:]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.timeout(1800)  # the quick demo: a few minutes alone, much longer on a loaded machine
def test_from_the_demo_to_a_submitted_blind_review(tmp_path, browser):  # noqa: F811
    from rag_monitor.demo.services import AlertingStack

    require(AlertingStack.available(), "prometheus and prometheus-alertmanager binaries")
    demo = subprocess.Popen(CLI + ["demo", "--quick", "--no-phoenix"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = demo.communicate(timeout=1500)
    finally:
        if demo.poll() is None:  # SIGTERM: the demo stops its servers (a kill would leave Prometheus running)
            demo.send_signal(signal.SIGTERM)
            demo.communicate(timeout=120)
    assert demo.returncode == 0, err[-3000:]

    # The login the summary prints with the review page, and how to serve that page again.
    review = re.search(r"^  review +(http://\S+/review) \(reviewer: (\S+), token: (\S+)\)$", out, re.M)
    assert review, out[-3000:]
    url, reviewer, token = review.groups()
    waiting = re.search(r"waiting for you: (\d+) items \((\d+) of them shadow pairs\)", out)
    assert waiting and int(waiting[1]) >= 10 and int(waiting[2]) >= 1, out[-3000:]
    serve_again = re.search(r"^  (rag-monitor agent --config \S+)$", out, re.M)
    assert serve_again and f"and open {url} with the same login" in out, out[-2000:]
    command = serve_again[1]
    assert command == "rag-monitor agent --config .rag-monitor-demo/agent.yaml"  # relative: what the person types
    assert f"`{command}`" in README and "`DEMO_ARGS=--serve`" in README  # the README says the same
    assert not _answers(url)  # the demo stopped its servers, as the README says

    agent = subprocess.Popen(_typed(command), cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        def up() -> bool:
            if agent.poll() is not None:
                raise RuntimeError(agent.stderr.read()[-3000:])
            return _answers(url)

        wait_until(up, timeout=300, what="the review page served again")
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(url)
        page.fill("#reviewer", reviewer)
        page.fill("#token", token)
        page.keyboard.press("Enter")
        page.wait_for_selector("#relevance:visible", timeout=60_000)  # step 1: the candidates, no answer shown
        assert not page.is_visible("#answer-step")
        page.keyboard.press("Digit1")  # the first candidate is relevant
        page.keyboard.press("Enter")
        page.wait_for_selector("#answer-step:visible", timeout=60_000)  # step 2: the answer
        page.keyboard.press("f")  # faithful: yes (answer A of a shadow pair)
        page.keyboard.press("c")  # correct: yes
        if page.is_visible("#pair-answers"):  # a pair is judged per side: Shift marks answer B
            page.check("input[name=preferred] >> nth=0")
            page.keyboard.press("Shift+F")
            page.keyboard.press("Shift+C")
        page.keyboard.press("Enter")
        from playwright.sync_api import TimeoutError as PlaywrightTimeout  # the browser fixture requires playwright

        try:
            page.wait_for_selector("#status:has-text('Saved.')", timeout=60_000)
        except PlaywrightTimeout:  # "Not saved: <why>" says what the page refused
            state = "running" if agent.poll() is None else f"exited {agent.returncode}: {agent.stderr.read()[-2000:]}"
            raise AssertionError(f"not saved: {page.inner_text('#status')!r} (agent {state})") from None
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=120)
    assert agent.returncode == 0

    from rag_monitor.demo.reviewer import HUMAN, HumanQueue
    from rag_monitor.settings import load_settings
    from rag_monitor.store import open_store

    settings = load_settings(tmp_path / ".rag-monitor-demo" / "agent.yaml", environ={})
    store = open_store(settings.resolved_store_url())
    try:
        mine = [(item_id, r) for item_id, reviews in store.review.all_reviews().items() for r in reviews if r.reviewer == reviewer]
        assert reviewer == HUMAN and len(mine) == 1, mine
        item_id, review = mine[0]
        assert review.labels["faithful"] == "yes" and len(review.labels["relevant_documents"]) == 1, review.labels
        assert store.queue.get_item(item_id).assigned_to == HUMAN  # from the person's own queue
        assert HumanQueue(store).waiting()["items"] < int(waiting[1])  # it left the queue
    finally:
        store.close()
