"""Figures in README.md and docs/*.md, rendered from the committed results files.

A measured figure is written between markers that name where it comes from::

    one agent sustained <!-- fig load.json highest_sustained.target_queries_per_s ,.0f -->400<!-- /fig --> queries/s

``fig FILE PATH [FORMAT]``: ``FILE`` under ``benchmarks/results/``, ``PATH`` a dotted path into
its JSON (``steps[3].rss_mb_end``), ``FORMAT`` a Python format spec (``.2f``, ``,.0f``, ``.1%``;
default ``g``). A ratio is rendered ``1.35`` and the text around it says ``x``.

    python benchmarks/figures.py           # rewrite every marker from the results files
    python benchmarks/figures.py --check   # exit 1 when a figure is stale (tests/test_figures.py)

Every results file a marker names must be written by a committed script: ``benchmarks/NAME.py``
for ``results/NAME.json``, or the script the file itself names under ``"script"``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"<!-- fig (?P<file>[\w.-]+) (?P<path>[^\s]+)(?: (?P<format>[^\s]+))? -->(?P<text>.*?)<!-- /fig -->", re.S)
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def documents() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def lookup(data, path: str):
    """The value at a dotted path with ``[i]`` list indexes; KeyError naming the path if absent."""
    value = data
    for name, index in _STEP.findall(path):
        try:
            value = value[int(index)] if index else value[name]
        except (KeyError, IndexError, TypeError) as e:
            raise KeyError(f"{path}: no {name or index!s} in the results") from e
    return value


def script_for(file: str) -> Path:
    """The committed script that writes ``results/file``."""
    data = _load(file) if file.endswith(".json") else {}
    named = data.get("script") if isinstance(data, dict) else None
    return ROOT / named if named else ROOT / "benchmarks" / (Path(file).stem + ".py")


_cache: dict[str, object] = {}


def _load(file: str):
    if file not in _cache:
        _cache[file] = json.loads((RESULTS / file).read_text())
    return _cache[file]


def render_value(file: str, path: str, spec: str | None) -> str:
    value = lookup(_load(file), path)
    return format(value, spec or "g")


def render(text: str) -> str:
    def replace(match: re.Match) -> str:
        value = render_value(match["file"], match["path"], match["format"])
        head = match.group(0)[: match.start("text") - match.start()]
        return f"{head}{value}<!-- /fig -->"

    return MARKER.sub(replace, text)


def markers(text: str) -> list[re.Match]:
    return list(MARKER.finditer(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a document's figures are stale")
    args = parser.parse_args(argv)
    stale = []
    _cache.clear()
    for doc in documents():
        current = doc.read_text()
        fresh = render(current)
        if fresh != current:
            if args.check:
                stale.append(doc)
            else:
                doc.write_text(fresh)
    if stale:
        print(f"stale figures in {', '.join(str(p.relative_to(ROOT)) for p in stale)}: "
              "run python benchmarks/figures.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
