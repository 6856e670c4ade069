"""The README's install profiles: what each extra pulls in, and the SDK running with nothing else.

Resolved offline against this venv's metadata with the same closure ``benchmarks/install_size.py``
measures (its results file gives the README's sizes): what `pip install 'rag-monitor[...]'` would
install, by distribution name.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("install_size", ROOT / "benchmarks" / "install_size.py")
install_size = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_size)

HEAVY = {"torch", "transformers", "sentence-transformers", "evidently", "plotly", "pyarrow", "pandas", "statsmodels"}
"""What made `pip install '.[agent]'` weigh 1.2 GB before the report and embeddings extras."""


def profile(name: str) -> set[str]:
    return set(install_size.closure(install_size.project_requirements(install_size.PROFILES[name])))


def test_the_sdk_alone_is_opentelemetry_and_pure_python_helpers():
    sdk = profile("sdk")
    assert {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"} <= sdk
    assert not sdk & (HEAVY | {"numpy", "scipy", "sqlalchemy", "pyyaml", "starlette"}), sorted(sdk)


def test_the_agent_leaves_torch_and_evidentlys_pages_to_their_extras():
    agent = profile("agent")
    assert not agent & HEAVY, sorted(agent & HEAVY)
    assert {"evidently", "plotly", "pyarrow"} <= profile("agent_report")
    assert {"torch", "sentence-transformers"} <= profile("agent_embeddings")
    assert "torch" in profile("agent_hhem") and "psycopg" in profile("agent_postgres")


def test_every_profile_is_in_the_readme_install_table():
    readme = (ROOT / "README.md").read_text()
    for name, extras in install_size.PROFILES.items():
        command = "pip install rag-monitor" if not extras else f"pip install 'rag-monitor[{','.join(extras)}]'"
        assert f"`{command}`" in readme and f"install_size.json profiles.{name}.mb" in readme, name


def test_the_readme_sdk_example_runs_with_the_sdk_alone(running_agent):
    """Every module outside the SDK's closure made unimportable, the README's example runs and its
    feedback reaches the agent (the app process never needs the agent's dependencies)."""
    import re

    from tests.services import wait_until

    allowed = profile("sdk") | {"rag-monitor"}
    outside = sorted({module for module, dists in metadata.packages_distributions().items()
                      if module.isidentifier() and not {canonicalize_name(d) for d in dists} & allowed})
    assert {"numpy", "yaml", "sqlalchemy", "starlette"} <= set(outside)
    example = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    code = (f"import sys\nsys.modules.update(dict.fromkeys({outside!r}))\n"
            + example.replace("http://127.0.0.1:4318", running_agent.otlp_url))
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    wait_until(lambda: running_agent.metric_sum("rag_feedback_total", kind="thumbs_down") == 1, timeout=30,
               what="the SDK-only app's feedback")
    assert running_agent.metric_sum("rag_queries_total") == 1


@pytest.mark.parametrize("name", sorted(install_size.PROFILES))
def test_the_results_file_measured_each_profile(name):
    import json

    results = json.loads((ROOT / "benchmarks" / "results" / "install_size.json").read_text())["profiles"]
    assert results[name]["extras"] == ",".join(install_size.PROFILES[name])
