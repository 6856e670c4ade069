"""Imports point one way, down the layers of DESIGN.md; no plane reaches sideways into another.

    semconv, record, settings, config_files, masking, estimators,
    templating, logs, extras, defaults (shipped config files)   the bottom
    sdk (on semconv alone); collectors, store, alerts  on the bottom
    review, detectors, faithfulness                  on store (and the bottom)
    agent                                            composes them all
    demo, reference, simulate                        on the agent (the demo starts one)
    cli                                              on top; nothing imports it

Every ``import`` counts, in functions too (a lazy import is still a dependency); only
``if TYPE_CHECKING:`` blocks are exempt. The test parses the source (AST), so it runs without
importing anything heavy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rag_monitor"

LAYER = {
    "semconv": 0, "record": 0, "settings": 0, "templating": 0, "config_files": 0,
    "defaults": 0,  # the shipped config files (data only: their one source)
    "masking": 0,
    "estimators": 0,  # every weighted rate's arithmetic (numpy only): every plane reports rates
    "logs": 0, "extras": 0,  # logging set-up; which extra brings an optional dependency
    "sdk": 1, "collectors": 1, "store": 1, "alerts": 1,
    "review": 2, "detectors": 2, "faithfulness": 2,
    "agent": 3,
    "demo": 4, "simulate": 4,  # the oracle's traffic simulator drives agents like the demo
    "dashboard": 4,  # generated from every plane's metric definitions
    "reference": 5,  # the README/docs references, from the settings, the dashboard's metrics and the rules
    "cli": 6,
}
"""Each part of the package (its first name under ``rag_monitor``) and its floor."""

ALLOWED = {
    "sdk": {"semconv"},
}
"""Parts held to a narrower set than "anything lower" (the SDK: semconv alone, DESIGN.md)."""

PENDING: set[tuple[str, str]] = set()
"""Known violations with an issue that removes them; the test fails once one is gone, so the
entry is deleted with the fix."""


def part_of(module: str) -> str | None:
    names = module.split(".")
    return names[1] if len(names) > 1 and names[0] == "rag_monitor" else None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every runtime import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            if target == "rag_monitor":  # ``from rag_monitor import semconv``: the names are modules
                found.extend((node.lineno, f"rag_monitor.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(("rag_monitor", *path.relative_to(package).with_suffix("").parts))
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        source = part_of(module)
        if source is None:
            continue  # rag_monitor/__init__.py: the SDK's lazy facade (init, Monitor)
        if source not in LAYER:
            out.append(f"{path.relative_to(package.parent)}: {source!r} has no layer in LAYER")
            continue
        for line, target_module in imports_of(path, module):
            target = part_of(target_module)
            if target is None or target == source:
                continue
            allowed = ALLOWED.get(source)
            if target not in LAYER:
                bad = True
            elif allowed is not None:
                bad = target not in allowed
            else:
                # Lower floors only; the bottom's modules may use each other.
                bad = LAYER[target] > LAYER[source] or (LAYER[target] == LAYER[source] and LAYER[source] > 0)
            if bad:
                out.append(f"{path.relative_to(package.parent)}:{line}: {source} (floor {LAYER[source]}) "
                           f"imports {target_module} ({target}, floor {LAYER.get(target, '?')})")
    return out


def test_imports_point_down_the_layers():
    found = violations()
    pending = [v for v in found if any(f": {a} (floor" in v and f"({b}, floor" in v for a, b in PENDING)]
    new = [v for v in found if v not in pending]
    assert not new, "imports against DESIGN.md's layers:\n" + "\n".join(new)
    fixed = {(a, b) for a, b in PENDING if not any(f": {a} (floor" in v and f"({b}, floor" in v for v in pending)}
    assert not fixed, f"fixed, delete from PENDING: {sorted(fixed)}"


def test_the_check_catches_an_upward_and_a_sideways_import(tmp_path):
    package = tmp_path / "rag_monitor"
    (package / "store").mkdir(parents=True)
    (package / "review").mkdir()
    (package / "__init__.py").write_text("")
    (package / "semconv.py").write_text("X = 1\n")
    (package / "store" / "__init__.py").write_text("from rag_monitor import semconv\n")
    (package / "review" / "__init__.py").write_text("from ..store import Store\n")
    assert violations(package) == []
    (package / "store" / "queue.py").write_text("def f():\n    from rag_monitor.agent.service import Agent\n")
    (package / "store" / "drift.py").write_text("from ..alerts.metrics import AgentMetrics\n")
    (package / "store" / "typing_only.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rag_monitor.review import x\n")
    found = violations(package)
    assert len(found) == 2, found
    assert "store/queue.py:2: store (floor 1) imports rag_monitor.agent.service" in found[1]
    assert "store/drift.py:1: store (floor 1) imports rag_monitor.alerts.metrics" in found[0]


@pytest.mark.parametrize("module, expected", [("rag_monitor.store.engine", "store"), ("rag_monitor", None), ("os", None)])
def test_part_of(module, expected):
    assert part_of(module) == expected
