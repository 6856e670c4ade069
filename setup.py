"""The compiled OTLP decoder (rag_monitor/collectors/otlp/wire.pyx); everything else is in pyproject.toml.

``optional=True``: where no C compiler is at hand the build goes on without it, and the agent
decodes with upb and ``ProtoDecoder`` (the same spans, at several times the CPU; the agent's
start-up line says which decoder runs).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension("rag_monitor.collectors.otlp.wire", ["rag_monitor/collectors/otlp/wire.pyx"], optional=True)],
    language_level=3,
))
