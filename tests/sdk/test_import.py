"""``import rag_monitor`` (and using the SDK) loads nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ["torch", "transformers", "pandas", "numpy", "phoenix", "sklearn", "scipy", "evidently", "prometheus_client"]

SCRIPT = """
import json, sys
import rag_monitor
import rag_monitor.sdk
monitor = rag_monitor.init(service_name="s", endpoint="http://127.0.0.1:9", export_timeout_s=0.1)
with monitor.query("q") as q:
    with q.retrieve() as r:
        r.documents([{"id": "d", "content": "c"}])
monitor.shutdown(timeout_s=1)
heavy = %r
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_sdk_pulls_no_heavy_module():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT % (HEAVY,)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_public_names():
    import rag_monitor

    assert sorted(rag_monitor.__all__) == ["Monitor", "__version__", "init"]
    assert callable(rag_monitor.init)
    assert isinstance(rag_monitor.__version__, str)
