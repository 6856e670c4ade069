"""Real services for integration tests: PostgreSQL, Prometheus, Alertmanager, Phoenix.

Each starts on loopback on a free port in a temporary directory and stops after. Missing
binaries or packages go through ``require``: a failure under ``CI=true``, a skip elsewhere.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# One implementation of the local service plumbing: the demo runs the same servers.
from rag_monitor.demo.services import PhoenixServer, free_port, stop_process, wait_until  # noqa: F401 (re-exported)

IN_CI = os.environ.get("CI") == "true"


def require(available: bool, what: str) -> None:
    """Skip (developer machine) or fail (CI) when ``what`` is not available."""
    if available:
        return
    message = f"{what} is not available"
    if IN_CI:
        pytest.fail(f"{message}: CI must install it (see .ci/run and the Makefile)")
    pytest.skip(message)


def require_binary(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"the binary {name!r}")
    return path  # type: ignore[return-value]


def require_module(name: str) -> None:
    require(importlib.util.find_spec(name) is not None, f"the Python package {name!r}")


def traversable_tmpdir(prefix: str) -> Path:
    """A temporary directory the ``postgres`` user can reach when the tests run as root.

    pytest's ``tmp_path`` lives under 0700 root-owned directories, so ``initdb`` run as
    ``postgres`` cannot enter it; ``/tmp`` itself is world-traversable.
    """
    return Path(tempfile.mkdtemp(prefix=prefix))


def _pg_bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


class PostgresServer:
    """A throwaway PostgreSQL cluster on loopback (initdb + pg_ctl), as a non-root user when root."""

    def __init__(self, root: Path):
        bindir = _pg_bindir()
        require(bindir is not None, "PostgreSQL (Debian package postgresql)")
        require_module("psycopg")
        self.bindir = bindir
        self.root = root
        self.datadir = root / "pgdata"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            # initdb refuses to run as root: run the cluster as the postgres system user.
            root.chmod(0o777)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_user, *args], check=True, capture_output=True)

    def start(self, *settings: str) -> None:
        """``settings``: more server settings, ``name=value`` (``shared_preload_libraries=...``)."""
        self._run(f"{self.bindir}/initdb", "-D", str(self.datadir), "-A", "trust", "-U", "postgres", "--no-sync")
        extra = "".join(f" -c {setting}" for setting in settings)
        self._run(
            f"{self.bindir}/pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "pg.log"), "-w", "start",
            "-o", f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=100{extra}",
        )

    def stop(self) -> None:
        subprocess.run(
            [*self._as_user, f"{self.bindir}/pg_ctl", "-D", str(self.datadir), "-m", "immediate", "stop"],
            capture_output=True,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    root = traversable_tmpdir("rag-monitor-pg-")
    server = PostgresServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


_db_counter = iter(range(1_000_000))


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database(f"t{os.getpid()}_{next(_db_counter)}")


# --- Phoenix --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory) -> Iterator[PhoenixServer]:
    require(PhoenixServer.available(), "the Python package 'arize-phoenix'")
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
