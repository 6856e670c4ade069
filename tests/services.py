"""Real services for integration tests: PostgreSQL, Prometheus, Alertmanager, Phoenix.

Each starts on loopback on a free port in a temporary directory and stops after. Missing
binaries or packages go through ``require``: a failure under ``CI=true``, a skip elsewhere.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1, what: str = "") -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - the service may not be up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- PostgreSQL -------------------------------------------------------------------------


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

    def start(self) -> None:
        self._run(f"{self.bindir}/initdb", "-D", str(self.datadir), "-A", "trust", "-U", "postgres", "--no-sync")
        self._run(
            f"{self.bindir}/pg_ctl", "-D", str(self.datadir), "-l", str(self.root / "pg.log"), "-w", "start",
            "-o", f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=100",
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


class PhoenixServer:
    def __init__(self, root: Path):
        require_module("phoenix")
        self.root = root
        self.port = free_port()
        self.grpc_port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> None:
        env = dict(
            os.environ,
            PHOENIX_WORKING_DIR=str(self.root),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"],
            env=env, stdout=open(self.root / "phoenix.log", "wb"), stderr=subprocess.STDOUT,
        )
        import urllib.request

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"phoenix exited: {(self.root / 'phoenix.log').read_text()[-2000:]}")
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as r:
                return r.status == 200

        wait_until(healthy, timeout=timeout, interval=0.5, what="Phoenix /healthz")

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory) -> Iterator[PhoenixServer]:
    server = PhoenixServer(tmp_path_factory.mktemp("phoenix"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
