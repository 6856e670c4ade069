"""Compiled modules; everything else is in pyproject.toml.

- ``rag_monitor/collectors/otlp/wire.pyx``: the OTLP protobuf decoder, written in Cython.
- ``COMPILED_PY``: the pure-Python modules of the ingest path (assembly, dialects, redaction,
  pricing, sampling, metrics...), compiled by Cython as they are (as SQLAlchemy compiles some of
  its own): the same code without the interpreter's per-bytecode cost, about a third less CPU in
  redaction and assembly (``benchmarks/compiled_modules.py``). The ``.py`` stays the source of
  truth: an edit to one takes effect only after a rebuild (``make venv``), and the tests refuse a
  stale build (``rag_monitor/compiled.py``).

``optional=True``: where no C compiler is at hand the build goes on without them, and the agent
runs the same code as plain Python (the decoder falls back to upb and ``ProtoDecoder``; the
agent's start-up line says which runs). The decoder reads fixed-width fields in the host's byte
order, so everything is compiled on little-endian hosts only (x86, ARM).
"""

import sys

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize  # pyproject.toml's build requirement; absent with --no-build-isolation
except ImportError:
    print("setup.py: Cython is not installed; building without compiled modules", file=sys.stderr)
    cythonize = None

COMPILED_PY = [
    "rag_monitor.collectors.assembly",
    "rag_monitor.collectors.dialects",
    "rag_monitor.collectors.documents",
    "rag_monitor.collectors.usage",
    "rag_monitor.collectors.values",
    "rag_monitor.collectors.redaction",
    "rag_monitor.collectors.pricing",
    "rag_monitor.collectors.freshness",
    "rag_monitor.store.hot",
    "rag_monitor.review.sampler",
    "rag_monitor.detectors.sampling",
    "rag_monitor.agent.drift.feed",
    "rag_monitor.agent.observe",
]


def _extension(module: str, suffix: str) -> Extension:
    return Extension(module, [module.replace(".", "/") + suffix])


extensions = []
if cythonize is not None and sys.byteorder == "little":
    extensions = cythonize([_extension("rag_monitor.collectors.otlp.wire", ".pyx")], language_level=3)
    # Annotations are not C types here: Cython would otherwise enforce ``list``/``dict`` ones exactly
    # (a tuple passed for ``list[...]`` raises), where Python reads them as documentation.
    extensions += cythonize([_extension(m, ".py") for m in COMPILED_PY], language_level=3,
                            compiler_directives={"annotation_typing": False})
    for extension in extensions:
        extension.optional = True  # set after cythonize, which does not carry it over
setup(ext_modules=extensions)
