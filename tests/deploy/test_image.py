"""The Dockerfile built and run here: buildah (chroot isolation) on a debootstrap base image,
podman with runc, no registry (image/build.py). The slim image (no HHEM/embedding extras) is
built from this checkout, started, and must answer /healthz, /metrics and an OTLP export as
the non-root user the chart expects.

Under CI=true a missing toolchain that cannot be installed fails; elsewhere it skips."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.services import free_port, require, wait_until

ROOT = Path(__file__).resolve().parents[2]
TAG = "localhost/rag-monitor:test-slim"


def _build_module():
    spec = importlib.util.spec_from_file_location("image_build", ROOT / "image" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


build = _build_module()


def test_mirror_comes_from_the_machines_apt_sources(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "_os_release", lambda: {"VERSION_CODENAME": "bookworm"})
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert build.debian_mirror(tmp_path) == ("http://mirror.example/debian", "bookworm")
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert build.debian_mirror(tmp_path) == ("http://old.example/debian", "bookworm")
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(RuntimeError, match="no apt source for the suite 'bookworm'"):
        build.debian_mirror(tmp_path)


def test_pip_config_mounts_the_directories_of_local_indexes(monkeypatch, tmp_path):
    (tmp_path / "pypi" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    listed = (f"global.extra-index-url='file://{tmp_path}/pypi/simple'\n:env:.find-links='{tmp_path}/wheels'\n"
              "global.timeout='60'\n")
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: type("R", (), {"stdout": listed})())
    conf, paths = build.host_pip_config()
    assert f"extra-index-url = file://{tmp_path}/pypi/simple" in conf and "timeout = 60" in conf
    assert paths == sorted([str(tmp_path / "pypi"), str(tmp_path / "wheels")])


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_slim_image_builds_starts_and_answers_as_a_non_root_user():
    try:
        build.ensure_tools()
    except build.ToolsMissing as exc:
        require(False, f"the image toolchain ({exc})")
    podman = build.Podman()
    build.build(podman, TAG, build.SLIM_EXTRAS, log=lambda _: None)
    otlp_port, http_port = free_port(), free_port()
    env = {"RAG_MONITOR_OTLP_PORT": str(otlp_port), "RAG_MONITOR_HTTP_PORT": str(http_port)}
    with build.running(podman, TAG, env) as name:
        wait_until(lambda: _healthy(http_port), timeout=120, what="the container's /healthz")
        logs = podman.run("podman", "logs", name)
        started = logs.stdout + logs.stderr
        assert "(compiled protobuf decoder, compiled span assembly)" in started, started[-2000:]
        assert _get(f"http://127.0.0.1:{otlp_port}/healthz")[0] == 200

        pid = int(podman.run("podman", "inspect", "--format", "{{.State.Pid}}", name).stdout.strip())
        assert _uid_of(pid) == 10001
        user = json.loads(podman.run("podman", "image", "inspect", TAG).stdout)[0]["Config"]["User"]
        assert user == "10001:10001"

        import rag_monitor

        monitor = rag_monitor.init(service_name="image-test", endpoint=f"http://127.0.0.1:{otlp_port}", release="img1", batch=False)
        with monitor.query("What is in the image?") as q:
            with q.retrieve() as r:
                r.documents([{"id": "d1", "content": "The agent, its config and a virtualenv."}])
            q.answer("The agent, its config and a virtualenv.")
        monitor.shutdown()

        def counted() -> bool:
            text = _get(f"http://127.0.0.1:{http_port}/metrics")[1]
            lines = [line for line in text.splitlines() if line.startswith("rag_queries_total{") and 'release="img1"' in line]
            return len(lines) == 1 and float(lines[0].split()[-1]) == 1.0

        wait_until(counted, timeout=30, what="the exported query counted in /metrics")


def _healthy(port: int) -> bool:
    try:
        return _get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    except OSError:
        return False
    finally:
        time.sleep(0.5)
