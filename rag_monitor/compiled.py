"""Which of the package's modules run compiled, and whether a build is stale.

``setup.py`` compiles the OTLP decoder (``wire.pyx``) and a few pure-Python modules of the
ingest path as they are; each sits beside its source as an extension module, which Python
imports in preference to the ``.py``. An edit to such a ``.py`` therefore takes effect only
after a rebuild (``make venv``, or ``python setup.py build_ext --inplace``): ``stale`` names
the builds older than their source, and the test suite refuses to run on one.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _extensions() -> dict[str, Path]:
    """Module name -> extension file, for every extension built into the package."""
    found: dict[str, Path] = {}
    suffixes = importlib.machinery.EXTENSION_SUFFIXES  # most specific first: ".cpython-311-...so" before ".so"
    for path in PACKAGE.rglob("*"):
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is not None:
            found[path.relative_to(PACKAGE.parent).as_posix()[: -len(suffix)].replace("/", ".")] = path
    return found


def compiled_modules() -> list[str]:
    """The package's modules built as extensions (whether or not imported yet)."""
    return sorted(_extensions())


def stale() -> list[str]:
    """``module: source newer than its build`` for each extension older than its ``.py``/``.pyx``."""
    out = []
    for module, extension in sorted(_extensions().items()):
        name = module.rpartition(".")[2]
        sources = [extension.parent / f"{name}.py", extension.parent / f"{name}.pyx"]
        if sources[1].exists():  # Cython sources include their .pxi files
            sources += extension.parent.glob("*.pxi")
        built = extension.stat().st_mtime
        out += [f"{module}: {s.name} is newer than {extension.name}" for s in sources if s.exists() and s.stat().st_mtime > built]
    return out


def is_compiled(module) -> bool:
    """Whether ``module`` (imported) was loaded from an extension, not from its ``.py``."""
    return str(getattr(module, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
