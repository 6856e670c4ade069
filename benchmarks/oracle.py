"""The oracle over many seeds: every exported quantity against the simulator's truth, and the
sample-based estimates' coverage (is the true value inside the 95% interval about 95% of the time?).

Each seed runs a fresh in-process agent on SQLite and feeds it the seed's OTLP bodies through
``IngestPipeline.ingest`` (the receiver's own path, without the HTTP hop the test suite's
``tests/oracle`` covers); traces whose root was lost are expired, the recent-records TTL is passed
by pruning the cache as the maintenance job does, the scoring loop drains its backlog, and a
reviewer labels every sampled item with the gold documents. Writes ``results/oracle.json``:
per check, how many seeds it failed; per estimate, the coverage with a binomial 95% interval.

    .venv/bin/python benchmarks/oracle.py [--seeds 200] [--queries 160] [--max-s 1500]

``--scenario production`` (``results/oracle_production.json``): the shipped sampling rates (1%
base, weights to 100), a month of traffic in bursts, two in-process agents on one PostgreSQL
database per seed with exporter retries across them and the second "killed" mid-run (never
called again; its counters as last scraped), the hot partitions dropped by a pruning pass past
the TTL, and a history-retention pass after the review; every check again after it
(``tests/oracle/production.py`` plans the delivery; ``tests/oracle/test_production.py`` is the
short version through real processes).
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
from rag_monitor.simulate.oracle import Check, Samples, compare  # noqa: E402
from tests.oracle.harness import SAMPLING, _false_exclusion_estimate, estimates, review, sampled_items  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "oracle.json"
RESULTS_PRODUCTION = ROOT / "benchmarks" / "results" / "oracle_production.json"
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
        _late_phase_and_review(agent, traffic)
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


def run_seed_production(seed: int, queries: int, work: Path, server) -> tuple[list[Check], list[dict]]:
    """One seed of ``--scenario production`` (see the module docstring)."""
    from dataclasses import replace

    from rag_monitor.simulate.wire import Batch
    from tests.oracle.harness import counters_only
    from tests.oracle.production import KNOBS, Kill, plan, production_sampling, slot_guard

    sampling = production_sampling()
    traffic = simulate(seed, queries=queries, **KNOBS)
    path = work / "sampling-production.yaml"
    path.write_text(yaml.safe_dump(sampling))
    url = server.create_database(f"oracle_{seed}")
    agents = []
    for replica in range(2):
        settings = load_settings(overrides={
            "data_dir": str(work / f"seed{seed}-{replica}"), "store_url": url, "pseudonym_key": "oracle-pseudonym-key",
            "detector_profiles": "", "hhem_model_path": "", "offline_scorer": "lexical", "sampling_config": str(path),
            "root_timeout_s": 0.05, "history_retention_days": 1.0}, environ={})
        agents.append(Agent(settings))
        agents[-1].open()
    ttl = agents[0].settings.recent_ttl_s
    delivery = plan(traffic, seed)
    survivor, frozen = agents[0], []
    try:
        for burst in delivery.bursts:
            rooted = set()
            for step in burst:
                if isinstance(step, Kill):  # its last scrape; never called again
                    victim = agents[step.replica]
                    victim.settle(60)
                    victim.regeneration.tick()
                    frozen.append(counters_only(generate_latest(victim.registry).decode()))
                    continue
                slot_guard(ttl, min(step.guard_s, 1.0))  # in-process, a retry follows within milliseconds
                agents[step.replica].pipeline.ingest(Batch(step.spans).body(), PROTOBUF)
                rooted.add(step.replica)
            for replica in sorted(rooted):  # a session's earlier query is in the store before its re-ask
                agents[replica].settle(60)
                agents[replica].regeneration.tick()
        time.sleep(0.1)
        survivor.pipeline.expire()
        survivor.settle(60)
        survivor.regeneration.tick()
        before = _hot_partitions(url)
        hot_dropped = survivor.store.recent.prune(now=time.time() + ttl + 1)  # the TTL has passed: partitions dropped
        partitions_dropped = len(before - _hot_partitions(url))
        _late_phase_and_review(survivor, traffic)
        truth = replace(traffic.truth, spans_sent=traffic.truth.spans_sent + delivery.retried_spans)
        texts = [generate_latest(survivor.registry).decode(), *frozen]
        checks = _production_checks(truth, texts, delivery)
        checks.append(Check("hot records dropped with their partitions", "> 0 records, > 0 partitions",
                            (hot_dropped, partitions_dropped), hot_dropped > 0 and partitions_dropped > 0))
        items = sampled_items(url)
        want = truth.sample(sampling, Sampler(SamplingConfig(**sampling)).uniform)
        got = {r["trace_id"]: r["inclusion_prob"] for r in items if r["queue"] == "default"}
        checks.append(Check("sampled traces", len(want), len(got), set(want) == set(got)))
        checks.append(Check("inclusion probabilities", 0, 0, all(abs(want[t][1] - p) < 1e-12 for t, p in got.items() if t in want)))
        by_trace = {q.trace_hex: q for q in truth.records}
        wrong = {r["trace_id"]: (v, r["label"]) for r in items
                 if (v := truth.verdict(by_trace[r["trace_id"]]) if r["trace_id"] in by_trace else "?") is not None
                 and r["label"] != v}
        checks.append(Check("verdicts of sampled answers", {}, dict(list(wrong.items())[:3]), not wrong))
        found = [estimates(traffic, items, "production"), estimates(traffic, items, "shadow"),
                 _false_exclusion_estimate(traffic, [r for r in items if r["queue"] == "default"])]
        for est in found[:2]:  # what the agents exported is the Horvitz-Thompson estimate of the scored sample
            m = Samples(texts)
            w = {v: m.sum("rag_faithfulness_weighted_total", variant=est["variant"], verdict=v) for v in ("supported", "unsupported")}
            exported = w["unsupported"] / sum(w.values()) if sum(w.values()) else None
            same = exported == est["estimate"] or (None not in (exported, est["estimate"]) and abs(exported - est["estimate"]) < 1e-9)
            checks.append(Check(f"weighted unsupported rate {est['variant']}", est["estimate"], exported, same))
        # A day later (compressed): history past retention goes; what a user reads stays.
        depth = survivor.store.queue.depth()
        deleted = survivor.store.retention.prune(now=time.time() + 86400 + 1)
        checks.append(Check("history pruned (scores, feedback)", "> 0", deleted, deleted["scores"] > 0 and deleted["feedback"] > 0))
        checks.append(Check("reviewed items kept", depth, survivor.store.queue.depth(), depth == survivor.store.queue.depth()))
        survivor.review_stats.invalidate()
        after = [generate_latest(survivor.registry).decode(), *frozen]
        checks += [replace(c, name=f"after pruning: {c.name}") for c in _production_checks(truth, after, delivery)]
        return checks, found
    finally:
        for agent in agents:
            agent.close()


def _late_phase_and_review(agent, traffic) -> None:
    """The late phase's traffic (after the TTL), every answer scored, the sample reviewed."""
    for batch in traffic.phases[1]:
        agent.pipeline.ingest(batch.body(), PROTOBUF)
    agent.settle(60)
    agent.regeneration.tick()
    while agent.scoring.tick():
        pass
    review(traffic, agent.store)
    agent.review_stats.invalidate()


def _hot_partitions(url: str) -> set[str]:
    import sqlalchemy as sa

    from rag_monitor.store.partitions import partitions_of

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        names = {name for name in partitions_of(conn) if not name.endswith("_default")}
    engine.dispose()
    return names


def _production_checks(truth, texts: list[str], delivery) -> list[Check]:
    """``compare``, with the partial traces a killed replica may have taken with it, and the
    retries found stored already."""
    from tests.oracle.production import duplicates_check

    checks = compare(truth, texts, single_agent=False)
    found = Samples(texts).sum("rag_agent_traces_partial_total")
    low = truth.partial_traces - len(delivery.orphan_candidates)
    checks = [Check("partial traces", f"{low}..{truth.partial_traces}", found, low <= found <= truth.partial_traces)
              if c.name == "partial traces" else c for c in checks]
    checks.append(duplicates_check(delivery, Samples(texts).sum("rag_agent_traces_duplicate_total")))
    return checks


def _git(*args: str) -> str:
    import subprocess

    run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip()


def covered_share_interval(hits: int, n: int) -> list[float]:
    """The 95% interval of a coverage share (Wilson's, from the estimator module), rounded."""
    return [round(x, 4) for x in wilson(hits / n, n)]


PRODUCTION_WHAT = ("per seed: two in-process agents on one fresh PostgreSQL database fed a month of bursty traffic "
                   "through IngestPipeline.ingest, by trace id, with exporter retries on the other agent and the second "
                   "agent killed mid-run; the shipped sampling rates (1% base); hot partitions dropped past the TTL and "
                   "history pruned after the review; every exported quantity compared with the truth before and after "
                   "pruning; estimates' 95% intervals against the true values")


def _summary(args, production: bool, seeds_run: int, t0: float, failures, examples, coverage, check_names) -> dict:
    from tests.oracle.production import KNOBS, production_sampling

    result = {
        "command": "python benchmarks/oracle.py " + " ".join(sys.argv[1:]),
        "script": "benchmarks/oracle.py",
        "what": (PRODUCTION_WHAT if production else
                 "per seed: a fresh in-process agent (SQLite) fed the simulator's OTLP bodies through IngestPipeline.ingest; "
                 "every exported quantity compared with the truth; estimates' 95% intervals against the true values"),
        "code": {"commit": args.commit, "note": args.note},
        "queries_per_seed": args.queries,
        "scenario": args.scenario,
        "sampling": production_sampling() if production else SAMPLING,
        "knobs": KNOBS if production else {},
        "first_seed": args.first_seed,
        "checks": sorted(check_names),
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
    return result


def _postgres():
    from tests.services import PostgresServer, traversable_tmpdir

    server = PostgresServer(traversable_tmpdir("rag-monitor-oracle-pg-"))
    server.start()
    return server


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=160)
    parser.add_argument("--max-s", type=float, default=1500.0, help="stop starting seeds after this many seconds")
    parser.add_argument("--out", type=Path, default=None, help="default: results/oracle.json, or oracle_production.json")
    parser.add_argument("--note", default="", help="what code ran (recorded with the results)")
    parser.add_argument("--scenario", choices=("default", "production"), default="default")
    args = parser.parse_args(argv)
    args.commit = _git("rev-parse", "HEAD")  # the code the run imports: read once, before a merge can move HEAD
    production = args.scenario == "production"
    out = args.out or (RESULTS_PRODUCTION if production else RESULTS)

    failures: Counter[str] = Counter()
    examples: dict[str, str] = {}
    coverage: dict[str, list] = {}
    check_names: set[str] = set()
    seeds_run = 0
    t0 = time.perf_counter()
    server = _postgres() if production else None
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if time.perf_counter() - t0 > args.max_s:
                break
            seed_t0 = time.perf_counter()
            if production:
                checks, found = run_seed_production(seed, args.queries, Path(tmp), server)
            else:
                checks, found = run_seed(seed, args.queries, Path(tmp))
            seeds_run += 1
            for c in checks:
                name = c.name.split(" 2026.")[0]  # one line per check kind, not per release
                check_names.add(name)
                if not c.ok:
                    failures[name] += 1
                    examples.setdefault(name, str(c)[:300])
            for est in found:
                if est["estimate"] is not None and est["truth"] is not None and est["n"] >= 10:
                    coverage.setdefault(est["variant"], []).append(est)
            print(f"seed {seed}: {sum(not c.ok for c in checks)} of {len(checks)} checks failed "
                  f"({time.perf_counter() - seed_t0:.0f} s)", flush=True)
            for c in checks:
                if not c.ok:
                    print(f"  {str(c)[:400]}", flush=True)
            out.parent.mkdir(exist_ok=True)  # after every seed: a run stopped early keeps what it found
            out.write_text(json.dumps(_summary(args, production, seeds_run, t0, failures, examples, coverage,
                                               check_names), indent=2) + "\n")
    if server is not None:
        server.stop()

    result = _summary(args, production, seeds_run, t0, failures, examples, coverage, check_names)
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
