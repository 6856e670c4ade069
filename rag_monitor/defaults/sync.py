"""Copy the operator-editable config files into the package (its shipped defaults), or check them.

The agent reads its defaults from ``rag_monitor/defaults/`` so that an installed wheel started
from any directory has them (``rag_monitor/config_files.py``). The top-level ``collectors/`` and
``detectors/`` folders stay the source of truth; this script is the one way the copies change,
and ``tests/collectors/test_shipped_defaults.py`` fails while they differ.

Usage::

    python rag_monitor/defaults/sync.py          # copy
    python rag_monitor/defaults/sync.py --check  # exit 1 and list the differences, copy nothing
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FILES = ("collectors/ingest.yaml", "collectors/redaction.yaml", "collectors/prices.yaml",
         "detectors/sampling.yaml", "detectors/profiles.yaml")


def differences(root: Path = ROOT, target: Path = HERE) -> list[str]:
    problems = []
    for name in FILES:
        source, copy = root / name, target / name
        if not copy.is_file():
            problems.append(f"missing in package: {name}")
        elif not filecmp.cmp(source, copy, shallow=False):
            problems.append(f"differs from source: {name}")
    return problems


def sync(root: Path = ROOT, target: Path = HERE) -> list[str]:
    changed = differences(root, target)
    for name in FILES:
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, target / name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report differences and exit 1 if any; copy nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        for line in problems:
            print(line)
        return 1 if problems else 0
    for line in sync():
        print(f"synced: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
