"""Streaming, asyncio and thread fan-out, the way apps answer: nothing lost silently.

The Starlette app is the FastAPI pattern (FastAPI's ``StreamingResponse`` is Starlette's): the
query block lives in the handler, the answer is streamed by the response body after it returns.
"""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.trace import StatusCode
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

import rag_monitor.sdk as sdk
from rag_monitor import semconv
from tests.sdk.conftest import spans_by_name

CHUNKS = ["Cancel under ", "Settings > Billing", "."]


def _app(monitor, wrap: bool, sync: bool = False) -> Starlette:
    async def ask(request):
        with monitor.query("How do I cancel?") as q:
            with q.retrieve() as r:
                r.documents([{"id": "doc-1", "content": "Cancel under Settings > Billing."}])
            g = q.generate(model="gpt-x")

            async def tokens():
                for chunk in CHUNKS:
                    await asyncio.sleep(0.02)
                    yield chunk
                g.tokens(prompt=120, completion=9)  # the provider's usage chunk, after the last token

            def sync_tokens():
                yield from CHUNKS
                g.tokens(prompt=120, completion=9)

            body = sync_tokens() if sync else tokens()
            return StreamingResponse(q.stream(body, generate=g) if wrap else body, media_type="text/plain")

    return Starlette(routes=[Route("/ask", ask)])


@pytest.mark.parametrize("sync", [False, True], ids=["async-generator", "sync-generator"])
def test_a_streamed_answer_is_recorded_whole_after_the_handler_returns(monitor, exporter, sync):
    with TestClient(_app(monitor, wrap=True, sync=sync)) as client:
        assert client.get("/ask").text == "".join(CHUNKS)
    spans = spans_by_name(exporter.get_finished_spans())
    root, generate = spans[semconv.RAG_QUERY_SPAN_NAME], spans["generate"]
    assert root.attributes[semconv.OUTPUT_VALUE] == "".join(CHUNKS)
    assert generate.attributes[semconv.LLM_TOKEN_COUNT_COMPLETION] == 9  # priced: not 0
    ttft, stage_ttft = (generate.attributes[k] for k in (semconv.RAG_TIME_TO_FIRST_TOKEN, semconv.RAG_STAGE_TIME_TO_FIRST_TOKEN))
    assert 0 < stage_ttft <= ttft <= (generate.end_time - root.start_time) / 1e9
    # The query lasts as long as the stream: its generate stage (the stream) ends inside it.
    assert root.start_time <= generate.start_time <= generate.end_time <= root.end_time
    if not sync:
        assert (root.end_time - root.start_time) / 1e9 >= 0.06
    assert root.status.status_code is StatusCode.UNSET and semconv.RAG_CANCEL_REASON not in root.attributes
    assert monitor.stats().late_writes == 0


def test_without_the_wrapper_the_lost_writes_are_counted_and_logged(monitor, exporter, caplog):
    before = monitor.stats().late_writes
    with caplog.at_level("WARNING", logger="rag_monitor"), TestClient(_app(monitor, wrap=False)) as client:
        assert client.get("/ask").text == "".join(CHUNKS)
    spans = spans_by_name(exporter.get_finished_spans())
    assert semconv.LLM_TOKEN_COUNT_COMPLETION not in spans["generate"].attributes  # what the issue saw
    assert monitor.stats().late_writes == before + 1  # the tokens, set after the generate stage ended
    assert any("q.stream(" in r.getMessage() for r in caplog.records)


def test_a_client_that_goes_away_mid_stream_reads_client_disconnect(monitor, exporter):
    async def run() -> None:
        app = _app(monitor, wrap=True)
        sent: list[bytes] = []

        async def receive():
            await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.body" and message.get("body"):
                if sent:
                    raise OSError("connection reset by peer")  # ASGI 2.4: the server says the client left
                sent.append(message["body"])

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "GET", "path": "/ask",
                 "raw_path": b"/ask", "query_string": b"", "headers": [], "scheme": "http", "server": ("t", 80),
                 "root_path": "", "http_version": "1.1", "client": ("c", 1)}
        with pytest.raises(Exception):
            await app(scope, receive, send)
        assert sent == [b"Cancel under "]

    asyncio.run(run())
    gc.collect()  # the server drops the body iterator
    root = spans_by_name(exporter.get_finished_spans())[semconv.RAG_QUERY_SPAN_NAME]
    assert root.attributes[semconv.RAG_CANCEL_REASON] == "client_disconnect"
    assert root.status.status_code is StatusCode.ERROR and "client_disconnect" in root.status.description
    assert root.attributes[semconv.OUTPUT_VALUE].startswith("Cancel under ")  # what the user saw


def test_timeout_and_cancel_are_told_apart(monitor, exporter):
    async def slow(q):
        async with asyncio.timeout(0.01):
            await asyncio.sleep(1)

    async def run() -> None:
        with pytest.raises(TimeoutError):
            async with monitor.query("timeout") as q:
                await slow(q)

        async def cancelled():
            async with monitor.query("cancelled"):
                await asyncio.sleep(10)

        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with monitor.query("told") as q:
            q.cancel("client_disconnect")

    asyncio.run(run())
    reasons = {s.attributes[semconv.INPUT_VALUE]: s.attributes.get(semconv.RAG_CANCEL_REASON)
               for s in exporter.get_finished_spans() if s.name == semconv.RAG_QUERY_SPAN_NAME}
    assert reasons == {"timeout": "timeout", "cancelled": "cancelled", "told": "client_disconnect"}


def test_current_query_follows_work_into_a_thread_pool_with_submit(monitor, exporter):
    def fetch(source: str) -> str:
        with sdk.current_query().retrieve(data_source=source) as r:
            r.documents([{"id": f"{source}-1", "content": "..."}])
        return sdk.current_query().trace_id

    with ThreadPoolExecutor(2) as pool, monitor.query("fan out") as q:
        plain = pool.submit(fetch, "kb").result()  # the pool's thread has no query: nothing recorded
        followed = [f.result() for f in [sdk.submit(pool, fetch, "kb"), sdk.submit(pool, fetch, "web")]]
        mapped = list(pool.map(sdk.bind(fetch), ["docs"]))
    assert plain == "0" * 32 and followed == [q.trace_id] * 2 and mapped == [q.trace_id]
    sources = sorted(s.attributes[semconv.GEN_AI_DATA_SOURCE_ID] for s in exporter.get_finished_spans() if s.name == "retrieve")
    assert sources == ["docs", "kb", "web"]


def test_asyncio_tasks_inherit_the_query(monitor, exporter):
    async def part(name: str) -> None:
        sdk.current_query().stage(name)

    async def run() -> None:
        async with monitor.query("gather") as q:
            await asyncio.gather(part("a"), part("b"), asyncio.to_thread(lambda: sdk.current_query().stage("c")))
            return q.trace_id

    trace_id = asyncio.run(run())
    spans = spans_by_name(exporter.get_finished_spans())
    assert {"a", "b", "c"} <= set(spans) and all(f"{spans[n].context.trace_id:032x}" == trace_id for n in "abc")
