"""Every measured figure in README.md and docs/*.md comes from a committed results file written by
a committed script, and agrees with it (benchmarks/figures.py renders them between markers)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("figures", ROOT / "benchmarks" / "figures.py")
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)

# A measurement: a number with a unit of time, memory, rate, ratio or share.
MEASURED = re.compile(r"(?<![\w.])\d[\d,.]*(?:x\b|%|\s?(?:ms|MB|MiB|GB|queries/s|spans/s)\b)")
BUDGET = re.compile(r"(?:≤|≥|<|>|at most|at least)\s*$")  # a budget or bound, not a measurement
LEVEL = re.compile(r"^\s*(?:interval|confidence)")  # "the 95% interval": a confidence level
MEASURED_SECTIONS = re.compile(r"^#+ .*(Reliability|Benchmark|Measured|Oracle)", re.I)


def _measured_sections(text: str) -> list[str]:
    """Text of sections whose heading says they report measurements, without code blocks."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("#"):
            keep = bool(MEASURED_SECTIONS.match(line))
            continue
        if keep:
            out.append(line)
    return out


def test_figures_agree_with_the_results_files():
    assert figures.main(["--check"]) == 0, "run python benchmarks/figures.py"


@pytest.mark.parametrize("doc", figures.documents(), ids=lambda p: p.name)
def test_every_figure_names_a_committed_results_file_and_script(doc):
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
    for match in figures.markers(doc.read_text()):
        results = f"benchmarks/results/{match['file']}"
        script = figures.script_for(match["file"]).relative_to(ROOT).as_posix()
        assert (ROOT / results).exists() and (results in tracked or not tracked), results
        assert (ROOT / script).exists(), f"{results} has no committed script ({script})"
        figures.lookup(figures._load(match["file"]), match["path"])  # the path resolves


@pytest.mark.parametrize("doc", figures.documents(), ids=lambda p: p.name)
def test_no_measured_figure_outside_a_marker(doc):
    loose = []
    for line in _measured_sections(doc.read_text()):
        bare = figures.MARKER.sub("", line)
        for m in MEASURED.finditer(bare):
            if not BUDGET.search(bare[: m.start()]) and not LEVEL.match(bare[m.end():]):
                loose.append(f"{m.group(0)!r} in: {line.strip()[:100]}")
    assert not loose, "figures without a results file:\n" + "\n".join(loose)


def test_render_replaces_a_stale_figure_and_keeps_the_marker():
    text = "sustained <!-- fig load.json highest_sustained.target_queries_per_s .0f -->800<!-- /fig --> queries/s"
    value = figures.lookup(figures._load("load.json"), "highest_sustained.target_queries_per_s")
    assert figures.render(text) == text.replace("-->800<", f"-->{value:.0f}<")
    assert figures.render(figures.render(text)) == figures.render(text)


def test_lookup_follows_keys_and_indexes_and_names_a_missing_path():
    data = {"rows": [{"a": 1}, {"a": {"b": 2.5}}]}
    assert figures.lookup(data, "rows[1].a.b") == 2.5
    with pytest.raises(KeyError, match="rows\\[1\\].c"):
        figures.lookup(data, "rows[1].c")


def test_the_guard_catches_a_loose_figure():
    lines = _measured_sections("## Benchmarks\nran at 800 queries/s, ≤ 1.5x budget\n## Other\n9 ms\n")
    found = [m.group(0) for line in lines for m in MEASURED.finditer(line) if not BUDGET.search(line[: m.start()])]
    assert found == ["800 queries/s"]
