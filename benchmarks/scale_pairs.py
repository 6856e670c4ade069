"""Two agents against one at the same work: ``scale.py``'s paced pairs (``--ratio-rounds``).

The saturated phases put two agents, two load generators and PostgreSQL on this machine's two
cores; here every phase is paced below saturation and the pairs alternate, so that the ratio of CPU
per query says what a second replica costs, not what the machine's contention does.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

PAIR_KEYS = ("agents", "offered_queries_per_s", "window_s", "queries", "queries_per_s", "agent_cpu_s",
             "agent_cpu_us_per_query", "postgres_cpu_us_per_query", "transactions_per_query", "hammer_status",
             "load_generator_cpu_s", "loadavg_1m_end", "host_busy_share", "host_steal_share")


def paced_pairs(run_phase: Callable[..., dict], args, queries_per_s: float) -> dict:
    """Two agents' CPU per query over one agent's at the same offered traffic, below saturation.

    Run as fast as they are answered, two agents, two load generators and PostgreSQL contend for
    this machine's two cores (load averages of 4 to 5): what that costs per query is the machine's,
    not a second replica's, and it moved the saturated ratio between 0.94 and 1.21 from run to run.
    Here every phase is offered ``queries_per_s`` in all (two agents: half each), in
    ``args.ratio_rounds`` alternated pairs, the order flipped each round so that a machine that
    drifts during the run favours neither; the ratio is the median of the pairs'.

    ``args.ratio_per_agent``: every agent is offered ``queries_per_s`` (two agents: twice the
    traffic in all), as an autoscaler that holds each replica's utilisation keeps them, each with the
    whole ``score_budget``: every agent then scores the same share of its traffic as one. At the same
    traffic in all, one agent near its limit commits several requests per transaction and two
    half-loaded agents do not: that ratio moves with the load (0.948 at 550 queries/s, 1.221 at 846
    on one day), this one compares replicas that batch alike."""
    pairs = []
    for r in range(args.ratio_rounds):
        measured = {}
        for n in ((1, 2) if r % 2 == 0 else (2, 1)):
            offered = queries_per_s * (n if args.ratio_per_agent else 1)
            full = run_phase(n, queries_per_s=offered, name=f"pair{r}", share_score_budget=not args.ratio_per_agent)
            measured[n] = {k: full[k] for k in PAIR_KEYS}
        pairs.append({"order": list(measured), "one_agent": measured[1], "two_agents": measured[2],
                      "ratio": round(measured[2]["agent_cpu_us_per_query"] / measured[1]["agent_cpu_us_per_query"], 3)})
    return {
        "offered_queries_per_s": round(queries_per_s), "offered_to": "each agent" if args.ratio_per_agent else "the agents in all",
        "score_budget": "each agent all of it" if args.ratio_per_agent else "divided among the agents",
        "rounds": args.ratio_rounds, "duration_s": args.ratio_duration,
        "paired_ratios": [p["ratio"] for p in pairs],
        "two_agents_cpu_ratio": round(statistics.median(p["ratio"] for p in pairs), 3),
        "one_agent_cpu_us_per_query": [p["one_agent"]["agent_cpu_us_per_query"] for p in pairs],
        "two_agents_cpu_us_per_query": [p["two_agents"]["agent_cpu_us_per_query"] for p in pairs],
        "one_agent_postgres_cpu_us_per_query": [p["one_agent"]["postgres_cpu_us_per_query"] for p in pairs],
        "two_agents_postgres_cpu_us_per_query": [p["two_agents"]["postgres_cpu_us_per_query"] for p in pairs],
        "pairs": pairs,
    }
