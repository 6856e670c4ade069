"""Agent ingest throughput against bare OTLP parsing, in one process.

Payload: 200 SDK-shaped traces of 8 spans (root, rewrite, embed, filter, retrieve with 5
documents of ~500 characters, rerank, context, generate), encoded as protobuf by the OTel
exporter's own encoder, in batches of 50 traces.

- baseline: ``ExportTraceServiceRequest.ParseFromString`` and every span's attributes read
  into a Python dict (the simplest straightforward loop);
- ours: ``decode_export_request`` + ``Redactor.redact_spans`` on every span +
  ``TraceAssembler.add`` (which builds the QueryRecords from the redacted spans).

Interleaved repeats, medians; writes benchmarks/results/ingest_decode.json. DESIGN.md's budget
is >= 25% of the baseline for the whole agent, so this part should be well above 50%.

    .venv/bin/python benchmarks/ingest_decode.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from rag_monitor import semconv as sc  # noqa: E402
from rag_monitor.collectors import IngestLimits, Redactor, TraceAssembler, decode_export_request  # noqa: E402
from rag_monitor.config_files import shipped_path  # noqa: E402

TRACES, BATCH = 200, 50
WORDS = ("the billing settings page lets customers cancel plans refunds arrive within 5 business days after approval "
         "since 2024 at 49.99 per month or 14 days via sign-in and e-mail").split()


def build_payloads(seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench", "service.version": "r1"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")

    def text(n: int) -> str:
        out = []
        while sum(len(w) + 1 for w in out) < n:
            out.append(rng.choice(WORDS))
        return " ".join(out)

    for q in range(TRACES):
        with tracer.start_as_current_span(sc.RAG_QUERY_SPAN_NAME) as root:
            root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: "CHAIN", sc.INPUT_VALUE: text(60), sc.SESSION_ID: f"s{q % 17}",
                                 sc.USER_ID: f"u{q % 31}", sc.RAG_RELEASE: "r1", sc.RAG_VARIANT: "production"})
            with tracer.start_as_current_span("rewrite") as s:
                s.set_attributes({sc.RAG_STAGE: "rewrite", sc.OUTPUT_VALUE: text(60)})
            with tracer.start_as_current_span("embed") as s:
                s.set_attributes({sc.RAG_STAGE: "embed", sc.EMBEDDING_MODEL_NAME: "minilm",
                                  "embedding.embeddings.0.embedding.vector": [rng.random() for _ in range(384)]})
            with tracer.start_as_current_span("filter") as s:
                s.set_attributes({sc.RAG_STAGE: "filter", sc.RAG_FILTER_KIND: "relevance", sc.RAG_FILTER_PREDICATE: "locale = 'en'",
                                  sc.RAG_FILTER_CANDIDATES_IN: 40, sc.RAG_FILTER_CANDIDATES_OUT: 12})
            docs = [(f"doc-{rng.randrange(10_000)}", text(500), rng.random()) for _ in range(5)]
            with tracer.start_as_current_span("retrieve") as s:
                s.set_attribute(sc.RAG_STAGE, "retrieve")
                for i, (doc_id, content, score) in enumerate(docs):
                    s.set_attributes({f"retrieval.documents.{i}.document.id": doc_id, f"retrieval.documents.{i}.document.content": content,
                                      f"retrieval.documents.{i}.document.score": score})
            with tracer.start_as_current_span("rerank") as s:
                s.set_attribute(sc.RAG_STAGE, "rerank")
                for i, (doc_id, content, score) in enumerate(docs[:3]):
                    s.set_attributes({f"reranker.output_documents.{i}.document.id": doc_id, f"reranker.output_documents.{i}.document.content": content,
                                      f"reranker.output_documents.{i}.document.score": score})
            with tracer.start_as_current_span("context") as s:
                s.set_attributes({sc.RAG_STAGE: "context", sc.RAG_CONTEXT_DOCUMENT_IDS: [d[0] for d in docs[:3]]})
            with tracer.start_as_current_span("generate") as s:
                s.set_attributes({sc.RAG_STAGE: "generate", sc.LLM_MODEL_NAME: "gpt-4o-mini", sc.LLM_TOKEN_COUNT_PROMPT: 800,
                                  sc.LLM_TOKEN_COUNT_COMPLETION: 60})
            root.set_attribute(sc.OUTPUT_VALUE, text(300))
    spans = exporter.get_finished_spans()
    per_batch = len(spans) // (TRACES // BATCH)
    return [encode_spans(spans[i : i + per_batch]).SerializeToString() for i in range(0, len(spans), per_batch)]


def _any(value):
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_any(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def baseline(payloads: list[bytes]) -> int:
    count = 0
    for body in payloads:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attrs = {kv.key: _any(kv.value) for kv in span.attributes}
                    count += len(attrs) > 0
    return count


def ours(payloads: list[bytes], limits: IngestLimits, redactor: Redactor) -> int:
    assembler = TraceAssembler.from_limits(limits)
    count = records = 0
    for body in payloads:
        result = decode_export_request(body, "application/x-protobuf", limits=limits)
        redactor.redact_spans(result.spans)  # as the pipeline does: shared resources once
        out = assembler.add(result.spans)
        # Records are built from redacted spans, so they need no second redaction pass.
        count += len(result.spans)
        records += len(out.records)
    if records != TRACES:
        raise RuntimeError(f"assembled {records} records, expected {TRACES}")
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    payloads = build_payloads()
    # The configuration the agent ships with: built-in kinds plus the operator rules in the YAML.
    limits, redactor = IngestLimits.load(shipped_path("ingest_config")), Redactor.load(shipped_path("redaction_rules"))
    spans = baseline(payloads)
    ours(payloads, limits, redactor)  # warm-up
    base_times, our_times = [], []
    for _ in range(args.repeats):  # interleaved so drift in machine load hits both alike
        t = time.perf_counter(); baseline(payloads); base_times.append(time.perf_counter() - t)
        t = time.perf_counter(); ours(payloads, limits, redactor); our_times.append(time.perf_counter() - t)
    base, mine = statistics.median(base_times), statistics.median(our_times)
    # Also the median of paired ratios: robust to load on a shared machine changing between pairs.
    paired = statistics.median(b / o for b, o in zip(base_times, our_times))
    result = {
        "traces": TRACES,
        "spans": spans,
        "payload_bytes": sum(map(len, payloads)),
        "repeats": args.repeats,
        "baseline_spans_per_s": spans / base,
        "ingest_spans_per_s": spans / mine,
        "ratio": base / mine,
        "paired_ratio_median": paired,
        "target_ratio": 0.5,
        "whole_agent_budget_ratio": 0.25,
        "what": "ingest = decode_export_request + redact_spans (every span) + TraceAssembler.add (records built); baseline = protobuf parse + attributes into dicts",
    }
    out = Path(__file__).resolve().parent / "results" / "ingest_decode.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
