"""SDK overhead against the raw OpenTelemetry SDK, in one process.

(a) raw OTel creating the same 7 spans (root + six stages) with the same attributes, and
(b) the SDK's six-stage traced query, both exporting to a discarding exporter through the
same kind of processor (synchronous: OTel's SimpleSpanProcessor / the SDK's batch=False;
batched: OTel's BatchSpanProcessor / the SDK's bounded batch processor). Budget: b/a <= 1.5.
(c) a disabled SDK's six-stage query against an empty function.
(d) p50/p99 latency of a simulated ~1.5 ms request with the exporter pointed at a closed
port, against the same request untraced (should be ~1.0) and traced to a working sink (the
difference is then the agent being down alone).

Repetitions are interleaved and medians taken. Writes benchmarks/results/sdk_overhead.json.

    .venv/bin/python benchmarks/sdk_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rag_monitor  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sdk_overhead.json"

QUERY = "How do I cancel my annual subscription and get a refund?"
ANSWER = "Cancel under Settings > Billing; annual plans are refunded pro rata."
DOCS = [
    {
        "id": f"doc-{i}",
        "content": f"Document {i}: billing and cancellation policy text, paragraph {i}. " * 4,
        "score": 0.9 - i * 0.05,
        "metadata": {"locale": "en-US", "version": i},
    }
    for i in range(8)
]
TOP = DOCS[:3]


class DiscardingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


# --- (a) raw OpenTelemetry --------------------------------------------------------------


def _raw_doc_attrs(prefix: str, docs: list[dict]) -> dict:
    attrs = {}
    for i, d in enumerate(docs):
        p = f"{prefix}.{i}."
        attrs[p + "document.id"] = d["id"]
        attrs[p + "document.content"] = d["content"]
        attrs[p + "document.score"] = d["score"]
        attrs[p + "document.metadata"] = json.dumps(d["metadata"])
    return attrs


def raw_query(tracer) -> None:
    root = tracer.start_span(
        "rag.query",
        attributes={
            "openinference.span.kind": "CHAIN",
            "rag.variant": "production",
            "input.value": QUERY,
            "rag.release": "2026.11.30",
            "session.id": "s1",
            "user.id": "u1",
            "rag.tenant": "acme",
        },
    )
    ctx = trace.set_span_in_context(root)
    span = tracer.start_span(
        "rewrite", context=ctx, attributes={"openinference.span.kind": "CHAIN", "rag.stage": "rewrite"}
    )
    span.end()
    span = tracer.start_span(
        "filter",
        context=ctx,
        attributes={
            "openinference.span.kind": "CHAIN",
            "rag.stage": "filter",
            "rag.filter.kind": "relevance",
            "rag.filter.predicate": "locale = 'en-US'",
            "rag.filter.candidates_in": 40,
            "rag.filter.candidates_out": 12,
            "rag.filter.excluded_ids": ("doc-9",),
        },
    )
    span.end()
    span = tracer.start_span(
        "retrieve", context=ctx, attributes={"openinference.span.kind": "RETRIEVER", "rag.stage": "retrieve"}
    )
    span.set_attributes(_raw_doc_attrs("retrieval.documents", DOCS))
    span.end()
    span = tracer.start_span(
        "rerank",
        context=ctx,
        attributes={
            "openinference.span.kind": "RERANKER",
            "rag.stage": "rerank",
            "reranker.model_name": "bge-reranker-v2-m3",
            "reranker.top_k": 3,
        },
    )
    span.set_attributes(_raw_doc_attrs("reranker.output_documents", TOP))
    span.end()
    span = tracer.start_span(
        "context",
        context=ctx,
        attributes={
            "openinference.span.kind": "CHAIN",
            "rag.stage": "context",
            "rag.context.document_ids": ("doc-0", "doc-1", "doc-2"),
        },
    )
    span.end()
    span = tracer.start_span(
        "generate",
        context=ctx,
        attributes={
            "openinference.span.kind": "LLM",
            "rag.stage": "generate",
            "gen_ai.operation.name": "chat",
            "llm.model_name": "gpt-x",
            "gen_ai.request.model": "gpt-x",
        },
    )
    span.set_attributes(
        {
            "llm.token_count.prompt": 812,
            "gen_ai.usage.input_tokens": 812,
            "llm.token_count.completion": 64,
            "gen_ai.usage.output_tokens": 64,
            "llm.token_count.total": 876,
        }
    )
    span.end()
    root.set_attributes(
        {
            "rag.answer.refused": False,
            "output.value": ANSWER,
            "rag.citations": ("doc-0",),
            "rag.answer.confidence": 0.82,
        }
    )
    root.end()


def raw_tracer(batched: bool):
    provider = TracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource.create({"service.name": "bench", "service.version": "2026.11.30"}),
        span_limits=SpanLimits(max_span_attributes=4096, max_attribute_length=None),
        shutdown_on_exit=False,
    )
    exporter = DiscardingExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter) if batched else SimpleSpanProcessor(exporter))
    return provider, provider.get_tracer("raw")


# --- (b) the SDK ------------------------------------------------------------------------


def sdk_query(monitor) -> None:
    with monitor.query(QUERY, session_id="s1", user_id="u1", tenant="acme") as q:
        with q.stage("rewrite"):
            pass
        q.filter(
            kind="relevance", predicate="locale = 'en-US'", candidates_in=40, candidates_out=12, excluded_ids=["doc-9"]
        )
        with q.retrieve() as r:
            r.documents(DOCS)
        with q.rerank(model="bge-reranker-v2-m3", top_k=3) as rr:
            rr.documents(TOP)
        q.context(document_ids=["doc-0", "doc-1", "doc-2"])
        with q.generate(model="gpt-x") as g:
            g.tokens(prompt=812, completion=64)
        q.answer(ANSWER, citations=["doc-0"], confidence=0.82)


def empty(monitor) -> None:
    pass


def per_call_ns(fn, arg, n: int) -> float:
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(arg)
        return (time.perf_counter_ns() - t0) / n
    finally:
        gc.enable()


def interleaved(cases: dict, n: int, reps: int) -> dict[str, float]:
    """Median ns per call of each case, repetitions interleaved (a, b, a, b, ...)."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for fn, arg in cases.values():
        per_call_ns(fn, arg, max(50, n // 10))  # warm-up
    for _ in range(reps):
        for name, (fn, arg) in cases.items():
            samples[name].append(per_call_ns(fn, arg, n))
    return {name: statistics.median(values) for name, values in samples.items()}


def traced_overhead(n: int, reps: int) -> dict:
    out = {}
    for batched in (False, True):
        provider, tracer = raw_tracer(batched)
        monitor = rag_monitor.init(
            service_name="bench", release="2026.11.30", span_exporter=DiscardingExporter(), batch=batched, enabled=True
        )
        medians = interleaved({"raw_otel": (raw_query, tracer), "sdk": (sdk_query, monitor)}, n, reps)
        monitor.shutdown()
        provider.shutdown()
        mode = "batched" if batched else "synchronous"
        out[mode] = {
            "raw_otel_us_per_query": medians["raw_otel"] / 1e3,
            "sdk_us_per_query": medians["sdk"] / 1e3,
            "ratio_sdk_over_raw": medians["sdk"] / medians["raw_otel"],
            "dropped": monitor.stats().dropped,
        }
    return out


def disabled_overhead(n: int, reps: int) -> dict:
    disabled = rag_monitor.init(service_name="bench", enabled=False)
    medians = interleaved({"empty": (empty, disabled), "disabled": (sdk_query, disabled)}, n, reps)
    return {
        "empty_function_ns": medians["empty"],
        "disabled_query_ns": medians["disabled"],
        "disabled_minus_empty_ns": medians["disabled"] - medians["empty"],
        "ratio_disabled_over_empty": medians["disabled"] / medians["empty"],
    }


# --- (d) the agent is down --------------------------------------------------------------


def simulated_request(monitor, work_s: float = 0.0015) -> None:
    """~1.5 ms of app work (half waiting on I/O, half CPU), traced by ``monitor`` if given."""
    deadline = time.perf_counter() + work_s / 2
    if monitor is None:
        time.sleep(work_s / 2)
        while time.perf_counter() < deadline + work_s / 2:
            pass
        return
    with monitor.query(QUERY, session_id="s1") as q:
        with q.retrieve() as r:
            time.sleep(work_s / 2)
            r.documents(DOCS)
        with q.generate(model="gpt-x") as g:
            while time.perf_counter() < deadline + work_s / 2:
                pass
            g.tokens(prompt=812, completion=64)
        q.answer(ANSWER)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when this returns: nothing listens there


# A minimal OTLP/HTTP sink in its own process (so it takes no GIL from the measured app).
_RECEIVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def agent_down_latency(requests: int, block: int) -> dict:
    """p50/p99 of the simulated request: untraced, traced to a live agent, traced to a closed port.

    Both traced arms run the real OTLP/HTTP exporter (protobuf encoding included), so the
    agent-down/agent-up ratio isolates the agent being down.
    """
    receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        return _agent_down_latency(requests, block, int(receiver.stdout.readline()))
    finally:
        receiver.terminate()
        receiver.wait(10)


def _agent_down_latency(requests: int, block: int, receiver_port: int) -> dict:
    down = rag_monitor.init(service_name="bench", endpoint=f"http://127.0.0.1:{closed_port()}", enabled=True)
    up = rag_monitor.init(service_name="bench", endpoint=f"http://127.0.0.1:{receiver_port}", enabled=True)
    arms = {"untraced": None, "agent_up": up, "agent_down": down}
    latencies: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(requests // block):
        for name, arg in arms.items():
            for _ in range(block):
                t0 = time.perf_counter()
                simulated_request(arg)
                latencies[name].append(time.perf_counter() - t0)
    down.force_flush(timeout_s=5)
    up.force_flush(timeout_s=5)
    stats, up_stats = down.stats(), up.stats()
    down.shutdown(timeout_s=1)
    up.shutdown(timeout_s=1)

    def pct(name: str, q: int) -> float:
        return statistics.quantiles(latencies[name], n=100)[q - 1] * 1e3

    out: dict = {"requests_per_arm": len(latencies["untraced"]), "work_ms": 1.5}
    for name in arms:
        out[f"{name}_p50_ms"] = pct(name, 50)
        out[f"{name}_p99_ms"] = pct(name, 99)
    out["ratio_p99_agent_down_over_untraced"] = pct("agent_down", 99) / pct("untraced", 99)
    out["ratio_p50_agent_down_over_untraced"] = pct("agent_down", 50) / pct("untraced", 50)
    out["ratio_p99_agent_down_over_agent_up"] = pct("agent_down", 99) / pct("agent_up", 99)
    out["ratio_p50_agent_down_over_agent_up"] = pct("agent_down", 50) / pct("agent_up", 50)
    out["agent_down_spans"] = {"failed": stats.failed, "dropped": stats.dropped, "exported": stats.exported}
    out["agent_up_spans"] = {"failed": up_stats.failed, "dropped": up_stats.dropped, "exported": up_stats.exported}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    n, reps = (300, 3) if args.quick else (1500, 9)
    result = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "queries_per_repetition": n,
        "repetitions": reps,
        "spans_per_query": 7,
        "documents_retrieved": len(DOCS),
        "traced": traced_overhead(n, reps),
        "disabled": disabled_overhead(n * 10, reps),
        "agent_down": agent_down_latency(400 if args.quick else 2000, 100),
    }
    result["budget_ratio"] = 1.5
    result["within_budget"] = all(m["ratio_sdk_over_raw"] <= 1.5 for m in result["traced"].values())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
