"""The agent's compiled protobuf decoder (``otlp/wire.pyx``) against its fallback, upb + ``ProtoDecoder``.

On ``benchmarks/scale.py``'s traffic (20-query bodies, unique questions), this checks that both
give the same ``DecodeResult`` on every body and refuse every truncation of one alike, then times
both in interleaved repeats (``time.process_time``, CPU per query, medians) and writes
``benchmarks/results/compiled_decoder.json``:

    .venv/bin/python benchmarks/compiled_decoder.py [--bodies 300] [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from load import PayloadFactory  # noqa: E402

from rag_monitor.collectors import IngestLimits, OTLPDecodeError  # noqa: E402
from rag_monitor.collectors.otlp.body import decode_protobuf, decode_protobuf_upb  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "compiled_decoder.json"
QUERIES_PER_BODY = 20


def same_result(body: bytes, limits: IngestLimits) -> int:
    compiled = decode_protobuf(body, limits)
    assert repr(compiled) == repr(decode_protobuf_upb(body, limits))
    return len(compiled.spans)


def truncations(body: bytes, limits: IngestLimits, step: int) -> dict[str, int]:
    """Every ``step``-th prefix of ``body``: both decoders refuse it, or both read the same spans from it."""
    cuts = range(1, len(body), step)
    refused = 0
    for cut in cuts:
        outcomes = []
        for decode in (decode_protobuf, decode_protobuf_upb):
            try:
                outcomes.append(repr(decode(body[:cut], limits)))
            except OTLPDecodeError:
                outcomes.append("refused")
        assert outcomes[0] == outcomes[1], cut
        refused += outcomes[0] == "refused"
    return {"prefixes": len(cuts), "refused_by_both": refused}


def cpu_us_per_query(decode, bodies: list[bytes], limits: IngestLimits) -> float:
    start = time.process_time()
    for body in bodies:
        decode(body, limits)
    return (time.process_time() - start) / (len(bodies) * QUERIES_PER_BODY) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    limits = IngestLimits()
    factory = PayloadFactory(QUERIES_PER_BODY, unique_queries=True)
    bodies = [bytes(factory.body()) for _ in range(args.bodies)]
    spans = sum(same_result(body, limits) for body in bodies)
    truncated = truncations(bodies[0], limits, step=7)
    decoders = {"upb_and_proto_decoder": decode_protobuf_upb, "compiled": decode_protobuf}
    timings: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(args.repeats):
        for name, decode in decoders.items():
            timings[name].append(cpu_us_per_query(decode, bodies, limits))
    us = {name: round(statistics.median(values), 1) for name, values in timings.items()}
    options = "".join(f" --{k} {v}" for k, v in (("bodies", args.bodies), ("repeats", args.repeats)) if v != parser.get_default(k))
    result = {
        "command": "python benchmarks/compiled_decoder.py" + options,
        "python": platform.python_version(),
        "bodies": args.bodies, "queries": args.bodies * QUERIES_PER_BODY, "spans_per_query": round(spans / (args.bodies * QUERIES_PER_BODY), 2),
        "spans_equal": spans,
        "truncated_body": truncated,
        "repeats": args.repeats,
        "cpu_us_per_query": us,
        "upb_over_compiled": round(us["upb_and_proto_decoder"] / us["compiled"], 2),
        "what": "in-process CPU (process_time) to decode one query's spans from an uncompressed protobuf body into the "
                "agent's DecodeResult, median of interleaved repeats",
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
