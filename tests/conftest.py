"""Shared fixtures. Services start on loopback and stop after.

Under ``CI=true`` a test whose service or package is missing fails; elsewhere it skips with
the reason, so a developer without PostgreSQL can still run the rest.
"""

from __future__ import annotations

import os

import pytest

from tests.services import free_port, require  # noqa: F401  (re-exported for tests)

pytest_plugins = ["tests.services", "tests.agents"]


def pytest_report_header(config):
    from rag_monitor.compiled import compiled_modules

    return [f"CI={os.environ.get('CI', '')!r}: missing services {'fail' if os.environ.get('CI') == 'true' else 'skip'}",
            f"compiled: {', '.join(m.rpartition('.')[2] for m in compiled_modules()) or 'nothing (plain Python)'}"]


def pytest_sessionstart(session):
    """An extension built before its source was edited would test the old code: refuse it."""
    from rag_monitor.compiled import stale

    if found := stale():
        raise pytest.UsageError("stale compiled modules (rebuild: make venv, or python setup.py build_ext --inplace): "
                                + "; ".join(found))


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A last resort against a hung test: pytest-timeout's Python-level timer cannot fire when a
    thread holds the GIL forever (a native deadlock), and the run then eats CI's whole budget.
    faulthandler's watchdog is native: two minutes past the test's own timeout it prints every
    thread's stack and ends the run, so the failure is fast and says where it hung."""
    import faulthandler

    marker = item.get_closest_marker("timeout")
    limit = (marker.args[0] if marker.args else marker.kwargs.get("timeout")) if marker else None
    timeout = float(limit if limit is not None else item.config.getini("timeout") or 0)
    if timeout > 0:
        # To the terminal's stderr: the test's own (captured) stderr is lost when the run ends.
        capturing = getattr(item.config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
        terminal = getattr(getattr(capturing, "err", None), "targetfd_save", 2)
        faulthandler.dump_traceback_later(timeout + 120, exit=True, file=terminal)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
