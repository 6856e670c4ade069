"""The oracle over many seeds: every exported quantity against the simulator's truth, and the
sample-based estimates' coverage (is the true value inside the 95% interval about 95% of the time?).

Each seed runs a fresh in-process agent on SQLite and feeds it the seed's OTLP bodies through
``IngestPipeline.ingest`` (the receiver's own path, without the HTTP hop the test suite's
``tests/oracle`` covers); traces whose root was lost are expired, the recent-records TTL is passed
by pruning the cache as the maintenance job does, the scoring loop drains its backlog, and a
reviewer labels every sampled item with the gold documents. Writes ``results/oracle.json``:
per check, how many seeds it failed; per estimate, the coverage with a binomial 95% interval.

    .venv/bin/python benchmarks/oracle.py [--seeds 200] [--queries 160] [--max-s 1500]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from rag_monitor.agent.service import Agent  # noqa: E402
from rag_monitor.estimators import wilson  # noqa: E402
from rag_monitor.review.sampler import Sampler, SamplingConfig  # noqa: E402
from rag_monitor.settings import load_settings  # noqa: E402
from rag_monitor.simulate import simulate  # noqa: E402
from rag_monitor.simulate.oracle import Check, compare  # noqa: E402
from tests.oracle.harness import SAMPLING, _false_exclusion_estimate, estimates, review, sampled_items  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "oracle.json"
PROTOBUF = "application/x-protobuf"


def run_seed(seed: int, queries: int, work: Path) -> tuple[list[Check], list[dict]]:
    traffic = simulate(seed, queries=queries)
    sampling = work / "sampling.yaml"
    sampling.write_text(yaml.safe_dump(SAMPLING))
    settings = load_settings(overrides={"data_dir": str(work / f"seed{seed}"), "detector_profiles": "",
                                        "hhem_model_path": "", "sampling_config": str(sampling),
                                        "root_timeout_s": 0.05}, environ={})
    agent = Agent(settings)
    agent.open()  # store, models, planes: no servers, no scheduled jobs (their work is called below)
    try:
        for batch in traffic.phases[0]:
            agent.pipeline.ingest(batch.body(), PROTOBUF)
        time.sleep(0.1)
        agent.pipeline.expire()
        agent.settle(60)  # the sinks (metrics, regeneration) consume off the request path
        agent.regeneration.tick()
        agent.store.recent.prune(now=time.time() + settings.recent_ttl_s + 1)  # the TTL has passed
        for batch in traffic.phases[1]:
            agent.pipeline.ingest(batch.body(), PROTOBUF)
        agent.settle(60)
        agent.regeneration.tick()
        while agent.scoring.tick():
            pass
        review(traffic, agent.store)
        agent.review_stats.invalidate()
        store_url = settings.resolved_store_url()
        texts = [generate_latest(agent.registry).decode()]
        checks = compare(traffic.truth, texts)
        items = sampled_items(store_url)
        want = traffic.truth.sample(SAMPLING, Sampler(SamplingConfig(**SAMPLING)).uniform)
        got = {r["trace_id"]: r["inclusion_prob"] for r in items if r["queue"] == "default"}
        checks.append(Check("sampled traces", len(want), len(got), set(want) == set(got)))
        checks.append(Check("inclusion probabilities", 0, 0, all(abs(want[t][1] - p) < 1e-12 for t, p in got.items() if t in want)))
        found = [estimates(traffic, items, "production"), estimates(traffic, items, "shadow"),
                 _false_exclusion_estimate(traffic, [r for r in items if r["queue"] == "default"])]
        return checks, found
    finally:
        agent.close()


def _git(*args: str) -> str:
    import subprocess

    run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip()


def covered_share_interval(hits: int, n: int) -> list[float]:
    """The 95% interval of a coverage share (Wilson's, from the estimator module), rounded."""
    return [round(x, 4) for x in wilson(hits / n, n)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=160)
    parser.add_argument("--max-s", type=float, default=1500.0, help="stop starting seeds after this many seconds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="what code ran (recorded with the results)")
    args = parser.parse_args(argv)

    failures: Counter[str] = Counter()
    examples: dict[str, str] = {}
    coverage: dict[str, list] = {}
    seeds_run = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if time.perf_counter() - t0 > args.max_s:
                break
            checks, found = run_seed(seed, args.queries, Path(tmp))
            seeds_run += 1
            for c in checks:
                name = c.name.split(" 2026.")[0]  # one line per check kind, not per release
                if not c.ok:
                    failures[name] += 1
                    examples.setdefault(name, str(c)[:300])
            for est in found:
                if est["estimate"] is not None and est["truth"] is not None and est["n"] >= 10:
                    coverage.setdefault(est["variant"], []).append(est)
            print(f"seed {seed}: {sum(not c.ok for c in checks)} of {len(checks)} checks failed", flush=True)

    result = {
        "script": "benchmarks/oracle.py",
        "what": "per seed: a fresh in-process agent (SQLite) fed the simulator's OTLP bodies through IngestPipeline.ingest; "
                "every exported quantity compared with the truth; estimates' 95% intervals against the true values",
        "code": {"commit": _git("rev-parse", "HEAD"), "note": args.note},
        "queries_per_seed": args.queries,
        "sampling": SAMPLING,
        "seeds": seeds_run,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "checks_failed": {"seeds_with_failures": dict(failures), "examples": examples},
        "checks_passed_every_seed": not failures,
        "coverage": {
            name: {"seeds": len(rows), "covered": sum(r["covered"] for r in rows),
                   "rate": round(sum(r["covered"] for r in rows) / len(rows), 4),
                   "rate_ci95": covered_share_interval(sum(r["covered"] for r in rows), len(rows)),
                   "wilson_kish_rate": round(sum(r["covered_wilson"] for r in rows) / len(rows), 4),
                   "wilson_kish_rate_ci95": covered_share_interval(sum(r["covered_wilson"] for r in rows), len(rows)),
                   "mean_estimate_minus_truth": round(sum(r["estimate"] - r["truth"] for r in rows) / len(rows), 5),
                   "mean_items": round(sum(r["n"] for r in rows) / len(rows), 1)}
            for name, rows in coverage.items()
        },
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
