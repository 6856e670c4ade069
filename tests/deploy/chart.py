"""Render the Helm chart with the helm binary that `make tools` builds (``.tools/helm``).

Usage::

    docs = render(values_file=SQLITE_VALUES)          # list of manifests (dicts)
    deployment = one(docs, "Deployment", "rm-rag-monitor")
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.services import require

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "rag-monitor"
HELM = ROOT / ".tools" / "helm"
SQLITE_VALUES = CHART / "ci" / "sqlite-values.yaml"
POSTGRESQL_VALUES = CHART / "ci" / "postgresql-values.yaml"
RELEASE = "rm"
FULLNAME = "rm-rag-monitor"
# Schemas shipped by kubernetes-validate; 1.31 matches the kubectl/helm layer the tools come from.
KUBERNETES_VERSION = "1.31.0"


def helm_binary() -> str:
    require(HELM.is_file(), f"helm at {HELM} (run `make tools`)")
    return str(HELM)


def helm(*args: str, chart: Path = CHART) -> subprocess.CompletedProcess:
    """Run helm on the chart; never raises, the caller checks returncode and stderr."""
    return subprocess.run(
        [helm_binary(), *args, str(chart)], capture_output=True, text=True, timeout=120,
    )


def template_args(values_file: Path | None, sets: tuple[str, ...]) -> list[str]:
    args = ["template", RELEASE, "--namespace", "monitoring"]
    if values_file is not None:
        args += ["-f", str(values_file)]
    for assignment in sets:
        # --set reads 0.35 as a string; "json:key=0.35" goes through --set-json instead.
        if assignment.startswith("json:"):
            args += ["--set-json", assignment[len("json:"):]]
        else:
            args += ["--set", assignment]
    return args


@functools.lru_cache(maxsize=32)
def _render_cached(chart: Path, values_file: Path | None, sets: tuple[str, ...]) -> str:
    result = helm(*template_args(values_file, sets), chart=chart)
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    return result.stdout


def render(values_file: Path | None = None, *sets: str, chart: Path = CHART) -> list[dict[str, Any]]:
    """Rendered manifests, one dict each (empty documents dropped)."""
    text = _render_cached(chart, values_file, tuple(sets))
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {[d['metadata']['name'] for d in kinds(docs, kind)]}"
    return found[0]


def agent_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", FULLNAME)


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise AssertionError(f"no container {name!r} in {deployment['metadata']['name']}")


def env_var(c: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((e for e in c.get("env", []) if e["name"] == name), None)
