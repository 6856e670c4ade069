"""How the demo stops: Ctrl-C, SIGTERM, or the end of the ``make`` that started it, all alike.

Everything the demo starts (the agent, Phoenix, Prometheus, Alertmanager) is closed by the
``ExitStack`` of ``run_demo`` when an exception unwinds it. Ctrl-C raises ``KeyboardInterrupt``;
SIGTERM (``kill``, a supervisor, ``timeout``) is turned into the same here. ``make`` does not
pass a SIGTERM it receives on to its recipe, so under ``make demo`` Linux is asked to send the
demo SIGTERM when its parent exits::

    with sigterm_as_interrupt():
        run_demo(options)          # raises Terminated on SIGTERM, after the servers stopped
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the demo unwinds as on Ctrl-C."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated()


def _terminate_with_parent() -> None:
    """Under make (MAKELEVEL set), on Linux: SIGTERM when make exits (it never forwards one)."""
    if sys.platform != "linux" or "MAKELEVEL" not in os.environ:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return  # not fatal: Ctrl-C and a SIGTERM to the demo itself still stop everything
    if os.getppid() == 1:  # make exited before the request took effect
        raise Terminated()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread meanwhile."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        _terminate_with_parent()
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
