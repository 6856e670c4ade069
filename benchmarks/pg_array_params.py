"""Client CPU of the request path's ``unnest`` inserts: array parameters in text vs binary format.

The group commit writes each table's rows as column arrays (``store.engine.UnnestInsert``). In
psycopg's text format every array element is quoted and escaped in Python (a record's JSON is
mostly quotes, a bytea is hex-encoded first); in the binary format (``%b``) an element is its
length and its bytes. Both statements insert the same rows, shaped as ``benchmarks/scale.py``'s
traffic makes them: the recent-records cache's compressed records and the review queue's JSON
records of one 20-query request, built by the agent's own code from an SDK-encoded body.

Interleaved repeats on a throwaway PostgreSQL on loopback; client CPU (``time.process_time``) per
row, medians, and their ratio. Writes ``benchmarks/results/pg_array_params.json``.

    .venv/bin/python benchmarks/pg_array_params.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from load import PayloadFactory  # noqa: E402
from services import PostgresServer, traversable_tmpdir  # noqa: E402

from rag_monitor.collectors import IngestLimits, Redactor, TraceAssembler, decode_export_request  # noqa: E402
from rag_monitor.collectors.otlp import CONTENT_TYPE_PROTOBUF  # noqa: E402
from rag_monitor.config_files import shipped_path  # noqa: E402
from rag_monitor.store.hot import encode_record  # noqa: E402
from rag_monitor.store.models import record_json  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "pg_array_params.json"
CALLS = 20
"""Statements per timed batch (each a request's rows)."""


def request_rows() -> dict[str, list]:
    """One 20-query request's rows: the records as the agent encodes them for each table."""
    limits = IngestLimits()
    body = PayloadFactory(20, unique_queries=True).body()
    spans = decode_export_request(body, CONTENT_TYPE_PROTOBUF, limits=limits).spans
    Redactor.load(shipped_path("redaction_rules"), pseudonym_key=b"k" * 32).redact_spans(spans)
    records = TraceAssembler.from_limits(limits).add(spans).records
    return {"trace_id": [r.trace_id for r in records], "slot": [1_700_000_040 for _ in records],
            "blob": [encode_record(r)[0] for r in records], "json": [record_json(r)[1] for r in records],
            "added_at": [1_700_000_000.5 for _ in records]}


def statement(fmt: str) -> str:
    return (f"INSERT INTO bench (trace_id, slot, blob, json, added_at) SELECT * FROM unnest("
            f"CAST(%(trace_id){fmt} AS varchar[]), CAST(%(slot){fmt} AS bigint[]), CAST(%(blob){fmt} AS bytea[]), "
            f"CAST(%(json){fmt} AS text[]), CAST(%(added_at){fmt} AS double precision[]))")


def main() -> None:
    import psycopg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows = request_rows()
    n = len(rows["trace_id"])
    server = PostgresServer(traversable_tmpdir("rag-monitor-bench-pg-"))
    server.start()
    try:
        conn = psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres", autocommit=True)
        conn.execute("CREATE UNLOGGED TABLE bench (trace_id varchar, slot bigint, blob bytea, json text, added_at double precision)")
        formats = {"text": statement("s"), "binary": statement("b")}
        for sql in formats.values():  # prepared (psycopg prepares after 5 uses) and warm
            for _ in range(10):
                conn.execute(sql, rows)
        us_per_row: dict[str, list[float]] = {name: [] for name in formats}
        for _ in range(args.repeats):
            for name, sql in formats.items():
                conn.execute("TRUNCATE bench")
                start = time.process_time()
                for _ in range(CALLS):
                    conn.execute(sql, rows)
                us_per_row[name].append((time.process_time() - start) / (CALLS * n) * 1e6)
        conn.close()
    finally:
        server.stop()
    text, binary = (statistics.median(us_per_row[k]) for k in ("text", "binary"))
    result = {
        "command": "python benchmarks/pg_array_params.py" + (f" --repeats {args.repeats}" if args.repeats != 15 else ""),
        "rows_per_statement": n,
        "bytes_per_row": {"blob": round(statistics.mean(map(len, rows["blob"]))),
                          "json": round(statistics.mean(map(len, rows["json"])))},
        "repeats": args.repeats,
        "client_cpu_us_per_row": {"text": round(text, 1), "binary": round(binary, 1)},
        "binary_over_text": round(binary / text, 3),
        "what": "client CPU (process_time) of one unnest INSERT per request, median of interleaved repeats",
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
