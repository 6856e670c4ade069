"""The reference pages under ``docs/``, generated from the code and rule files so they cannot drift.

``python -m rag_monitor.reference`` rewrites the blocks between
``<!-- BEGIN generated:NAME -->`` and ``<!-- END generated:NAME -->`` in each page of ``PAGES``;
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
    from rag_monitor.panels import metric_definitions

    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in metric_definitions():
        labels = ", ".join(f"`{label}`" for label in m.labels)
        kind = f"{m.kind} ({m.computed})" if m.computed else m.kind
        rows.append(f"| `{m.name}` | {kind} | {labels} | {m.doc} |")
    return "\n".join(rows)


def alerts_reference() -> str:
    from rag_monitor.alerts.rules import load_rules, render_markdown

    return render_markdown(load_rules())  # the shipped rules


SECTIONS = {"settings": settings_table, "metrics": metrics_table, "alerts": alerts_reference}
PAGES = {"settings": "docs/configuration.md", "metrics": "docs/metrics.md", "alerts": "docs/alerts.md"}
"""Which page under the repository root holds each generated block."""


def render(text: str, names=tuple(SECTIONS)) -> str:
    for name in names:
        pattern = re.compile(rf"(<!-- BEGIN generated:{name} -->\n).*?(<!-- END generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"no generated:{name} block")
        body = SECTIONS[name]() + "\n"
        text = pattern.sub(lambda m: m.group(1) + body + m.group(2), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    stale = []
    for name, page in PAGES.items():
        path = args.root / page
        current = path.read_text()
        fresh = render(current, (name,))
        if fresh == current:
            continue
        if args.check:
            stale.append(page)
        else:
            path.write_text(fresh)
    if stale:
        print(f"stale: {', '.join(stale)}: run python -m rag_monitor.reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
