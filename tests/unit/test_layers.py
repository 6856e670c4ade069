"""Imports point one way, down the layers of DESIGN.md; no plane reaches sideways into another.

    semconv, record, settings, config_files, masking, estimators,
    templating, logs, extras, defaults (shipped config files)   the bottom
    sdk (on semconv alone); collectors, store, alerts  on the bottom
    review, faithfulness                             on store (and the bottom)
    detectors                                        on estimators alone: statistics, no I/O
    agent                                            composes them all
    demo, reference, simulate                        on the agent (the demo starts one)
    cli                                              on top; nothing imports it

Every ``import`` counts, in functions too (a lazy import is still a dependency); only
``if TYPE_CHECKING:`` blocks are exempt. The test parses the source (AST), so it runs without
importing anything heavy.

``detectors`` is statistics only (``PURE``): functions and classes on arrays and plain values.
Besides the layers, it may import nothing that does I/O, keeps a clock, starts threads or talks
to the agent's services (``IO_MODULES``), call nothing that opens a file or reads the clock
(``IO_CALLS``), and take no handle to a service by duck typing (``SERVICE_HANDLES``): the
agent's drift plane (``agent/drift/``) and probe runner (``agent/probes.py``) feed it values.
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
    "compiled": 0,  # which modules run compiled (setup.py), and stale builds
    "sdk": 1, "collectors": 1, "store": 1, "alerts": 1,
    "review": 2, "detectors": 2, "faithfulness": 2,
    "agent": 3,
    "demo": 4, "simulate": 4,  # the oracle's traffic simulator drives agents like the demo
    "panels": 4,  # the panel plan, from every plane's metric definitions
    "dashboard": 5,  # the Grafana model of the panel plan
    "reference": 5,  # the README/docs references, from the settings, the dashboard's metrics and the rules
    "cli": 6,
}
"""Each part of the package (its first name under ``rag_monitor``) and its floor."""

ALLOWED = {
    "sdk": {"semconv"},
    "detectors": {"estimators"},
}
"""Parts held to a narrower set than "anything lower" (the SDK: semconv alone, DESIGN.md; the
statistics: the estimators' arithmetic alone, never the store)."""

PURE = {"detectors"}
"""Parts that are statistics only: no I/O, no clock, no threads, no service handles."""

IO_MODULES = {
    **dict.fromkeys(("os", "pathlib", "io", "shutil", "tempfile", "glob", "fileinput", "mmap", "sqlite3",
                     "dbm", "shelve"), "files and the environment"),
    **dict.fromkeys(("socket", "ssl", "http", "urllib", "httpx", "requests", "aiohttp", "grpc", "smtplib"),
                    "the network"),
    **dict.fromkeys(("threading", "_thread", "concurrent", "multiprocessing", "asyncio", "subprocess", "signal",
                     "selectors"), "threads and processes"),
    **dict.fromkeys(("time", "sched", "apscheduler"), "the clock and scheduling: times come in as values"),
    **dict.fromkeys(("sqlalchemy", "alembic", "psycopg", "psycopg2", "prometheus_client", "opentelemetry",
                     "starlette", "uvicorn", "jinja2"), "the agent's services (store, metrics, servers, pages)"),
    **dict.fromkeys(("yaml", "torch", "sentence_transformers", "transformers", "huggingface_hub"),
                    "reading config files and models"),
}
"""Modules (their first name) ``PURE`` parts may not import, and why. Allowed on purpose: numpy,
scipy, scikit-learn (the arithmetic); ``threadpoolctl`` (caps BLAS threads within one
computation, starts none); ``secrets``, ``random``, ``hashlib`` (seeds and content-blind
sampling); ``datetime`` (formatting given timestamps; reading the clock is an ``IO_CALLS``
call); ``json``, ``logging``, ``warnings`` (values and diagnostics, through the caller's
handlers); ``importlib`` (``detectors/__init__`` loads its own detector classes lazily)."""

IO_CALLS = {"open": "opens a file", "print": "writes to stdout", "input": "reads stdin",
            "__import__": "imports by name", "now": "reads the clock", "utcnow": "reads the clock",
            "today": "reads the clock"}
"""Calls (a builtin's name, or a method's: ``datetime.now()``) ``PURE`` parts may not make."""

SERVICE_HANDLES = {"store", "metrics", "registry", "engine", "connection", "client"}
"""Parameter and attribute names of a service passed in and used by duck typing (how the drift
feed once reached the store without importing it)."""

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


def impurities(path: Path, imports: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line, what) for everything in ``path`` (a module of a ``PURE`` part) that does I/O or reaches a service."""
    out = [(line, f"imports {module} ({IO_MODULES[module.partition('.')[0]]})")
           for line, module in imports if module.partition(".")[0] in IO_MODULES]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in IO_CALLS:
                out.append((node.lineno, f"calls {name}() ({IO_CALLS[name]})"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg in SERVICE_HANDLES:
                    out.append((node.lineno, f"takes a {arg.arg!r} (a service handle: pass values in)"))
        elif isinstance(node, ast.Attribute) and node.attr in SERVICE_HANDLES:
            out.append((node.lineno, f"uses .{node.attr} (a service handle: pass values in)"))
    return out


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
        imports = imports_of(path, module)
        if source in PURE:
            out += [f"{path.relative_to(package.parent)}:{line}: {source} is statistics only, yet {what}"
                    for line, what in sorted(impurities(path, imports))]
        for line, target_module in imports:
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


def test_the_statistics_do_no_io_and_hold_no_service(tmp_path):
    package = tmp_path / "rag_monitor"
    (package / "detectors").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "estimators.py").write_text("X = 1\n")
    (package / "detectors" / "__init__.py").write_text(
        "import datetime as dt\nimport importlib\nimport math\nfrom rag_monitor.estimators import X\n"
        "def f(values, now: float):\n    import numpy as np\n    from threadpoolctl import threadpool_limits\n"
        "    return dt.datetime.fromtimestamp(now), np.mean(values)\n")
    assert violations(package) == []
    (package / "detectors" / "feed.py").write_text(
        "import threading\nfrom pathlib import Path\n"
        "def tick(store, values):\n    import time\n    from rag_monitor.store import ReservoirItem\n"
        "    store.add(values, time.time())\nclass Feed:\n    def tick(self):\n        self.store.add([])\n")
    (package / "detectors" / "clock.py").write_text(
        "import datetime as dt\nclass Window:\n    def age(self):\n        return dt.datetime.now() - self.start\n"
        "    def save(self, path):\n        open(path, 'w').write(str(self.start))\n"
        "    def record(self):\n        self.metrics.set(1)\n")
    found = "\n".join(violations(package))
    for expected in ("detectors/feed.py:1: detectors is statistics only, yet imports threading (threads",
                     "detectors/feed.py:2: detectors is statistics only, yet imports pathlib (files",
                     "detectors/feed.py:3: detectors is statistics only, yet takes a 'store' (a service handle",
                     "detectors/feed.py:4: detectors is statistics only, yet imports time (the clock",
                     "detectors/feed.py:5: detectors (floor 2) imports rag_monitor.store (store, floor 1)",
                     "detectors/feed.py:9: detectors is statistics only, yet uses .store (a service handle",
                     "detectors/clock.py:4: detectors is statistics only, yet calls now() (reads the clock)",
                     "detectors/clock.py:6: detectors is statistics only, yet calls open() (opens a file)",
                     "detectors/clock.py:8: detectors is statistics only, yet uses .metrics (a service handle"):
        assert expected in found, found
    assert len(violations(package)) == 9, found


@pytest.mark.parametrize("module, expected", [("rag_monitor.store.engine", "store"), ("rag_monitor", None), ("os", None)])
def test_part_of(module, expected):
    assert part_of(module) == expected
