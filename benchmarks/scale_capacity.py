"""``benchmarks/scale.py``'s capacity model: cores and disk per day at 1,000 and 10,000 queries/s from
a run's measured phases, and the drift references' fill as a one-time cost."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


DEFAULT_TTL_S = 3600
"""The shipped ``recent_ttl_s``: how long the hot tables hold each query."""


def history_bytes_per_query(one: dict) -> float | None:
    """Bytes the history tables (everything but the hot ones) grew per query over the run: the
    slope of (all tables' growth - the hot tables' size) between the first and the last sample."""
    samples = [s for s in one["hot_samples"] if s["queries"]]
    if len(samples) < 2 or samples[-1]["queries"] <= samples[0]["queries"]:
        return None
    rest = [(s["data_mb"] - s["hot_mb"]) * 2**20 for s in (samples[0], samples[-1])]
    return max(0.0, (rest[1] - rest[0]) / (samples[-1]["queries"] - samples[0]["queries"]))


def capacity(one: dict, rate: int, paced: dict | None = None) -> dict:
    """Cores and disk at ``rate`` queries/s from the measured cost per query (cores at 70% busy):
    WAL written per day, history tables grown per day (kept ``history_retention_days``), and the
    hot tables' size at the shipped ttl (flat: their partitions are dropped whole).

    CPU per query from the paced one-agent phases (``paced``, their median) when there are: an
    agent run as fast as it is answered commits several requests per transaction, one that is
    not saturated mostly one, and a transaction's fixed cost then falls on fewer queries."""
    import statistics

    history = history_bytes_per_query(one)
    agent_us, postgres_us = one["agent_cpu_us_per_query"], one["postgres_cpu_us_per_query"]
    if paced:
        agent_us = statistics.median(paced["one_agent_cpu_us_per_query"])
        postgres_us = statistics.median(paced["one_agent_postgres_cpu_us_per_query"])
    return {
        "queries_per_s": rate,
        "cpu_from": "paced one-agent phases (median)" if paced else "one agent as fast as answered",
        "agent_cpu_us_per_query": agent_us, "postgres_cpu_us_per_query": postgres_us,
        "agent_cores": round(agent_us * rate / 1e6 / 0.7, 1),
        "postgres_cores": round(postgres_us * rate / 1e6 / 0.7, 1),
        "wal_gb_per_day": round(one["wal_bytes_per_query"] * rate * 86400 / 1e9, 1),
        "history_gb_per_day": round(history * rate * 86400 / 1e9, 1) if history is not None else None,
        "hot_table_gb_per_hour_of_ttl": round((one["data_bytes_per_query"] or 0) * rate * 3600 / 1e9, 2),
        "hot_tables_gb_at_default_ttl": round((one["data_bytes_per_query"] or 0) * rate * DEFAULT_TTL_S / 1e9, 1),
    }


RATES = (1_000, 10_000)


def reference_fill(fill: dict, steady: dict) -> dict:
    """The drift references' fill as a one-time cost. While a reference fills every query is
    embedded; afterwards Algorithm R keeps query n with chance k/n until the capture period ends,
    so over a period of N queries about k (1 + ln(N/k)) are embedded, each costing the measured
    difference between the fill and the steady state."""
    import math

    from rag_monitor.agent.drift.profiles import load_profiles

    profiles = load_profiles(ROOT / "rag_monitor" / "defaults" / "detectors" / "profiles.yaml")
    k = max(p.reference_size for p in profiles if p.signal.endswith("_embedding"))
    days = max(p.reference_days or 0 for p in profiles)
    extra_us = max(0.0, fill["agent_cpu_us_per_query"] - steady["agent_cpu_us_per_query"])
    embedded = {rate: k * (1 + math.log(max(1.0, rate * days * 86400 / k))) for rate in RATES}
    return {
        "agent_cpu_us_per_query_while_filling": fill["agent_cpu_us_per_query"],
        "agent_cpu_us_per_query_steady": steady["agent_cpu_us_per_query"],
        "extra_us_per_embedded_query": round(extra_us, 1),
        "reference_size": k, "reference_days": days,
        "one_time_cpu_s": [{"queries_per_s": rate, "queries_embedded": int(n), "cpu_s": round(extra_us * n / 1e6)}
                           for rate, n in embedded.items()],
        "phase": fill,
    }
