"""Build the Dockerfile into an image and run it, here, without a container registry.

Debian's buildah builds the Dockerfile against a base image made with debootstrap from the
machine's own Debian mirror; podman runs it with runc. Everything lives in a private
containers storage (``--root``), so nothing touches the host's default storage.

Usage::

    python image/build.py                       # the full image (HHEM + embeddings, CPU torch)
    python image/build.py --extras agent,postgres --tag localhost/rag-monitor:slim

Trap notes (measured, see the README's "Container image"): crun fails on this kind of host
(cgroup hybrid mode), so runc with explicit ulimits; ``--format docker`` keeps HEALTHCHECK;
pip inside RUN steps uses the host's pip configuration, mounted read-only with every local
directory it names.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("RAG_MONITOR_IMAGE_STATE", "/var/tmp/rag-monitor-image"))
BASE_IMAGE = "localhost/python:3.11-headers-local"  # with python3-dev: a base made before it had none
FULL_EXTRAS = "agent,embeddings,hhem,postgres"
SLIM_EXTRAS = "agent,postgres"
TOOLS = ("buildah", "podman", "runc", "debootstrap")
DEBIAN_PACKAGES = ("buildah", "podman", "runc", "fuse-overlayfs", "uidmap", "debootstrap")


class ToolsMissing(RuntimeError):
    """The build tools are absent and cannot be installed (not root, or no apt-get)."""


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]


def ensure_tools() -> None:
    """Install buildah, podman, runc and debootstrap from Debian when missing and possible."""
    missing = missing_tools()
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolsMissing(f"missing {', '.join(missing)}: apt-get install {' '.join(DEBIAN_PACKAGES)} (as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *DEBIAN_PACKAGES], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    if missing_tools():
        raise ToolsMissing(f"still missing after apt-get: {', '.join(missing_tools())}")


def _os_release() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return {k: v.strip('"') for k, v in pairs}


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> tuple[str, str]:
    """(mirror URL, suite) of the machine's main Debian archive, read from its apt sources."""
    suite = _os_release().get("VERSION_CODENAME", "bookworm")
    entries: list[tuple[str, list[str]]] = []  # (uri, suites)
    for path in sorted((sources_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, flags=re.M))
            if "deb" in fields.get("Types", "").split() and fields.get("Enabled", "yes") != "no":
                entries += [(uri, fields.get("Suites", "").split()) for uri in fields.get("URIs", "").split()]
    for path in [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", path.read_text(), flags=re.M):
                entries.append((m.group(1), [m.group(2)]))
    for uri, suites in entries:
        if suite in suites:
            return uri, suite
    raise RuntimeError(f"no apt source for the suite {suite!r} under {sources_dir}: cannot debootstrap")


@dataclass(frozen=True)
class Podman:
    """buildah and podman on one private storage, with runc and explicit ulimits."""

    state: Path = STATE

    @property
    def storage(self) -> list[str]:
        return ["--root", str(self.state / "storage"), "--runroot", str(self.state / "run"), "--storage-driver", "overlay"]

    def env(self) -> dict[str, str]:
        conf = self.state / "containers.conf"
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        # nproc 65536 fails here; nofile must not exceed the host's hard limit.
        conf.write_text(
            '[engine]\nruntime = "runc"\n\n'
            f'[containers]\ndefault_ulimits = ["nofile={hard}:{hard}", "nproc=32768:32768"]\n'
        )
        return {**os.environ, "CONTAINERS_CONF": str(conf)}

    def run(self, tool: str, *args: str, check: bool = True, capture: bool = True, timeout: float | None = None):
        self.state.mkdir(parents=True, exist_ok=True)
        return subprocess.run([tool, *self.storage, *args], check=check, capture_output=capture, text=True,
                              env=self.env(), timeout=timeout)

    def image_exists(self, tag: str) -> bool:
        return self.run("podman", "image", "exists", tag, check=False).returncode == 0

    def image_size(self, tag: str) -> int:
        return int(json.loads(self.run("podman", "image", "inspect", tag).stdout)[0]["Size"])


def base_image(podman: Podman, tag: str = BASE_IMAGE, log=print) -> str:
    """A minimal Debian with python3 and its headers (as python:3.11-slim has them: the agent's
    decoder compiles against them), made with debootstrap and imported once."""
    if podman.image_exists(tag):
        return tag
    mirror, suite = debian_mirror()
    log(f"debootstrap {suite} from {mirror} ...")
    rootfs = Path(tempfile.mkdtemp(prefix="rag-monitor-rootfs-", dir=podman.state))
    try:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,python3-dev,python-is-python3,ca-certificates",
             suite, str(rootfs), mirror],
            check=True, capture_output=True, text=True,
        )
        # The rootfs's apt lists and caches are not needed at run time.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (rootfs / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["podman", *podman.storage, "import", "--change", 'CMD ["python3"]', "-", tag],
                       stdin=tar.stdout, check=True, capture_output=True, env=podman.env())
        tar.wait()
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return tag


def host_pip_config() -> tuple[str, list[str]]:
    """The host's pip configuration as one pip.conf, and the local paths it names.

    ``pip config list`` merges the files and the PIP_* environment; RUN steps see none of them.
    """
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():  # scope.name='value', later scopes override earlier ones
        key, _, value = line.partition("=")
        settings[key.rpartition(".")[2]] = value.strip().strip("'\"")
    paths = []
    for value in settings.values():
        for word in value.split():
            path = word.removeprefix("file://").rstrip("/")
            # A file:// simple index links to wheels beside it (/opt/pypi/files): mount its parent.
            if word.startswith("file://") and path.endswith("/simple"):
                path = path.rsplit("/", 1)[0]
            if path.startswith("/") and Path(path).exists():
                paths.append(path)
    text = "\n".join(f"{k} = {v}" for k, v in settings.items())
    return f"[global]\n{text}\n", sorted(set(paths))


def build(podman: Podman, tag: str, extras: str, log=print) -> float:
    """Build the Dockerfile with buildah; returns the seconds it took."""
    base = base_image(podman, log=log)
    conf_text, paths = host_pip_config()
    pip_conf = podman.state / "pip.conf"
    pip_conf.write_text(conf_text)
    index = re.search(r"^index-url = (\S+)", conf_text, flags=re.M)
    volumes = [f"{pip_conf}:/etc/pip.conf:ro"] + [f"{p}:{p}:ro" for p in paths]
    # --layers: the dependency layer is reused while pyproject.toml and the extras are unchanged.
    args = ["bud", "--isolation", "chroot", "--format", "docker", "--layers",
            "--build-arg", f"PYTHON_IMAGE={base}", "--build-arg", f"EXTRAS={extras}",
            "--build-arg", f"TORCH_INDEX_URL={index.group(1) if index else 'https://pypi.org/simple'}"]
    for v in volumes:
        args += ["-v", v]
    log(f"buildah bud {tag} (extras {extras}) ...")
    started = time.monotonic()
    result = podman.run("buildah", *args, "-t", tag, "-f", str(ROOT / "Dockerfile"), str(ROOT), check=False)
    if result.returncode != 0:
        raise RuntimeError(f"buildah bud failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return time.monotonic() - started


@contextmanager
def running(podman: Podman, tag: str, env: dict[str, str], name: str | None = None) -> Iterator[str]:
    """Start the image detached on the host network; stop and remove it after."""
    name = name or f"rag-monitor-{os.getpid()}-{int(time.time())}"
    args = ["run", "-d", "--rm", "--network", "host", "--health-interval", "disable", "--name", name]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    podman.run("podman", *args, tag)
    try:
        yield name
    finally:
        podman.run("podman", "rm", "-f", "-t", "5", name, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", default=FULL_EXTRAS, help=f"pip extras to install (slim: {SLIM_EXTRAS})")
    parser.add_argument("--tag", default="", help="image tag (default: localhost/rag-monitor:full or :slim)")
    parser.add_argument("--record", type=Path, default=None,
                        help="merge the size and build time into this JSON results file (the README quotes it)")
    args = parser.parse_args(argv)
    variant = "slim" if args.extras == SLIM_EXTRAS else "full" if args.extras == FULL_EXTRAS else args.extras
    tag = args.tag or f"localhost/rag-monitor:{variant.replace(',', '-')}"
    ensure_tools()
    podman = Podman()
    seconds = build(podman, tag, args.extras)
    line = {"tag": tag, "extras": args.extras, "size_mb": round(podman.image_size(tag) / 1e6),
            "build_s": round(seconds), "cpus": os.cpu_count(), "base": BASE_IMAGE}
    print(json.dumps(line))
    if args.record is not None:
        results = json.loads(args.record.read_text()) if args.record.exists() else {}
        results[variant] = line
        args.record.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"run it: CONTAINERS_CONF={podman.state}/containers.conf podman {' '.join(podman.storage)} "
          f"run --rm --network host {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
