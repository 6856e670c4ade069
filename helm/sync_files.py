"""Write the Helm chart's copies of the shipped config files and its values schema, or check that
both are current: the one generator of copies in the repository.

Every shipped config file has one source, the package's defaults (``rag_monitor/defaults/``:
the agent's ``collectors/`` and ``detectors/`` files, the OTel gateway's config, the alert rules
generated from ``alerts/thresholds.yaml``), plus the generated Grafana dashboard
(``dashboards/``). Helm can only read files inside the chart directory, and a symlink does not
survive ``helm package``, so the chart carries generated copies under
``helm/rag-monitor/files/``; ``tests/deploy`` fails while they differ, and
``tests/collectors/test_shipped_defaults.py`` while any other copy of a shipped file exists.
It also rewrites ``values.schema.json`` from ``rag_monitor/settings.py`` (see
``helm/values_schema.py``).

Usage::

    python helm/sync_files.py          # copy (adds, updates, removes files), write the schema
    python helm/sync_files.py --check  # exit 1 and list the differences, copy nothing
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import values_schema  # noqa: E402  (a sibling script, not a package)

ROOT = Path(__file__).resolve().parent.parent
CHART_FILES = ROOT / "helm" / "rag-monitor" / "files"

# Chart folder -> (its source folder under the repository, glob patterns inside it). From alerts/
# only the Prometheus rule files: thresholds.yaml generates them, and the Alertmanager config and
# promtool tests are not deployed by the chart.
SYNCED = {
    "collectors": ("rag_monitor/defaults/collectors", ("*.yaml",)),
    "detectors": ("rag_monitor/defaults/detectors", ("*.yaml",)),
    "alerts": ("rag_monitor/defaults/alerts", ("rules/*.yml", "rules/*.yaml")),
    "dashboards": ("dashboards", ("*.json",)),
}


def source_files(root: Path = ROOT) -> dict[str, Path]:
    """Chart-relative path (``collectors/ingest.yaml``, ``alerts/rules/cost.yml``) -> source file."""
    found: dict[str, Path] = {}
    for folder, (source, patterns) in SYNCED.items():
        for pattern in patterns:
            for path in sorted((root / source).glob(pattern)):
                if path.is_file():
                    found[f"{folder}/{path.relative_to(root / source).as_posix()}"] = path
    return found


def generated_copies(root: Path = ROOT, chart_files: Path = CHART_FILES) -> dict[Path, Path]:
    """Every copy this script writes -> its source (both absolute)."""
    return {chart_files / name: source for name, source in source_files(root).items()}


def chart_copies(chart_files: Path = CHART_FILES) -> dict[str, Path]:
    """Relative chart path -> copy, for every file now under the chart's synced folders."""
    found: dict[str, Path] = {}
    for folder in SYNCED:
        for path in sorted((chart_files / folder).rglob("*")):
            if path.is_file():
                found[path.relative_to(chart_files).as_posix()] = path
    return found


def differences(root: Path = ROOT, chart_files: Path = CHART_FILES) -> list[str]:
    """Human-readable differences between sources and chart copies; empty when in sync."""
    sources, copies = source_files(root), chart_copies(chart_files)
    problems = [f"missing in chart: {name}" for name in sorted(set(sources) - set(copies))]
    problems += [f"stale copy (source removed): {name}" for name in sorted(set(copies) - set(sources))]
    problems += [
        f"differs from source: {name}"
        for name in sorted(set(sources) & set(copies))
        if not filecmp.cmp(sources[name], copies[name], shallow=False)
    ]
    return problems


def schema_is_current() -> bool:
    path = values_schema.SCHEMA_PATH
    return path.is_file() and path.read_text() == values_schema.render()


def sync(root: Path = ROOT, chart_files: Path = CHART_FILES) -> list[str]:
    """Make the chart copies equal to the sources; returns what changed."""
    changed = differences(root, chart_files)
    sources, copies = source_files(root), chart_copies(chart_files)
    for name in set(copies) - set(sources):
        copies[name].unlink()
    for name, source in sources.items():
        target = chart_files / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report differences and exit 1 if any; copy nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        if not schema_is_current():
            problems.append(f"out of date: {values_schema.SCHEMA_PATH.relative_to(ROOT)}")
        for line in problems:
            print(line)
        if problems:
            print("run: python helm/sync_files.py", file=sys.stderr)
        return 1 if problems else 0
    for line in sync():
        print(f"synced: {line}")
    if not schema_is_current():
        values_schema.SCHEMA_PATH.write_text(values_schema.render())
        print(f"wrote: {values_schema.SCHEMA_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
