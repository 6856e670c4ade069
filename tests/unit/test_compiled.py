"""The compiled modules: in use where built, and a build older than its source is named."""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys

import pytest

from rag_monitor import compiled
from tests.collectors.test_shipped_defaults import compiled_py

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


@pytest.mark.skipif(sys.byteorder != "little", reason="setup.py compiles on little-endian hosts only")
def test_the_ingest_modules_run_compiled_where_built():
    # This checkout is built (make venv): under CI a missing build is a failure, not a fallback.
    if not compiled.compiled_modules() and os.environ.get("CI") != "true":
        pytest.skip("not built here (make venv)")
    for module in compiled_py():
        assert importlib.import_module(module).__file__.endswith(SUFFIX), module
    assert set(compiled.compiled_modules()) == {"rag_monitor.collectors.otlp.wire", *compiled_py()}


def test_a_build_older_than_its_source_is_stale(tmp_path, monkeypatch):
    package = tmp_path / "rag_monitor"
    (package / "collectors" / "otlp").mkdir(parents=True)
    files = {name: package / "collectors" / name for name in
             ("dialects.py", f"dialects{SUFFIX}", "values.py", f"values{SUFFIX}", "plain.py")}
    files["wire.pyx"], files[f"wire{SUFFIX}"], files["wire_format.pxi"] = (
        package / "collectors" / "otlp" / n for n in ("wire.pyx", f"wire{SUFFIX}", "wire_format.pxi"))
    for path in files.values():
        path.write_text("")
    for name, when in {"dialects.py": 100, f"dialects{SUFFIX}": 200, "values.py": 300, f"values{SUFFIX}": 200,
                       "wire.pyx": 100, f"wire{SUFFIX}": 200, "wire_format.pxi": 250, "plain.py": 999}.items():
        os.utime(files[name], (when, when))
    monkeypatch.setattr(compiled, "PACKAGE", package)

    assert compiled.compiled_modules() == ["rag_monitor.collectors.dialects", "rag_monitor.collectors.otlp.wire",
                                           "rag_monitor.collectors.values"]
    assert compiled.stale() == [f"rag_monitor.collectors.otlp.wire: wire_format.pxi is newer than wire{SUFFIX}",
                                f"rag_monitor.collectors.values: values.py is newer than values{SUFFIX}"]
