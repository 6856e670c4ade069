"""The links and commands the demo prints: each link checked against the server that answers it.

Package builds differ: Debian's Prometheus 2.42 ships only the classic UI (``/alerts`` is a 404
there, ``/classic/alerts`` answers), and Debian's Alertmanager ships no web UI at all (its API
and ``amtool`` work). So each page is the first candidate the running server answers with 200::

    links = demo_links(agent, alerting, phoenix_url)   # name -> 'URL' or 'URL (how to read it)'
    link_url(links["alertmanager"])                    # the URL alone, for a test to fetch
    report_commands(root / "agent.yaml", ["r1", "r2"])  # the CLI's reports on the demo's store
    review_after_exit(root / "agent.yaml", links["review"])  # the review page once the demo has stopped
"""

from __future__ import annotations

import os
import shlex
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PROMETHEUS_ALERT_PAGES = ("/alerts", "/classic/alerts")
"""The React UI's page (upstream builds), then the classic UI's (Debian's 2.42)."""
ALERTMANAGER_UI_ASSET = "/script.js"
"""Served by Alertmanager's web UI; absent from Debian's package, which has none."""


def answers(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def prometheus_alerts_page(base_url: str) -> str:
    for path in PROMETHEUS_ALERT_PAGES:
        if answers(base_url + path):
            return base_url + path
    return f"{base_url}/api/v1/alerts (this Prometheus serves no alerts page: its API)"


def alertmanager_alerts_page(base_url: str) -> str:
    if answers(base_url + ALERTMANAGER_UI_ASSET):
        return f"{base_url}/#/alerts"
    return f"{base_url}/api/v2/alerts (no web UI in this package: amtool --alertmanager.url={base_url} alert query)"


def link_url(link: str) -> str:
    """The URL of a printed link (what precedes its explanation in parentheses)."""
    return link.split(" ", 1)[0]


def demo_links(agent: Any, alerting: Any, phoenix_url: str, review_token: str) -> dict[str, str]:
    """name -> link, in the order the summary prints them."""
    http = f"http://127.0.0.1:{agent.settings.http_port}"
    links = {"metrics": f"{http}/metrics",
             "review": f"{http}/review (reviewer: demo-reviewer, token: {review_token})"}
    if phoenix_url:
        links["phoenix"] = phoenix_url
    if alerting is not None:
        links["prometheus"] = prometheus_alerts_page(alerting.prometheus.url)
        links["alertmanager"] = alertmanager_alerts_page(alerting.alertmanager.url)
    return links


def _shown(config: Path) -> Path:
    """The settings file as the person types it: relative to where they are when it is below."""
    return Path(os.path.relpath(config) if config.is_relative_to(Path.cwd()) else config)


def report_commands(config: Path, releases: list[str]) -> str:
    """The CLI's reports on this run's store, with the demo's settings file."""
    shown = _shown(config)
    option = f"--config {shlex.quote(str(shown))}"
    beside = lambda name: shlex.quote(str(shown.parent / name))  # noqa: E731
    lines = ["Reports on this store (the CLI reads it through the demo's settings file):",
             f"  rag-monitor shadow report {option}",
             f"  rag-monitor drift report {option} --out {beside('drift-report')}",
             f"  rag-monitor drift reference show {option}"]
    if len(releases) >= 2:
        lines.append(f"  rag-monitor review report {option} --baseline {shlex.quote(releases[0])} --candidate {shlex.quote(releases[1])}")
    lines.append(f"  rag-monitor export golden {option} --out {beside('golden.jsonl')}")
    return "\n".join(lines)


def review_after_exit(config: Path, review_link: str) -> str:
    """How to reach the review queue once the demo has stopped its servers (without --serve): the
    queue stays in the store, and an agent started with the demo's settings serves it again."""
    return "\n".join([
        "The demo stops its servers now; the review queue stays in its store. To review it, serve it again with",
        f"  rag-monitor agent --config {shlex.quote(str(_shown(config)))}",
        f"and open {link_url(review_link)} with the same login (or run the demo with --serve).",
    ])
