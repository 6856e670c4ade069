"""SIGTERM stops the demo's servers as Ctrl-C does, also when it reaches only `make demo`.

The demo's own run takes minutes; a stand-in ``run_demo`` starts one tiny server through the
demo's process class and its ExitStack and then serves, as ``--serve`` does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import wait_until

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = '''
import contextlib, sys, time
from pathlib import Path
import rag_monitor.demo.run as run
from rag_monitor.demo.services import _Process

class TinyServer(_Process):
    name = "tiny"

def run_demo(options):
    root = Path(sys.argv[1])
    with contextlib.ExitStack() as stack:
        server = TinyServer(root)
        server._spawn([sys.executable, "-c", "import time; time.sleep(600)"])
        stack.callback(server.stop)
        (root / "server.pid").write_text(str(server.proc.pid))
        with contextlib.suppress(KeyboardInterrupt):  # as run_demo serves
            while True:
                time.sleep(3600)

run.run_demo = run_demo
sys.exit(run.main(["--serve", "--no-phoenix"]))
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent's reaper) counts as stopped.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def _start(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, int]:
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: (tmp_path / "server.pid").exists(), timeout=60, what="the stand-in server")
    return proc, int((tmp_path / "server.pid").read_text())


def test_sigterm_to_the_demo_stops_its_servers(tmp_path):
    proc, server = _start(tmp_path, [sys.executable, "stand_in.py", str(tmp_path)])
    assert _alive(server)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0  # --serve ends as on Ctrl-C
    assert not _alive(server)


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_sigterm_to_make_demo_stops_its_servers(tmp_path):
    import shutil

    from tests.services import require

    require(shutil.which("make") is not None, "make")
    (tmp_path / "Makefile").write_text(f"demo:\n\t{sys.executable} stand_in.py {tmp_path}\n")
    proc, server = _start(tmp_path, ["make", "-s", "demo"])
    proc.send_signal(signal.SIGTERM)  # make does not pass it on to its recipe
    proc.wait(timeout=60)
    wait_until(lambda: not _alive(server), timeout=60, what="the demo's server stopped after make's SIGTERM")
