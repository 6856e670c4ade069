"""Production-rate cost per query: one and two agent processes on one PostgreSQL.

Each phase starts N ``rag-monitor agent`` processes on one PostgreSQL cluster on loopback, and per
agent a load.py ``--hammer`` (keep-alive POSTers of SDK-encoded bodies of ``--queries-per-request``
queries, 20 by default, 80 for an SDK's 512-span batches; fresh trace ids
per accepted request, a fresh question text per query while the documents repeat as popular chunks
do) for ``--duration`` seconds, at production settings: the shipped redaction rules, the shipped
sampling (1% base rate, complaints, score_rate 10% within its budget), the shipped drift profiles
with the real MiniLM embedder (``--no-drift`` to leave them out), the offline scorer in its worker
(lexical-v1 without HHEM weights), the recent-records cache in time partitions with a short ttl
(``--ttl``) so that slots are created and dropped within the run.

Two states of the drift references, measured apart:

- steady state (the phases of one and two agents, and the capacity table): every reference is
  full and its capture period (``reference_days``) is over, as in a deployment past its first
  week: pre-filled in the store before the agents start, not measured. Only the current windows'
  samples are embedded: at most ``current_size`` per interval, whatever the traffic.
- the fill (``--fill-duration`` s of one agent on a fresh store): every query is embedded until a
  reference holds its 40,000 items, then Algorithm R embeds query n with chance k/n until the
  period ends. A one-time cost, reported as CPU seconds at 1,000 and 10,000 queries/s
  (``reference_fill``), not as a rate a team pays for months.

Per query it records: agent CPU (the agents' processes), PostgreSQL CPU (the server's processes,
exited backends included, the benchmark's own sampling backend left out) and its statements
(``pg_stat_statements``, loaded at the server's start: calls and execution time per statement
family), rows inserted (``pg_stat_user_tables``), table and index bytes grown
before the first slot expires, WAL bytes (``pg_current_wal_lsn``); and the hot tables' size
sampled through the run (flat once slots are dropped). Where the server's CPU goes outside the
statements: per backend type (client backends, autovacuum workers, WAL writer, background writer,
checkpointer; ``scale_postgres.py``), transactions per query, autovacuum runs per table. Whether
the hot tables grow or only hold more traffic (two agents write about twice as much per slot):
bytes per live record, and each peak before a drop in KB per query/s of the traffic it holds
(``hot_table_scale``).

Two agents against one, at the same work (``scale_pairs.py``): ``--ratio-rounds`` alternated pairs
of short phases, one agent then two (the order flipped each round), each offered the same paced
traffic (``--ratio-load`` of what one agent answered as fast as it could; two agents: half each;
``--ratio-per-agent``: each agent that traffic, as an autoscaler keeps replicas, and each the
whole ``score_budget``), with the documented ``score_budget`` split among the replicas
(``shared_score_budget``); the ratio is the median of the pairs'. The phases run as fast as
answered give theirs beside it (``two_agents_cpu_ratio_saturated``): there two agents, two load
generators and PostgreSQL contend for two cores. Every phase records the share of this VM's CPU time the hypervisor gave other
guests (``host_steal_share``): a noisy neighbour raises CPU per query for the same work.

Then a capacity model: cores for agents and for PostgreSQL (from the paced one-agent phases: an
agent below saturation, as a deployment runs) and disk per day at 1,000 and 10,000 queries/s.

    .venv/bin/python benchmarks/scale.py [--duration 300] [--ttl 60] [--threads 8] [--fill-duration 60] [--ratio-rounds 3]
    .venv/bin/python benchmarks/scale.py --quick --duration 60 --output /tmp/s.json   # one steady agent: before/after
    .venv/bin/python benchmarks/scale.py --quick --duration 60 --baseline HEAD~1 --output /tmp/s.json  # paired, one run
    .venv/bin/python benchmarks/scale.py --recapacity    # the capacity model again, from the results file

Absolute CPU per query depends on the machine (``machine``: its speed at bare OTLP parsing, in
this run; one day's VM here parsed 4x slower than another's). ``--baseline REV`` runs one steady
agent of commit REV just before this checkout's, on the same store, load generator and machine:
the ratio between them (``baseline.agent_cpu_ratio``) is what compares a change across days.
The machine drifts within a run too (an A/A pair here: 0.93x): pair runs with ``--baseline-last``.
``--target-origin`` first runs the benchmark the agent's target was set against, as it was
(``target_origin.py``): ``target_origin`` gives the target at this run's speed, and this run's
CPU per query at the origin's speed, as fast as answered and paced.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import Agent, checkout, spawn  # noqa: E402
from scale_capacity import RATES, capacity, reference_fill  # noqa: E402
from scale_machine import host_ticks, machine_speed, uptime  # noqa: E402
from scale_pairs import paced_pairs  # noqa: E402
from scale_postgres import Postgres  # noqa: E402
from scale_references import prefill_references  # noqa: E402
import target_origin  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
QUERIES_PER_REQUEST = 20
"""The default body: 20 queries (140 spans), an exporter posting without a batch in front."""
SAMPLE_EVERY_S = 5.0
TARGETS = {"agent_cpu_us_per_query": 450, "postgres_cpu_us_per_query": 150, "data_bytes_per_query": 2048,
           "two_agents_cpu_ratio": 1.05}


def shared_score_budget(tmp: str, n_agents: int) -> str:
    """The shipped sampling with ``score_budget`` divided among ``n_agents`` replicas, as its
    documentation says to (one replica scores at a time): the scorer gets the same pairs per second
    from two agents as from one. With the shipped 50 pairs/s each, two agents would score twice as
    much (100 pairs/s once each sees more than 500 queries/s), and their CPU per query would
    count that extra scoring as the cost of a second replica. Returns the file's path."""
    import yaml

    from rag_monitor.config_files import shipped_path

    config = yaml.safe_load(shipped_path("sampling_config").read_text())
    config["score_budget"] = config["score_budget"] / n_agents
    path = Path(tmp) / f"sampling-{n_agents}-replicas.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def phase(n_agents: int, server, tmp: str, args, *, steady: bool = True, duration: float | None = None,
          source: Path = ROOT, queries_per_s: float | None = None, name: str = "", share_score_budget: bool = True) -> dict:
    """``source``: the checkout the agents run (``--baseline``: another commit's worktree);
    ``queries_per_s``: the load paced to this rate in all, split evenly between the agents (else as
    fast as they answer); ``name``: set apart from other phases of as many agents;
    ``share_score_budget``: several agents divide ``score_budget`` (``shared_score_budget``), else
    each has all of it, as when every replica sees one replica's traffic."""
    duration = args.duration if duration is None else duration
    of_baseline = "" if source == ROOT else "base"
    database = f"scale{n_agents}{'' if steady else 'fill'}{of_baseline}{name}"
    url = server.create_database(database)
    if steady and not args.no_drift:
        prefill_references(url, "all-MiniLM-L6-v2", time.time())
    settings = {"RAG_MONITOR_STORE_URL": url, "RAG_MONITOR_RECENT_TTL_S": str(args.ttl),
                "RAG_MONITOR_PRUNE_INTERVAL_S": "10"}
    if not args.no_drift:
        settings["RAG_MONITOR_DETECTOR_PROFILES"] = "default"
    if n_agents > 1 and share_score_budget:
        settings["RAG_MONITOR_SAMPLING_CONFIG"] = shared_score_budget(tmp, n_agents)
    agents = [Agent(os.path.join(tmp, f"p{n_agents}-agent{i}{of_baseline}{name}"), settings, source) for i in range(n_agents)]
    pg = Postgres(server, database)
    per_request = args.queries_per_request
    pace = ["--requests-per-s", str(queries_per_s / n_agents / per_request)] if queries_per_s else []
    try:
        hammers = [spawn(["--hammer", str(a.otlp_port), str(args.threads), str(duration), str(per_request),
                          "--unique-queries", *pace])
                   for a in agents]
        queries0 = sum(a.metrics().get("queries", 0) for a in agents)
        agent_cpu0 = [sum(a.ps.cpu_times()[:4]) for a in agents]
        pg.reset_statements()
        pg.start_backend_sampling()
        pg_cpu0, counters0, autovacuum0 = pg.cpu_s(), pg.counters(), pg.autovacuum_runs()
        host0 = host_ticks()
        t0 = time.monotonic()
        for h in hammers:
            h.stdin.write("GO\n")
            h.stdin.flush()
        profiler = None
        if args.profile and steady and source == ROOT:  # py-spy (not a dependency: PY_SPY or PATH) on the first agent
            # --gil: only the thread running Python; a thread waiting in zlib or libpq to take the GIL back is not work.
            profiler = subprocess.Popen([os.environ.get("PY_SPY", "py-spy"), "record", "--pid", str(agents[0].proc.pid),
                                         "--duration", str(int(duration) - 5), "--rate", "100", "--format", "raw",
                                         "--nonblocking", "--gil", "-o", f"{args.profile}.agents{n_agents}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples = []
        while time.monotonic() - t0 < duration:
            time.sleep(SAMPLE_EVERY_S)
            c = pg.counters()
            samples.append({"t_s": round(time.monotonic() - t0, 1),
                            "queries": sum(a.metrics().get("queries", 0) for a in agents) - queries0,
                            "hot_mb": round(c["hot_bytes"] / 2**20, 2), "hot_partitions": int(c["hot_partitions"]),
                            "live_records": int(c["live_records"]),
                            "data_mb": round((c["data_bytes"] - counters0["data_bytes"]) / 2**20, 2)})
        outputs = [json.loads(h.communicate(timeout=duration + 120)[0].strip().splitlines()[-1]) for h in hammers]
        window = time.monotonic() - t0
        if profiler is not None:
            profiler.wait(timeout=60)
        time.sleep(2.0)  # the last accepted requests are counted
        queries = sum(a.metrics().get("queries", 0) for a in agents) - queries0
        host = {k: v - host0[k] for k, v in host_ticks().items()}
        agent_cpu = [sum(a.ps.cpu_times()[:4]) - c for a, c in zip(agents, agent_cpu0)]
        pg_cpu, counters = pg.cpu_s() - pg_cpu0, pg.counters()
        statements = pg.statements(int(queries))
        by_backend = pg.backend_cpu(int(queries))
        record_bytes = pg.one("SELECT avg(octet_length(record)) FROM recent_records")
        autovacuum = {t: n - autovacuum0.get(t, 0) for t, n in pg.autovacuum_runs().items() if n > autovacuum0.get(t, 0)}
        # Bytes written to tables and indexes: their growth before any slot can have expired.
        early = [s for s in samples if s["t_s"] <= args.ttl and s["queries"]]
        growth = early[-1]["data_mb"] * 2**20 / early[-1]["queries"] if early else None
        # The first slot has expired and been dropped by ttl + two slots (+ a pruning interval).
        late = [s["hot_mb"] for s in samples if s["t_s"] >= args.ttl + 2 * max(60, args.ttl // 6) + 20]
        per_query = lambda v: round(v / max(1, queries), 1)  # noqa: E731
        return {
            "agents": n_agents, "references": "full, period over (steady state)" if steady else "filling (fresh store)",
            "offered_queries_per_s": queries_per_s or "as fast as answered",
            "window_s": round(window, 1), "queries": int(queries),
            "queries_per_s": round(queries / window, 1),
            "agent_cpu_s": [round(c, 2) for c in agent_cpu],
            "agent_cpu_us_per_query": per_query(sum(agent_cpu) * 1e6),
            "postgres_cpu_us_per_query": per_query(pg_cpu * 1e6),
            "postgres_cpu_us_per_query_by_backend": by_backend,
            # Client backends' CPU outside any statement: parse, bind, commit, protocol (execution
            # time is wall time, so this is a lower bound on a loaded machine).
            "postgres_client_outside_statements_us_per_query": round(
                by_backend.get("client backend", 0.0) - statements["exec_us_per_query"], 1),
            "postgres_statements": statements,
            # The benchmark's own sampling (an autocommit statement a counter, and the snapshot's) left out.
            "transactions_per_query": round((counters["transactions"] - counters0["transactions"]
                                             - (len(counters) + 1) * (len(samples) + 1)) / max(1, queries), 4),
            "rows_inserted_per_query": round((counters["rows_inserted"] - counters0["rows_inserted"]) / max(1, queries), 3),
            "wal_bytes_per_query": per_query(counters["wal_bytes"] - counters0["wal_bytes"]),
            "data_bytes_per_query": round(growth, 1) if growth is not None else None,
            "hot_mb_after_first_drops": {"min": min(late), "max": max(late)} if late else None,
            "hot_record_bytes_avg": round(float(record_bytes or 0)),
            **hot_table_scale(samples, args.ttl),
            "autovacuum_runs": autovacuum,
            "hot_samples": samples,
            "hammer_status": [o["by_status"] for o in outputs],
            "load_generator_cpu_s": [o["cpu_s"] for o in outputs],
            "loadavg_1m_end": round(os.getloadavg()[0], 2),
            # Of this VM's CPU time in the window: busy, and taken by the hypervisor for other guests.
            "host_busy_share": round(host["busy"] / max(1, host["total"]), 3),
            "host_steal_share": round(host["steal"] / max(1, host["total"]), 3),
            "uptime_end": uptime(),
        }
    finally:
        for a in agents:
            a.stop()
        pg.conn.close()


def spans_per_query(queries_per_request: int) -> float:
    """Spans in each query of the load generator's bodies."""
    from load import PayloadFactory

    return PayloadFactory(queries_per_request, unique_queries=True).n_spans / queries_per_request


def print_phase(measured: dict) -> None:
    """One phase's figures as a JSON line while the run goes on (its hot-table samples left out)."""
    print(json.dumps({k: v for k, v in measured.items() if k != "hot_samples"}), flush=True)


def baseline_comparison(baseline: dict, one: dict) -> dict:
    """This checkout's steady agent against the baseline commit's, measured one after the other in
    this run. Absolute CPU per query depends on the machine (see ``machine``); the ratio does not."""
    keys = ("agent_cpu_us_per_query", "postgres_cpu_us_per_query", "queries_per_s", "data_bytes_per_query")
    return {"commit": baseline["commit"], "order": baseline["order"], **{f"baseline_{k}": baseline[k] for k in keys},
            "agent_cpu_ratio": round(one["agent_cpu_us_per_query"] / baseline["agent_cpu_us_per_query"], 3),
            "postgres_cpu_ratio": round(one["postgres_cpu_us_per_query"] / baseline["postgres_cpu_us_per_query"], 3),
            "phase": baseline}


def hot_table_scale(samples: list[dict], ttl: int) -> dict:
    """Whether the hot tables grow or only hold more traffic: their bytes per live record (the
    rows in the slots not dropped yet), flat if nothing accumulates whatever the rate; and each
    peak before a drop in KB per query/s of the traffic of the preceding ``slot + ttl`` seconds
    (what the live slots hold at a peak), the same for one agent and two if the size is only traffic."""
    slot = max(60, ttl // 6)
    after = [s for s in samples if s["t_s"] >= ttl + 2 * slot + 20 and s.get("live_records")]
    per_record = [round(s["hot_mb"] * 2**20 / s["live_records"]) for s in after]
    peaks = []
    for i in range(1, len(samples) - 1):
        if samples[i + 1]["hot_partitions"] < samples[i]["hot_partitions"] or samples[i + 1]["hot_mb"] < samples[i]["hot_mb"] / 2:
            before = [s for s in samples[:i] if s["t_s"] >= samples[i]["t_s"] - (slot + ttl)]
            if before and samples[i]["t_s"] > before[0]["t_s"]:
                rate = (samples[i]["queries"] - before[0]["queries"]) / (samples[i]["t_s"] - before[0]["t_s"])
                peaks.append({"t_s": samples[i]["t_s"], "hot_mb": samples[i]["hot_mb"], "queries_per_s": round(rate),
                              "kb_per_query_per_s": round(samples[i]["hot_mb"] * 2**20 / 1e3 / max(rate, 1e-9), 1)})
    return {"hot_bytes_per_live_record_after_first_drops": {"min": min(per_record), "max": max(per_record)} if per_record else None,
            "hot_peaks": peaks}


def main() -> None:
    from tests.services import PostgresServer, traversable_tmpdir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--ttl", type=int, default=60, help="recent_ttl_s: slots of max(60, ttl/6) s expire within the run")
    parser.add_argument("--threads", type=int, default=8, help="concurrent POSTers per agent")
    parser.add_argument("--queries-per-request", type=int, default=QUERIES_PER_REQUEST,
                        help="queries in each OTLP body (80: about the 512 spans the bridge's batch processor sends)")
    parser.add_argument("--no-drift", action="store_true", help="leave the drift profiles out")
    parser.add_argument("--recapacity", action="store_true", help="recompute the capacity model of the existing results file")
    parser.add_argument("--agents", default="1,2", help="the phases: agent processes on one PostgreSQL")
    parser.add_argument("--fill-duration", type=float, default=60.0,
                        help="seconds of one agent on a fresh store while the drift references fill (0: none)")
    parser.add_argument("--ratio-rounds", type=int, default=3,
                        help="alternated pairs of one and two agents at the same paced traffic (0: none)")
    parser.add_argument("--ratio-duration", type=float, default=90.0, help="seconds of each paced phase")
    parser.add_argument("--ratio-load", type=float,
                        help="the paced traffic, as a share of what one agent answered as fast as it could "
                             "(default 0.6; 0.3 with --ratio-per-agent)")
    parser.add_argument("--ratio-per-agent", action="store_true",
                        help="offer every agent the paced traffic (two agents: twice it in all), as an autoscaler "
                             "keeps replicas, instead of the same traffic in all")
    parser.add_argument("--ratio-rate", type=float, help="the paced traffic in queries/s (instead of --ratio-load)")
    parser.add_argument("--quick", action="store_true", help="one agent, steady state only (set --duration too)")
    parser.add_argument("--profile", help="py-spy raw profile of the first agent of each steady phase: PATH.agentsN")
    parser.add_argument("--output", help="write the results here instead of benchmarks/results/scale.json")
    parser.add_argument("--baseline", metavar="REV",
                        help="also run one steady agent of commit REV (a git worktree), just before this checkout's: "
                             "the same machine, load generator and store, for a ratio that holds across machines")
    parser.add_argument("--target-origin", action="store_true",
                        help="also run the benchmark the agent target was set against (benchmarks/target_origin.py) "
                             "first: the target at this machine's speed")
    parser.add_argument("--baseline-last", action="store_true",
                        help="run the baseline after this checkout's phases: a machine that drifts during a run "
                             "biases a pair one way, so pair runs of both orders")
    args = parser.parse_args()
    start_load = uptime()
    if args.recapacity:
        result = json.loads(RESULTS.read_text())
        result["capacity"] = [capacity(result["one_agent"], rate, result.get("paced_pairs")) for rate in RATES]
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        return print(json.dumps(result["capacity"], indent=2))
    if args.quick:  # one agent, steady state only: before/after a change to the request path
        args.agents, args.fill_duration, args.ratio_rounds = "1", 0.0, 0
    counts = [int(n) for n in args.agents.split(",")]
    if args.ratio_rounds and not args.ratio_rate and 1 not in counts:  # before the long phases, not after
        parser.error("--ratio-rounds needs a one-agent phase (--agents) or --ratio-rate")
    origin = None
    if args.target_origin:  # before PostgreSQL starts: the origin ran alone on SQLite
        with tempfile.TemporaryDirectory() as tmp:
            origin = target_origin.measure(tmp)
        print(json.dumps(origin), flush=True)
    root = traversable_tmpdir("rag-monitor-scale-pg-")
    server = PostgresServer(root)
    server.start("shared_preload_libraries=pg_stat_statements", "pg_stat_statements.max=1000")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fill = None
            if args.fill_duration and not args.no_drift:
                fill = phase(1, server, tmp, args, steady=False, duration=args.fill_duration)
                print_phase(fill)

            def run_baseline() -> dict:
                with checkout(args.baseline, tmp) as (source, commit):
                    measured = {"commit": commit, "order": "after" if args.baseline_last else "before",
                                **phase(1, server, tmp, args, source=source)}
                print_phase(measured)
                return measured

            baseline = run_baseline() if args.baseline and not args.baseline_last else None
            phases = {}
            for n in counts:
                phases[n] = phase(n, server, tmp, args)
                print_phase(phases[n])
            if args.baseline and args.baseline_last:
                baseline = run_baseline()
            paced = None
            if args.ratio_rounds:
                load = args.ratio_load or (0.3 if args.ratio_per_agent else 0.6)

                def paired_phase(n: int, **pacing: object) -> dict:
                    measured = phase(n, server, tmp, args, duration=args.ratio_duration, **pacing)
                    print_phase(measured)
                    return measured

                paced = paced_pairs(paired_phase, args, args.ratio_rate or load * phases[1]["queries_per_s"])
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    one, two = phases.get(1), phases.get(2)
    table = [capacity(one, rate, paced) for rate in RATES] if one else None
    result = {
        "script": "benchmarks/scale.py",
        "command": "python " + " ".join(["benchmarks/scale.py", *sys.argv[1:]]),
        "cpu_count": os.cpu_count(),
        "machine": machine_speed(),
        "uptime_start": start_load,
        "settings": {"duration_s": args.duration, "recent_ttl_s": args.ttl, "drift_profiles": not args.no_drift,
                     "sampling": "shipped (base 1%, complaints, score_rate 10%; score_budget 50 pairs/s divided among the agents, as documented)", "queries_per_request": args.queries_per_request,
                     "query_texts": "unique per query (documents repeat)",
                     "measured_in": "steady state: the drift references full and their capture period over "
                                    "(pre-filled, not measured); the fill is reported apart (reference_fill)"},
        "targets": TARGETS,
        "one_agent": one,
        "two_agents": two,
        # The target's measure: the paced pairs' (see paced_pairs); the saturated phases' beside it.
        "two_agents_cpu_ratio": paced["two_agents_cpu_ratio"] if paced else None,
        "two_agents_cpu_ratio_saturated": (round(two["agent_cpu_us_per_query"] / one["agent_cpu_us_per_query"], 3)
                                           if one and two else None),
        "paced_pairs": paced,
        "reference_fill": reference_fill(fill, one) if fill and one else None,
        "baseline": baseline_comparison(baseline, one) if baseline and one else None,
        "target_origin": (target_origin.against(origin, one["agent_cpu_us_per_query"], TARGETS["agent_cpu_us_per_query"],
                                                spans_per_query(args.queries_per_request), table[0] if paced else None)
                          if origin and one else None),
        "capacity": table,
        "note": "CPU per query, not throughput, is what scales on this 2-core machine shared with the load "
                "generators (and, when measured, other work: see uptime_start and each phase's uptime_end). "
                "The capacity table uses the steady state: what a team runs for months; the reference fill is a "
                "one-time cost (reference_fill.one_time_cpu_s).",
    }
    out = Path(args.output) if args.output else RESULTS
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("one_agent", "two_agents")}, indent=2))


if __name__ == "__main__":
    main()
