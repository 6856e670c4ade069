import pytest

from tests.oracle.harness import OtlpSink


@pytest.fixture
def sink():
    """A stand-in for Phoenix that keeps every body forwarded to it."""
    s = OtlpSink()
    yield s
    s.close()
