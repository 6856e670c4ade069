"""What each install profile of rag-monitor weighs on disk: ``pip install 'rag-monitor[EXTRAS]'``.

For each profile, the dependency closure pip would install (the extras' requirements, then each
distribution's own ``Requires-Dist`` with its markers evaluated here) is resolved against an
environment that holds every extra (the project's venv, ``make venv``), and the installed files
of those distributions (their RECORD) are summed. Offline and a few seconds, instead of one
fresh venv per profile; ``--check-venv`` confirms the method on one profile by installing it into
a fresh venv under /tmp and measuring its site-packages.

torch is the CPU wheel here (``make venv`` pins it from a local index): PyPI's default Linux
torch pulls CUDA libraries, several GB more.

    python benchmarks/install_size.py                       # -> benchmarks/results/install_size.json
    python benchmarks/install_size.py --check-venv sdk      # also pip-install that profile into /tmp
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "install_size.json"
PROFILES = {
    "sdk": [],
    "agent": ["agent"],
    "agent_report": ["agent", "report"],
    "agent_embeddings": ["agent", "embeddings"],
    "agent_hhem": ["agent", "hhem"],
    "agent_postgres": ["agent", "postgres"],
}
"""Profile name -> the extras of ``pip install 'rag-monitor[...]'`` (README's install table)."""
NOT_COUNTED = {"pip", "setuptools", "wheel"}  # every venv has them


def project_requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def _applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({"extra": extra})


def closure(reqs: list[Requirement]) -> dict[str, metadata.Distribution]:
    """Every distribution the requirements pull in, by canonical name; KeyError for one not installed."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(r, "") for r in reqs]
    seen_extras: set[tuple[str, str]] = set()
    while todo:
        req, via_extra = todo.pop()
        if not _applies(req, via_extra):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = found.get(name) or metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise KeyError(f"{req.name} (needed by the profile) is not installed here: run make venv first") from None
        first = name not in found
        found[name] = dist
        wanted = [("", first)] + [(e, (name, e) not in seen_extras) for e in sorted(req.extras)]
        for extra, new in wanted:
            if not new:
                continue
            seen_extras.add((name, extra))
            for sub in dist.requires or []:
                sub_req = Requirement(sub)
                if _applies(sub_req, extra) and (extra == "" or sub_req.marker is not None):
                    todo.append((sub_req, extra))
    return {n: d for n, d in found.items() if n not in NOT_COUNTED}


def installed_bytes(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        path = Path(dist.locate_file(file))
        if path.is_file():
            total += path.stat().st_size
    return total


def measure(extras: list[str]) -> dict:
    dists = closure(project_requirements(extras))
    sizes = {name: installed_bytes(d) for name, d in dists.items()}
    heaviest = sorted(sizes.items(), key=lambda kv: -kv[1])[:6]
    return {
        "extras": ",".join(extras),
        "install": "pip install rag-monitor" + (f"[{','.join(extras)}]" if extras else ""),
        "distributions": len(sizes),
        "mb": round(sum(sizes.values()) / 1e6, 1),
        "heaviest_mb": {name: round(size / 1e6, 1) for name, size in heaviest},
    }


def check_in_fresh_venv(extras: list[str], timeout_s: float = 600) -> dict:
    """pip-install the profile's requirements into a new venv under /tmp and ``du`` its site-packages."""
    with tempfile.TemporaryDirectory(prefix="rag-monitor-size-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        site = next((venv / "lib").glob("python*/site-packages"))
        before = _du(site)
        reqs = [str(r) for r in project_requirements(extras)]
        started = time.monotonic()
        subprocess.run(pip + reqs, check=True, timeout=timeout_s)
        return {"extras": ",".join(extras), "mb": round((_du(site) - before) / 1e6, 1),
                "seconds": round(time.monotonic() - started, 1)}


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-venv", choices=sorted(PROFILES), help="also install this profile into a fresh venv and compare")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    result = {
        "script": "benchmarks/install_size.py",
        "command": "python benchmarks/install_size.py" + (f" --check-venv {args.check_venv}" if args.check_venv else ""),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": _version("torch"),
        "note": "installed size of each profile's dependency closure (files in RECORD), pip/setuptools excluded; torch is the CPU wheel",
        "profiles": {name: measure(extras) for name, extras in PROFILES.items()},
    }
    profiles = result["profiles"]
    result["report_extra_adds_mb"] = round(profiles["agent_report"]["mb"] - profiles["agent"]["mb"], 1)
    if args.check_venv:
        checked = check_in_fresh_venv(PROFILES[args.check_venv])
        result["fresh_venv_check"] = {"profile": args.check_venv, **checked,
                                      "closure_mb": result["profiles"][args.check_venv]["mb"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, p in result["profiles"].items():
        print(f"{name:18s} {p['mb']:8.1f} MB  {p['distributions']:3d} distributions  heaviest: "
              + ", ".join(f"{n} {mb:.0f}" for n, mb in list(p["heaviest_mb"].items())[:4]))
    if "fresh_venv_check" in result:
        print(f"fresh venv check: {result['fresh_venv_check']}")
    return 0


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
