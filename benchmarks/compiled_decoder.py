"""A compiled OTLP wire decoder against the agent's (upb + ``ProtoDecoder``): the option issue 23 is left with.

The agent's CPU per query is spread over Python-level work per attribute: upb hands out a wrapper
object per ``KeyValue`` and ``AnyValue``, and ``ProtoDecoder._attributes`` was the largest self
time in a ``--gil`` profile of ``benchmarks/scale.py``. ``compiled_decoder/fastotlp.pyx`` reads the same bytes in Cython, every
length checked against its enclosing message, straight into the dicts the agent builds. It is
not wired into the agent: events, links, scopes and the agent's checks (ids, truncation, vector
dimensions) are left out, and shipping it means a compiled extension with the pure-Python
decoder as the fallback.

On ``benchmarks/scale.py``'s traffic (20-query bodies, unique questions), this checks that every
span's ids, name, times, status, attributes and resource equal the agent's, that every truncation
of a body raises ``ValueError`` (no crash, no over-read), then times both decoders in interleaved
repeats (``time.process_time``, CPU per query, medians) and writes
``benchmarks/results/compiled_decoder.json``. Needs Cython and a C compiler:

    .venv/bin/pip install cython && .venv/bin/python benchmarks/compiled_decoder.py [--bodies 300] [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from load import PayloadFactory  # noqa: E402

from rag_monitor.collectors import IngestLimits, decode_export_request  # noqa: E402
from rag_monitor.collectors.otlp import CONTENT_TYPE_PROTOBUF, Span  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "compiled_decoder.json"
QUERIES_PER_BODY = 20


def build(tmp: str):
    """``fastotlp`` compiled into ``tmp`` (pyximport: Cython, then the platform's C compiler)."""
    import pyximport

    sys.path.insert(0, str(Path(__file__).resolve().parent / "compiled_decoder"))
    pyximport.install(build_dir=tmp, language_level=3, inplace=False)
    import fastotlp

    return fastotlp


COMPARED = ("trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns", "status_code", "status_message",
            "attributes", "resource")
"""The ``Span`` fields the compiled decoder fills (events, links and scope it leaves out)."""


def same_spans(body: bytes, limits: IngestLimits, fastotlp) -> int:
    agent = decode_export_request(body, CONTENT_TYPE_PROTOBUF, limits=limits).spans
    compiled = with_spans(fastotlp)(body)
    assert len(agent) == len(compiled), (len(agent), len(compiled))
    for ours, theirs in zip(agent, compiled):
        for name in COMPARED:
            assert getattr(ours, name) == getattr(theirs, name), (ours.name, name)
    return len(agent)


def truncations(body: bytes, fastotlp, step: int) -> dict[str, int]:
    """Every ``step``-th prefix of ``body``: each decodes (a cut between messages) or raises ValueError, never crashes."""
    cuts = range(1, len(body), step)
    refused = 0
    for cut in cuts:
        try:
            fastotlp.decode(body[:cut])
        except ValueError:
            refused += 1
    return {"prefixes": len(cuts), "refused": refused}


def with_spans(fastotlp):
    """The compiled decoder plus what the agent's decoder also does: a ``Span`` per span, hex ids."""
    def decode(body: bytes) -> list[Span]:
        return [Span(t.hex(), s.hex(), p.hex() or None, name, kind, start, end, code, message, attributes, resource)
                for (t, s, p, name, kind, start, end, code, message, attributes), resource in fastotlp.decode(body)]
    return decode


def cpu_us_per_query(decode, bodies: list[bytes]) -> float:
    start = time.process_time()
    for body in bodies:
        decode(body)
    return (time.process_time() - start) / (len(bodies) * QUERIES_PER_BODY) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    limits = IngestLimits()
    factory = PayloadFactory(QUERIES_PER_BODY, unique_queries=True)
    bodies = [bytes(factory.body()) for _ in range(args.bodies)]
    with tempfile.TemporaryDirectory(prefix="rag-monitor-fastotlp-") as tmp:
        fastotlp = build(tmp)
        spans = sum(same_spans(body, limits, fastotlp) for body in bodies)
        truncated = truncations(bodies[0], fastotlp, step=7)

        def agent(body: bytes):
            return decode_export_request(body, CONTENT_TYPE_PROTOBUF, limits=limits)

        decoders = {"agent_upb_and_proto_decoder": agent, "compiled_wire_decoder": fastotlp.decode,
                    "compiled_wire_decoder_with_spans": with_spans(fastotlp)}
        timings: dict[str, list[float]] = {name: [] for name in decoders}
        for _ in range(args.repeats):
            for name, decode in decoders.items():
                timings[name].append(cpu_us_per_query(decode, bodies))
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
        "compiled_with_spans_over_agent": round(us["compiled_wire_decoder_with_spans"] / us["agent_upb_and_proto_decoder"], 3),
        "what": "in-process CPU (process_time) to decode one query's spans from an uncompressed protobuf body, median of "
                "interleaved repeats; the compiled decoder leaves out events, links, scopes and the agent's checks",
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
