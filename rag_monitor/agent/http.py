"""The agent's HTTP surfaces: the OTLP/HTTP receiver and the metrics/health server.

OTLP/HTTP per the specification: ``POST /v1/traces`` with ``application/x-protobuf`` or
``application/json`` bodies (optionally gzip), answered in the request's encoding with an
``ExportTraceServiceResponse`` (``partial_success`` when spans were rejected). Errors carry a
``google.rpc.Status`` with a message: 400 malformed, 401 missing or wrong bearer token, 413 too
large, 415 unsupported type, 408 when the body does not arrive within the read deadline, 503 +
``Retry-After`` when the store is unavailable or the agent is saturated (exporters retry those).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rag_monitor.agent.admission import EXPRESS, ReadingSlots
from rag_monitor.collectors.otlp import BodyTooLarge, OTLPDecodeError, UnsupportedMediaType
from rag_monitor.store import StoreUnavailable

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_S = "5"


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _status_body(message: str, media_type: str) -> tuple[bytes, str]:
    """A google.rpc.Status in the request's encoding (JSON when the encoding is unknown)."""
    if media_type == PROTOBUF:
        from google.rpc import status_pb2

        return status_pb2.Status(message=message).SerializeToString(), PROTOBUF
    import json

    return json.dumps({"message": message}).encode(), JSON


def _error(status: int, message: str, media_type: str, headers: dict[str, str] | None = None) -> Response:
    body, content_type = _status_body(message, media_type)
    return Response(body, status_code=status, media_type=content_type, headers=headers)


def _success_body(rejected: int, error_message: str, media_type: str) -> tuple[bytes, str]:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or error_message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = error_message
    if media_type == PROTOBUF:
        return response.SerializeToString(), PROTOBUF
    from google.protobuf import json_format

    return json_format.MessageToJson(response, indent=None).encode(), JSON


def _refuse_declared_over(request: Request, limit: int) -> None:
    """BodyTooLarge before reading when the declared length is over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes is over the limit of {limit} bytes")


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refusing early when it is over ``limit`` bytes on the wire."""
    _refuse_declared_over(request, limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _discard_body(request: Request, limit: int) -> None:
    """Read and drop the body (up to ``limit`` bytes) before refusing a request: answering with the
    body unread closes the connection over unread bytes, and the client gets a broken pipe or a
    reset instead of our status (and Retry-After)."""
    size = 0
    while size <= limit:  # request.receive, not request.stream: the stream may be partly read already
        message = await request.receive()
        if message["type"] != "http.request":
            return  # the client disconnected
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _read_within(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body within ``timeout_s``: a client trickling bytes cannot hold a reading slot longer."""
    return await asyncio.wait_for(_read_body(request, limit), timeout_s)


# A first chunk at least this large (a socket read's worth) shows a client sending in bulk.
BULK_CHUNK_BYTES = 16 * 1024


async def _read_at_once(request: Request, limit: int, within_s: float) -> bytes | None:
    """The body if it arrives at once, else None: its first chunk within ``within_s``, and either
    the whole body or a bulk chunk. A trickling client's first chunk is a few bytes, so it is
    refused on sight instead of holding an express slot for ``within_s``."""
    _refuse_declared_over(request, limit)
    deadline = asyncio.get_running_loop().time() + within_s
    message = await asyncio.wait_for(request.receive(), within_s)
    if message["type"] != "http.request":
        raise ClientDisconnect()
    chunks = [message.get("body", b"")]
    more = message.get("more_body", False)
    if more and len(chunks[0]) < BULK_CHUNK_BYTES:
        return None
    size = len(chunks[0])
    while more:
        left = deadline - asyncio.get_running_loop().time()
        message = await asyncio.wait_for(request.receive(), max(left, 0.0))
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:
            raise BodyTooLarge(f"request body is over the limit of {limit} bytes")
        more = message.get("more_body", False)
    return b"".join(chunks)


def otlp_app(
    ingest: Callable[[bytes, str, str | None], object],
    metrics,
    *,
    max_body_bytes: Callable[[], int],
    bearer_token: str = "",
    max_concurrent: int = 8,
    max_reading: int = 64,
    read_timeout_s: float = 10.0,
    ready: Callable[[], bool | tuple[bool, dict]] = lambda: True,
    client_of: Callable[[Request], str] = lambda r: r.client.host if r.client else "unknown",
    lifespan=None,
) -> Starlette:
    """The OTLP/HTTP receiver.

    Two bounded stages: up to ``max_reading`` bodies are read at once, each within
    ``read_timeout_s`` (memory stays bounded, and a slow client only ever holds a reading slot),
    with a share per client (``client_of``: the address, or the forwarded one behind a trusted
    proxy) and express slots for bodies that arrive at once (``admission.py``); once a body is in memory, up to ``max_concurrent``
    requests are processed (``ingest`` in the thread pool). Either stage full: 503 + Retry-After,
    which exporters retry.
    """
    reading = ReadingSlots(max_reading)
    in_flight = asyncio.Semaphore(max_concurrent)
    expected_auth = f"Bearer {bearer_token}".encode() if bearer_token else b""

    def saturated(media_type: str) -> Response:
        metrics.ingest_errors.labels("saturated").inc()
        return _error(503, "agent saturated, retry later", media_type, {"Retry-After": RETRY_AFTER_S})

    async def traces(request: Request) -> Response:
        media_type = _media_type(request)
        if expected_auth and not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected_auth):
            metrics.ingest_errors.labels("unauthorized").inc()
            return _error(401, "missing or wrong bearer token", media_type, {"WWW-Authenticate": "Bearer"})
        limit = max_body_bytes()
        client = client_of(request)
        slot = reading.acquire(client)
        if slot is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_discard_body(request, limit), read_timeout_s)
            return saturated(media_type)
        started = asyncio.get_running_loop().time()
        body = None
        try:
            if slot == EXPRESS:
                body = await _read_at_once(request, limit, reading.express_s)
            else:
                body = await _read_within(request, limit, read_timeout_s)
        except asyncio.TimeoutError:
            pass
        except BodyTooLarge as exc:
            metrics.ingest_errors.labels("too_large").inc()
            return _error(413, str(exc), media_type)
        except ClientDisconnect:
            metrics.ingest_errors.labels("client_disconnected").inc()
            log.info("OTLP client %s disconnected before sending its whole body", _peer(request))
            return Response(status_code=400)  # nobody is left to read it
        finally:
            reading.release(client, slot)
        if body is None and slot == EXPRESS:  # not a body that arrives at once: refused as by a full pool
            metrics.ingest_errors.labels("slow_client_refused").inc()
            with contextlib.suppress(asyncio.TimeoutError):  # its connection, not a slot, waits out the deadline
                left = read_timeout_s - (asyncio.get_running_loop().time() - started)
                await asyncio.wait_for(_discard_body(request, limit), max(left, 0.0))
            return saturated(media_type)
        if body is None:
            metrics.ingest_errors.labels("read_timeout").inc()
            log.info("OTLP request body from %s not received within %.0f s: 408", _peer(request), read_timeout_s)
            return _error(408, f"request body not received within {read_timeout_s:g} s", media_type)
        if in_flight.locked():
            return saturated(media_type)  # the body is read: the exporter gets our status, not a reset
        async with in_flight:
            try:
                result = await run_in_threadpool(ingest, body, media_type, request.headers.get("content-encoding"))
            except UnsupportedMediaType as exc:
                metrics.ingest_errors.labels("unsupported_media_type").inc()
                return _error(415, str(exc), media_type)
            except BodyTooLarge as exc:
                metrics.ingest_errors.labels("too_large").inc()
                return _error(413, str(exc), media_type)
            except OTLPDecodeError as exc:
                metrics.ingest_errors.labels("malformed").inc()
                return _error(400, str(exc), media_type)
            except StoreUnavailable as exc:
                metrics.ingest_errors.labels("store_unavailable").inc()
                log.warning("store unavailable, answering 503: %s", exc)
                return _error(503, f"store unavailable: {exc}", media_type, {"Retry-After": RETRY_AFTER_S})
        body, content_type = _success_body(result.rejected_spans, result.error_message, media_type)
        return Response(body, status_code=200, media_type=content_type)

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"]), *health_routes(ready)], lifespan=lifespan)


BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


def require_length(app):
    """ASGI wrapper: a request that may carry a body but says neither its length nor chunked gets
    411 (an HTTP/1.0 client that means "until I close" would otherwise be read as empty)."""

    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope["method"].encode() in BODY_METHODS:
            names = {name for name, _ in scope["headers"]}
            if b"content-length" not in names and b"transfer-encoding" not in names:
                body = b'{"message": "Content-Length required"}'
                await send({"type": "http.response.start", "status": 411, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def answering_half_closed(protocol: type) -> type:
    """``protocol`` (uvicorn's HTTP protocol class) answering a client that half-closes after a whole
    request, as HTTP/1.0 clients may: uvicorn closes on the client's FIN and the answer is lost."""

    class AnswersHalfClosed(protocol):
        def eof_received(self):
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                return True  # the request is whole: keep our half of the connection open to answer
            return super().eof_received()

    return AnswersHalfClosed


def _peer(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "unknown"


def health_routes(ready: Callable[[], bool | tuple[bool, dict]]) -> list[Route]:
    """``ready`` answers a bool, or (ready, body): the agent's components and their health, as JSON."""

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        answer = await run_in_threadpool(ready)
        if isinstance(answer, bool):
            return PlainTextResponse("ready" if answer else "not ready", status_code=200 if answer else 503)
        ok, body = answer
        return JSONResponse(body, status_code=200 if ok else 503)

    return [Route("/healthz", healthz), Route("/readyz", readyz)]


def metrics_routes(registry, before_scrape: Callable[[], None] = lambda: None) -> list[Route]:
    async def metrics_endpoint(_: Request) -> Response:
        await run_in_threadpool(before_scrape)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return [Route("/metrics", metrics_endpoint)]


def check_listen_address(host: str, port: int, setting: str) -> None:
    """ValueError in one line when ``host:port`` cannot be bound (in use, or not this machine's),
    before the servers try and fail with uvicorn's tracebacks. Port 0 (any free port) passes."""
    import socket

    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ValueError(f"cannot listen on {host}:{port} ({setting}): {exc.strerror or exc}; "
                             f"stop what uses it or choose another port") from None
