"""Concurrent queries never leak stages into each other's traces."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

from rag_monitor import semconv

N_QUERIES = 20


def check_traces(spans, expected_stage_names):
    by_trace = defaultdict(list)
    for span in spans:
        by_trace[span.context.trace_id].append(span)
    assert len(by_trace) == N_QUERIES
    for trace_spans in by_trace.values():
        root = next(s for s in trace_spans if s.name == semconv.RAG_QUERY_SPAN_NAME)
        query_number = root.attributes[semconv.INPUT_VALUE]
        stages = [s for s in trace_spans if s is not root]
        assert sorted(s.name for s in stages) == sorted(expected_stage_names)
        for stage in stages:
            assert stage.parent.span_id == root.context.span_id
            # Each stage carries its own query's number: nothing crossed over.
            assert stage.attributes[semconv.INPUT_VALUE] == query_number


def test_threads(monitor, exporter):
    barrier = threading.Barrier(N_QUERIES)

    def one_query(n: int) -> None:
        with monitor.query(str(n)) as q:
            barrier.wait()  # every query is open at once
            with q.stage("rewrite") as s:
                s.input(str(n))
                barrier.wait()
            with q.retrieve() as r:
                r.input(str(n))
                r.documents([{"id": f"doc-{n}"}])

    threads = [threading.Thread(target=one_query, args=(n,)) for n in range(N_QUERIES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_traces(exporter.get_finished_spans(), ["rewrite", "retrieve"])


async def test_asyncio_tasks(monitor, exporter):
    all_open = asyncio.Event()
    opened = 0

    async def one_query(n: int) -> None:
        nonlocal opened
        async with monitor.query(str(n)) as q:
            opened += 1
            if opened == N_QUERIES:
                all_open.set()
            await all_open.wait()
            async with q.stage("rewrite") as s:
                s.input(str(n))
                await asyncio.sleep(0)
            async with q.generate(model="m") as g:
                g.input(str(n))
                await asyncio.sleep(0)
                assert monitor.current_query() is q

    await asyncio.gather(*(one_query(n) for n in range(N_QUERIES)))
    check_traces(exporter.get_finished_spans(), ["rewrite", "generate"])
