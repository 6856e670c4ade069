"""The compiled OTLP decoder (rag_monitor/collectors/otlp/wire.pyx); everything else is in pyproject.toml.

``optional=True``: where no C compiler is at hand the build goes on without it, and the agent
decodes with upb and ``ProtoDecoder`` (the same spans, at several times the CPU; the agent's
start-up line says which decoder runs). It reads fixed-width fields in the host's byte order, so
it is built on little-endian hosts only (x86, ARM).
"""

import sys

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize  # pyproject.toml's build requirement; absent with --no-build-isolation
except ImportError:
    print("setup.py: Cython is not installed; building without the compiled OTLP decoder", file=sys.stderr)
    cythonize = None

extensions = []
if cythonize is not None and sys.byteorder == "little":
    extensions = cythonize([Extension("rag_monitor.collectors.otlp.wire", ["rag_monitor/collectors/otlp/wire.pyx"])], language_level=3)
    for extension in extensions:
        extension.optional = True  # set after cythonize, which does not carry it over
setup(ext_modules=extensions)
