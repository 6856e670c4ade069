"""The agent target's origin, measured again on this machine: what the target is at today's speed.

Issue #23 set the agent's target, 450 us of CPU per query (about 70 us per span), below the
round-2 agent's 84.5 us per span: one agent on SQLite in that round's ``benchmarks/replicas.py``
(commit ``ORIGIN_COMMIT``, the lowest of its three one-agent phases). CPU per query follows the
machine, and this VM's speed swings twofold between days (``machine`` in scale.json). So this
runs that commit's own benchmark, unchanged, in its own worktree in the same run as the scale
phases, takes the same statistic, and scales the target by it: at today's speed the target is
450 x (its us per span today / 84.5). Per span (the target's own terms: 70 us against 84.5), the
agent is compared with the origin measured today. ``scale.py`` runs it before its phases (``--target-origin``).

    .venv/bin/python benchmarks/target_origin.py     # alone: the origin's figure today
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import checkout  # noqa: E402

ORIGIN_COMMIT = "049ef50"
"""The commit whose ``benchmarks/results/replicas.json`` holds the 84.5 us per span the target was set against."""
ORIGIN_US_PER_SPAN = 84.5
ORIGIN_COMMAND = ["benchmarks/replicas.py", "--duration", "20", "--rounds", "3"]


def measure(tmp: str) -> dict:
    """The origin's benchmark in its worktree: its one-agent phases' CPU per span, today."""
    with checkout(ORIGIN_COMMIT, tmp, name="origin") as (path, commit):
        committed = json.loads((path / "benchmarks" / "results" / "replicas.json").read_text())
        then = min(p["agent_cpu_us_per_span"] for p in committed["one_agent"])
        assert then == ORIGIN_US_PER_SPAN, f"{ORIGIN_COMMIT}'s replicas.json says {then} us per span"
        run = subprocess.run([sys.executable, *ORIGIN_COMMAND], cwd=path, capture_output=True, text=True, timeout=1800)
        if run.returncode != 0:
            raise SystemExit(f"the origin's benchmark failed: {run.stderr.strip()[-1000:]}")
        today = json.loads((path / "benchmarks" / "results" / "replicas.json").read_text())
    phases = [p["agent_cpu_us_per_span"] for p in today["one_agent"]]
    return {"commit": commit, "command": "python " + " ".join(ORIGIN_COMMAND) + " (in that commit's worktree)",
            "origin_cpu_us_per_span_then": ORIGIN_US_PER_SPAN, "origin_cpu_us_per_span_phases": phases,
            "origin_cpu_us_per_span": min(phases), "machine_factor": round(min(phases) / ORIGIN_US_PER_SPAN, 3)}


def against(origin: dict, agent_cpu_us_per_query: float, target_us_per_query: float, spans_per_query: float,
            paced: dict | None = None) -> dict:
    """The target at this run's speed, this run's agent at the origin's, and per span against the
    origin measured today (the target's own terms: per span, against the round-2 agent's).

    ``paced``: ``capacity``'s CPU per query below saturation (the paced one-agent phases' median,
    agent and PostgreSQL), also at the origin's speed: the origin ran as fast as answered, a
    deployment runs below saturation, and the target is judged on both."""
    factor = origin["machine_factor"]
    per_span = agent_cpu_us_per_query / spans_per_query
    out = {**origin,
           "agent_target_us_per_query_at_this_speed": round(target_us_per_query * factor, 1),
           "agent_cpu_us_per_query_at_origin_speed": round(agent_cpu_us_per_query / factor, 1),
           "agent_cpu_us_per_span": round(per_span, 1),
           "agent_per_span_over_origin": round(per_span / origin["origin_cpu_us_per_span"], 3),
           "target_per_span_over_origin": round(target_us_per_query / spans_per_query / ORIGIN_US_PER_SPAN, 3),
           "meets_target": agent_cpu_us_per_query <= target_us_per_query * factor}
    if paced:
        out.update({
            "paced_agent_cpu_us_per_query_at_origin_speed": round(paced["agent_cpu_us_per_query"] / factor, 1),
            "paced_postgres_cpu_us_per_query_at_origin_speed": round(paced["postgres_cpu_us_per_query"] / factor, 1),
            "paced_meets_target": paced["agent_cpu_us_per_query"] <= target_us_per_query * factor})
    return out


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        print(json.dumps(measure(directory), indent=2))
