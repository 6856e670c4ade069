"""Requests framed the HTTP/1.0 way: a POST without a length gets 411, and a client that
half-closes after a whole request still gets its answer (uvicorn alone closed on the FIN)."""

from __future__ import annotations

import socket

import pytest


def exchange(port: int, request: bytes, half_close: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)  # "my body ends where I close", HTTP/1.0 style
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    return answer


@pytest.mark.parametrize("half_close", [True, False])
@pytest.mark.parametrize("server, path", [("otlp", "/v1/traces"), ("http", "/review/login")])
def test_a_post_without_a_length_gets_411(running_agent, server, path, half_close):
    port = running_agent.agent.settings.otlp_port if server == "otlp" else running_agent.agent.settings.http_port
    answer = exchange(port, f"POST {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n\r\n{{}}".encode(),
                      half_close)
    assert answer.startswith(b"HTTP/1.1 411 "), answer[:200]
    assert b"transfer-encoding" not in answer.lower()  # an HTTP/1.0 client cannot read chunks
    assert answer.endswith(b'{"message": "Content-Length required"}')


def test_a_whole_request_then_a_half_close_is_answered(running_agent):
    body = b'{"resourceSpans": []}'
    request = (b"POST /v1/traces HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    answer = exchange(running_agent.agent.settings.otlp_port, request, half_close=True)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
