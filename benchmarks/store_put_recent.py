"""Ingest-path write speed of ``store.recent.put`` (the recent-records cache).

Two baselines, same process, same SQLite settings (WAL, synchronous=NORMAL), a bare
``sqlite3`` ``executemany`` upsert, one transaction per batch:

- ``naive``: records serialised the obvious way, ``json.dumps(record.to_dict())``;
- ``raw``: the store's own serialiser (``record_json``), so the ratio isolates what the
  store layer (SQLAlchemy Core, dialect upsert, error translation) costs over the driver.

Batches rotate between the three writers (interleaved repeats), medians reported.

    .venv/bin/python benchmarks/store_put_recent.py

Set ``RAG_MONITOR_BENCH_PG_URL=postgresql+psycopg://...`` to also time PostgreSQL
(absolute rows/s only).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_monitor.record import Document, QueryRecord, StageTiming  # noqa: E402
from rag_monitor.store import open_store  # noqa: E402
from rag_monitor.store.models import record_json  # noqa: E402

BATCH = 256
REPEATS = 15
OUT = Path(__file__).with_name("results") / "store_put_recent.json"


def make_records(n: int, start: int, rng: random.Random) -> list[QueryRecord]:
    """Records shaped like redacted production ones: 6 stages, 5 retrieved, 3 delivered, a 384-d embedding."""
    text = "The refund policy allows returns within thirty days of delivery for unused items. " * 4
    records = []
    for i in range(start, start + n):
        docs = [Document(f"doc-{rng.randrange(10_000)}", text, rng.random(), {"source": "kb"}) for _ in range(5)]
        records.append(QueryRecord(
            trace_id=f"{i:032x}", root_span_id=f"{i:016x}", start_ns=i * 1000, end_ns=i * 1000 + 900,
            service="rag-api", query="how do I return an item I bought last week?", answer=text[:300],
            session_id=f"s-{i % 97}", release="v1.4.2", tenant=f"tenant-{i % 5}", intent="returns",
            stages=[StageTiming(name, f"{i:012x}{k:04x}", k, k + 10) for k, name in enumerate(
                ["embed", "retrieve", "filter", "rerank", "generate", "postprocess"])],
            retrieved=docs, delivered=docs[:3], llm_model="gpt-x", prompt_tokens=900, completion_tokens=120,
            embedding_model="all-minilm-l6-v2", query_embedding=[rng.uniform(-0.2, 0.2) for _ in range(384)],
        ))
    return records


def naive_json(record: QueryRecord) -> tuple[str, str]:
    return record.trace_id, json.dumps(record.to_dict(), separators=(",", ":"))


def baseline_writer(path: Path, serialise):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE recent (trace_id VARCHAR(32) PRIMARY KEY, record TEXT NOT NULL, added_at DOUBLE NOT NULL)")
    conn.execute("CREATE INDEX ix_recent_added_at ON recent (added_at)")
    sql = ("INSERT INTO recent (trace_id, record, added_at) VALUES (?, ?, ?) "
           "ON CONFLICT (trace_id) DO UPDATE SET record = excluded.record, added_at = excluded.added_at")

    def write(records: list[QueryRecord]) -> None:
        now = time.time()
        rows = [(*serialise(r), now) for r in records]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, rows)
        conn.execute("COMMIT")

    return write, conn.close


def rate(write, records: list[QueryRecord]) -> float:
    t0 = time.perf_counter()
    write(records)
    return len(records) / (time.perf_counter() - t0)


def main() -> None:
    rng = random.Random(7)
    batches = [make_records(BATCH, k * BATCH, rng) for k in range(REPEATS * 2)]
    results: dict[str, object] = {"batch_size": BATCH, "repeats": REPEATS,
                                  "record_json_bytes": len(json.dumps(batches[0][0].to_dict()))}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'store.db'}")
        naive_write, naive_close = baseline_writer(Path(tmp) / "naive.db", naive_json)
        raw_write, raw_close = baseline_writer(Path(tmp) / "raw.db", record_json)
        writers = {"store": store.recent.put, "naive": naive_write, "raw": raw_write}
        rates: dict[str, list[float]] = {name: [] for name in writers}
        for write in writers.values():  # warm-up: connections, statement caches
            write(batches[-1])
        names = list(writers)
        for k in range(REPEATS):
            # Rotate the order so drift in machine load hits every writer alike.
            for name in names[k % 3:] + names[:k % 3]:
                rates[name].append(rate(writers[name], batches[k]))
        store.close()
        naive_close()
        raw_close()
    med = {name: statistics.median(values) for name, values in rates.items()}
    results["sqlite"] = {
        "store_rows_per_s": round(med["store"]),
        "naive_baseline_rows_per_s": round(med["naive"]),
        "raw_baseline_rows_per_s": round(med["raw"]),
        "ratio_vs_naive": round(med["store"] / med["naive"], 3),
        "ratio_vs_raw_sqlite3": round(med["store"] / med["raw"], 3),
    }
    pg_url = os.environ.get("RAG_MONITOR_BENCH_PG_URL")
    if pg_url:
        store = open_store(pg_url)
        store.recent.put(batches[-1])
        results["postgresql"] = {"store_rows_per_s": round(statistics.median(
            rate(store.recent.put, batches[k]) for k in range(REPEATS)))}
        store.close()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
