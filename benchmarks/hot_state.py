"""Bytes per query of the hot state (the recent-records cache) on demo-like records.

Each record is built from the demo corpus (``rag_monitor/demo/corpus.py``): a corpus question,
five retrieved documents drawn with Zipf popularity (popular chunks repeat across queries, as in
production), three delivered, six stages, a 384-d query embedding. Four encodings of the same
records, bytes per record:

- ``json``: the record as stored before (``record_json``);
- ``zlib``: that JSON compressed (zlib level 6);
- ``by_reference``: document contents replaced by their hash, each distinct content stored once
  per time slot (its bytes shared by the slot's records);
- ``by_reference_compressed``: both (what the store now writes: the record zstd-compressed by
  ``encode_record``, each content as PostgreSQL's TOAST would, modelled by zlib level 6).

    .venv/bin/python benchmarks/hot_state.py [--records 20000] [--slot-records 6000]

``--slot-records``: records per time slot (a 10-minute slot at 10 queries/s by default; more
traffic per slot shares each document among more records).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rag_monitor.demo.corpus import load_corpus  # noqa: E402
from rag_monitor.record import Document, QueryRecord, StageTiming  # noqa: E402
from rag_monitor.store.hot import encode_record  # noqa: E402
from rag_monitor.store.models import record_json  # noqa: E402

OUT = Path(__file__).with_name("results") / "hot_state.json"


def demo_records(n: int, seed: int = 7) -> list[QueryRecord]:
    corpus = load_corpus()
    rng = random.Random(seed)
    docs = corpus.documents
    weights = [1 / (rank + 1) for rank in range(len(docs))]  # Zipf: a few chunks answer most queries
    questions = list(corpus.policy_questions) + list(corpus.nq_questions)
    out = []
    for i in range(n):
        picked = rng.choices(docs, weights, k=5)
        retrieved = [Document(d.id, d.content, round(rng.random(), 4), dict(d.metadata)) for d in picked]
        q = questions[i % len(questions)]
        out.append(QueryRecord(
            trace_id=f"{i:032x}", root_span_id=f"{i:016x}", start_ns=i * 10**8, end_ns=i * 10**8 + 9 * 10**8,
            service="support-bot", query=q.text, answer=retrieved[0].content[:300], session_id=f"s-{i % 997}",
            release="2026.11.30", tenant=f"tenant-{i % 5}", intent="billing",
            stages=[StageTiming(name, f"{i:012x}{k:04x}", k, k + 10) for k, name in enumerate(
                ["rewrite", "embed", "retrieve", "rerank", "generate", "postprocess"])],
            retrieved=retrieved, delivered=retrieved[:3], llm_model="gpt-4o-mini", prompt_tokens=812,
            completion_tokens=64, embedding_model="all-minilm-l6-v2",
            query_embedding=[round(rng.uniform(-0.2, 0.2), 7) for _ in range(384)],
        ))
    return out


def measure(records: list[QueryRecord], slot_records: int) -> dict[str, float]:
    sizes = {"json": 0, "zlib": 0, "by_reference": 0, "by_reference_compressed": 0}
    for start in range(0, len(records), slot_records):
        slot_docs: dict[str, str] = {}
        for record in records[start:start + slot_records]:
            text = record_json(record)[1].encode()
            sizes["json"] += len(text)
            sizes["zlib"] += len(zlib.compress(text, 6))
            blob, docs = encode_record(record, compress=False)
            sizes["by_reference"] += len(blob)
            sizes["by_reference_compressed"] += len(encode_record(record)[0])
            slot_docs.update(docs)
        shared = sum(len(c.encode()) for c in slot_docs.values())
        sizes["by_reference"] += shared
        sizes["by_reference_compressed"] += sum(len(zlib.compress(c.encode(), 6)) for c in slot_docs.values())
    return {k: round(v / len(records), 1) for k, v in sizes.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--slot-records", type=int, default=6_000)
    args = parser.parse_args(argv)
    records = demo_records(args.records)
    bytes_per_record = measure(records, args.slot_records)
    result = {
        "command": "python benchmarks/hot_state.py" + (f" --records {args.records}" if args.records != 20_000 else ""),
        "records": args.records, "slot_records": args.slot_records,
        "bytes_per_record": bytes_per_record,
        "without_embedding": measure([_no_embedding(r) for r in records], args.slot_records),
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


def _no_embedding(record: QueryRecord) -> QueryRecord:
    from dataclasses import replace

    return replace(record, query_embedding=None)


if __name__ == "__main__":
    raise SystemExit(main())
