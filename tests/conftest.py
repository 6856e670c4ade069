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
    return f"CI={os.environ.get('CI', '')!r}: missing services {'fail' if os.environ.get('CI') == 'true' else 'skip'}"


@pytest.fixture
def anyio_backend():
    return "asyncio"
