"""Phoenix as the tests and the demo start it, when a port it was given is taken before it binds."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from rag_monitor.demo import services
from tests.services import PhoenixServer, require

pytestmark = pytest.mark.integration


def test_phoenix_starts_on_fresh_ports_when_its_grpc_port_was_taken(tmp_path, monkeypatch):
    """CI lost a run to this: Phoenix binds gRPC after its migrations, by which time the free
    port it was handed had become an outgoing connection's local port."""
    require(PhoenixServer.available(), "the Python package 'arize-phoenix'")
    taken = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    taken.bind(("::", 0))
    taken.listen()
    taken_port = taken.getsockname()[1]
    handed_out: list[int] = []
    real_free_port = services.free_port

    def free_port_taken_first() -> int:
        port = taken_port if len(handed_out) == 1 else real_free_port()  # the first start's gRPC port
        handed_out.append(port)
        return port

    monkeypatch.setattr(services, "free_port", free_port_taken_first)
    server = PhoenixServer(tmp_path)
    try:
        server.start()
        with urllib.request.urlopen(f"{server.url}/healthz", timeout=5) as response:
            assert response.status == 200
        # HTTP and gRPC ports for the start that lost its gRPC port, two fresh ones after: the
        # retry happens only when the startup failure names a port binding.
        assert len(handed_out) == 4
    finally:
        server.stop()
        taken.close()
