"""The chart's copies of the shipped config (rag_monitor/defaults: collectors/, detectors/,
alerts/rules/) and of the dashboard equal their sources, and its values schema is the one
helm/values_schema.py builds from rag_monitor/settings.py (helm/sync_files.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _sync_module():
    spec = importlib.util.spec_from_file_location("helm_sync_files", ROOT / "helm" / "sync_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chart_copies_equal_the_sources():
    problems = _sync_module().differences()
    assert problems == [], "chart files are out of date; run: python helm/sync_files.py\n" + "\n".join(problems)


def test_values_schema_is_generated_from_current_settings():
    assert _sync_module().schema_is_current(), "values.schema.json is out of date; run: python helm/sync_files.py"


def test_sync_adds_updates_and_removes(tmp_path):
    sync = _sync_module()
    root, chart_files = tmp_path / "repo", tmp_path / "chart-files"
    defaults = root / "rag_monitor" / "defaults"
    (defaults / "collectors").mkdir(parents=True)
    (defaults / "alerts" / "rules").mkdir(parents=True)
    (defaults / "collectors" / "prices.yaml").write_text("models: {}\n")
    (defaults / "alerts" / "rules" / "cost.yml").write_text("groups: []\n")
    (defaults / "alerts" / "thresholds.yaml").write_text("not deployed\n")
    (chart_files / "detectors").mkdir(parents=True)
    (chart_files / "detectors" / "old.yaml").write_text("stale\n")

    assert sorted(sync.differences(root, chart_files)) == [
        "missing in chart: alerts/rules/cost.yml",
        "missing in chart: collectors/prices.yaml",
        "stale copy (source removed): detectors/old.yaml",
    ]
    sync.sync(root, chart_files)
    assert sync.differences(root, chart_files) == []
    assert not (chart_files / "detectors" / "old.yaml").exists()
    assert not (chart_files / "alerts" / "thresholds.yaml").exists()
    assert (chart_files / "collectors" / "prices.yaml").read_text() == "models: {}\n"

    (defaults / "collectors" / "prices.yaml").write_text("models: {gpt: {input: 1, output: 2}}\n")
    assert sync.differences(root, chart_files) == ["differs from source: collectors/prices.yaml"]
