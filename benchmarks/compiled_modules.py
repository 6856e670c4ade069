"""The ingest modules setup.py compiles (``COMPILED_PY``) against the same modules as plain Python.

On ``benchmarks/scale.py``'s traffic (20-query bodies, unique questions), child processes decode
(with the compiled decoder in both), redact and assemble the same bodies into records, encode
each record for the recent-records cache and count it in the query metrics; every other child imports the plain ``.py`` of the
compiled modules instead of their builds. Both must give the same records (a digest of their
JSON); the CPU per query of each stage (``time.process_time``) is the median over interleaved
children, and ``benchmarks/results/compiled_modules.json`` gets it:

    .venv/bin/python benchmarks/compiled_modules.py [--bodies 300] [--children 10]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "compiled_modules.json"
QUERIES_PER_BODY = 20
STAGES = ("redact", "assemble", "encode", "observe")


def compiled_py() -> list[str]:
    """The modules built from a ``.py`` here (setup.py's ``COMPILED_PY``, as ``make venv`` built them)."""
    sys.path.insert(0, str(ROOT))
    from rag_monitor.compiled import compiled_modules

    return [m for m in compiled_modules() if (ROOT / (m.replace(".", "/") + ".py")).exists()]


class PlainPython:
    """A finder that imports the ``.py`` of the compiled modules, as a build without a compiler would."""

    def __init__(self, modules: list[str]):
        self.modules = set(modules)

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules:
            return None
        source = ROOT / (name.replace(".", "/") + ".py")
        return importlib.util.spec_from_file_location(name, source)


def write_bodies(path: Path, bodies: int) -> None:
    """The same bodies for every child (the factory draws fresh ids), length-prefixed."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from load import PayloadFactory

    factory = PayloadFactory(QUERIES_PER_BODY, unique_queries=True)
    with open(path, "wb") as out:
        for _ in range(bodies):
            body = bytes(factory.body())
            out.write(len(body).to_bytes(4, "little") + body)


def read_bodies(path: Path) -> list[bytes]:
    data, bodies, at = path.read_bytes(), [], 0
    while at < len(data):
        n = int.from_bytes(data[at:at + 4], "little")
        bodies.append(data[at + 4:at + 4 + n])
        at += 4 + n
    return bodies


def child(plain: bool, bodies_path: Path) -> dict:
    if plain:
        sys.meta_path.insert(0, PlainPython(compiled_py()))
    sys.path.insert(0, str(ROOT))
    from rag_monitor.agent.observe import QueryObserver
    from rag_monitor.alerts.metrics import AgentMetrics
    from rag_monitor.collectors import IngestLimits
    from rag_monitor.collectors import assembly as assembly_module
    from rag_monitor.collectors.assembly import TraceAssembler
    from rag_monitor.collectors.otlp.body import decode_protobuf
    from rag_monitor.collectors.pricing import PriceTable
    from rag_monitor.collectors.redaction import Redactor
    from rag_monitor.compiled import is_compiled
    from rag_monitor.config_files import shipped_path
    from rag_monitor.store.hot import encode_record
    from rag_monitor.store.models import record_json

    assert is_compiled(assembly_module) != plain, "the build is missing (make venv)" if not plain else "plain import failed"
    limits = IngestLimits()
    payloads = read_bodies(bodies_path)
    redactor = Redactor.load(shipped_path("redaction_rules"), pseudonym_key=b"benchmark-key")
    assembler = TraceAssembler.from_limits(limits)
    prices = PriceTable.load(shipped_path("price_table"))
    observer = QueryObserver(AgentMetrics(), prices.call_cost, cache_saving=prices.cache_saving)
    seconds = dict.fromkeys(STAGES, 0.0)
    digest = hashlib.sha256()
    for body in payloads:
        spans = decode_protobuf(body, limits).spans
        start = time.process_time()
        redactor.redact_spans(spans)
        redacted = time.process_time()
        records = assembler.add(spans).records
        assembled = time.process_time()
        for record in records:
            encode_record(record)
        encoded = time.process_time()
        for record in records:
            observer.observe(record)
        observed = time.process_time()
        seconds["redact"] += redacted - start
        seconds["assemble"] += assembled - redacted
        seconds["encode"] += encoded - assembled
        seconds["observe"] += observed - encoded
        for record in records:
            digest.update(record_json(record)[1].encode())
    queries = len(payloads) * QUERIES_PER_BODY
    return {"us_per_query": {k: v / queries * 1e6 for k, v in seconds.items()}, "records_digest": digest.hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=300)
    parser.add_argument("--children", type=int, default=10, help="children per kind, interleaved")
    parser.add_argument("--child", choices=["compiled", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--bodies-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child == "plain", args.bodies_file)))
        return
    runs: dict[str, list[dict]] = {"plain": [], "compiled": []}
    with tempfile.TemporaryDirectory() as tmp:
        bodies = Path(tmp) / "bodies"
        write_bodies(bodies, args.bodies)
        for _ in range(args.children):
            for kind in runs:
                out = subprocess.run([sys.executable, __file__, "--child", kind, "--bodies-file", str(bodies)],
                                     capture_output=True, text=True, check=True, timeout=600)
                runs[kind].append(json.loads(out.stdout.splitlines()[-1]))
    digests = {run["records_digest"] for kind in runs for run in runs[kind]}
    assert len(digests) == 1, "the compiled and plain modules gave different records"
    us = {kind: {stage: round(statistics.median(r["us_per_query"][stage] for r in rs), 1) for stage in STAGES}
          for kind, rs in runs.items()}
    for kind in us:
        us[kind]["total"] = round(sum(us[kind][s] for s in STAGES), 1)
    options = "".join(f" --{k} {v}" for k, v in (("bodies", args.bodies), ("children", args.children))
                      if v != parser.get_default(k))
    result = {
        "command": "python benchmarks/compiled_modules.py" + options,
        "python": platform.python_version(),
        "compiled_modules": compiled_py(),
        "queries_per_child": args.bodies * QUERIES_PER_BODY,
        "children_per_kind": args.children,
        "same_records": True,
        "cpu_us_per_query": us,
        "compiled_over_plain": {stage: round(us["compiled"][stage] / us["plain"][stage], 2) for stage in (*STAGES, "total")},
        "what": "in-process CPU (process_time) per query to redact decoded spans, assemble them into records, encode "
                "each record for the recent-records cache and count it in the query metrics; medians over interleaved "
                "child processes",
    }
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
