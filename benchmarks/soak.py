"""In-process soak: the whole agent ingest path under a long stream of spans, memory sampled.

Feeds ``IngestPipeline.ingest`` (decode, redact, assemble, SQLite recent records and review
queue, metrics, drift feed offer) with rounds of benchmarks/ingest_decode.py's payloads (200
SDK-shaped traces of 8 spans, fresh trace ids every round) until ``--spans`` spans or
``--max-s`` seconds, whichever comes first, and records the agent process's RSS every
``--sample-every`` rounds. Bounded memory shows as a flat RSS once the bounded in-memory
structures (the list of recently completed trace ids, label children) have filled.

    .venv/bin/python benchmarks/soak.py [--spans 1000000] [--max-s 900]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest_decode import build_payloads  # noqa: E402

from rag_monitor.agent.service import Agent  # noqa: E402
from rag_monitor.settings import load_settings  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "soak.json"
SPANS_PER_ROUND, TRACES_PER_ROUND = 1600, 200


def with_fresh_trace_ids(bodies: list[bytes], round_no: int) -> list[bytes]:
    """The same payloads with new trace ids: the high 64 bits carry the round number (the low
    64 bits, from which the SDK derives root span ids, are kept so parent links still hold)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    prefix = round_no.to_bytes(8, "big")
    out = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = prefix + span.trace_id[8:]
        out.append(request.SerializeToString())
    return out


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="stop after this many spans")
    parser.add_argument("--max-s", type=float, default=900.0, help="stop after this many seconds, whatever the count")
    parser.add_argument("--sample-every", type=int, default=10, help="rounds of 1,600 spans between RSS samples")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    pool = [build_payloads(seed=10_000 + i) for i in range(4)]
    samples = []
    spans = rounds = 0
    with tempfile.TemporaryDirectory() as data_dir:
        agent = Agent(load_settings(overrides={"data_dir": data_dir, "detector_profiles": "", "hhem_model_path": ""},
                                    environ={}))
        agent.open()
        completed_memory = agent.pipeline.assembler.completed_trace_memory
        start_rss, t0 = rss_mb(), time.perf_counter()
        samples.append({"spans": 0, "rss_mb": round(start_rss, 1), "elapsed_s": 0.0})
        while spans < args.spans and time.perf_counter() - t0 < args.max_s:
            for body in with_fresh_trace_ids(pool[rounds % len(pool)], rounds + 1):
                spans += agent.pipeline.ingest(body, "application/x-protobuf").accepted_spans
            rounds += 1
            agent.settle(60)  # the sinks keep up, as a running agent's do between requests
            agent.regeneration.tick()  # the regeneration job's check, as the running agent does
            if rounds % args.sample_every == 0:
                samples.append({"spans": spans, "rss_mb": round(rss_mb(), 1),
                                "elapsed_s": round(time.perf_counter() - t0, 1)})
        elapsed = time.perf_counter() - t0
        records = agent.store.recent.count()
        agent.close()

    # After the completed-trace list has filled, memory must stay flat: report that stretch apart.
    filled_at = completed_memory * SPANS_PER_ROUND // TRACES_PER_ROUND
    steady = [s["rss_mb"] for s in samples if s["spans"] >= filled_at] or [samples[-1]["rss_mb"]]
    result = {
        "script": "benchmarks/soak.py",
        "what": "in-process IngestPipeline.ingest of ingest_decode.py payloads (SQLite store, no drift, lexical scorer), "
                "RSS of this process sampled every --sample-every rounds",
        "spans": spans,
        "traces": rounds * TRACES_PER_ROUND,
        "elapsed_s": round(elapsed, 1),
        "spans_per_s": round(spans / elapsed, 1),
        "limits": {"spans": args.spans, "max_s": args.max_s},
        "stopped_by": "spans" if spans >= args.spans else "time",
        "completed_trace_memory": completed_memory,
        "rss_mb_start": samples[0]["rss_mb"],
        "rss_mb_end": samples[-1]["rss_mb"],
        "rss_mb_max": max(s["rss_mb"] for s in samples),
        "steady": {"from_spans": filled_at, "spans": max(0, spans - filled_at),
                   "rss_mb_min": min(steady), "rss_mb_max": max(steady)},
        "records_in_store": records,
        "samples": samples,
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return result


if __name__ == "__main__":
    main()
