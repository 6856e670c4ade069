"""The README's reference sections, generated from the code and rule files so they cannot drift.

``python -m rag_monitor.reference`` rewrites the blocks between
``<!-- BEGIN generated:NAME -->`` and ``<!-- END generated:NAME -->`` in README.md;
``--check`` exits 1 when any block is stale (a test runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def settings_table() -> str:
    from rag_monitor.settings import SETTINGS_DOC

    rows = ["| setting | environment variable | default | what it does |", "|---|---|---|---|"]
    for name, (env, default, doc) in SETTINGS_DOC.items():
        rows.append(f"| `{name}` | `{env}` | `{default!r}` | {doc} |")
    return "\n".join(rows)


def metrics_table() -> str:
    from prometheus_client import CollectorRegistry

    from rag_monitor.agent.scrape import ReviewStatsCollector
    from rag_monitor.alerts.metrics import AgentMetrics

    class _NoReviews:
        def reviewed(self, since=None):
            return []

    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for metric in vars(metrics).values():
        if metric is registry:
            continue
        described = metric.describe()[0]
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        suffix = "_total" if described.type == "counter" else ""
        rows.append(f"| `{described.name}{suffix}` | {described.type} | {labels} | {described.documentation} |")
    for family in ReviewStatsCollector(_NoReviews()).collect():
        rows.append(f"| `{family.name}` | gauge (from reviews, at scrape) | `release` | {family.documentation} |")
    from rag_monitor.review.collector import ReviewMetricsCollector

    for family in ReviewMetricsCollector.families().values():
        labels = ", ".join(f"`{label}`" for label in family._labelnames)
        rows.append(f"| `{family.name}` | gauge (from reviews, at scrape) | {labels} | {family.documentation} |")
    return "\n".join(rows)


def alerts_reference() -> str:
    from rag_monitor.alerts.rules import load_rules, render_markdown

    return render_markdown(load_rules(ROOT / "alerts" / "rules"))


SECTIONS = {"settings": settings_table, "metrics": metrics_table, "alerts": alerts_reference}


def render(text: str) -> str:
    for name, build in SECTIONS.items():
        pattern = re.compile(rf"(<!-- BEGIN generated:{name} -->\n).*?(<!-- END generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"README.md has no generated:{name} block")
        body = build() + "\n"
        text = pattern.sub(lambda m: m.group(1) + body + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    current = args.readme.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print(f"{args.readme} is stale: run python -m rag_monitor.reference", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
