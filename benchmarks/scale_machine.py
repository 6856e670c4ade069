"""The machine a ``benchmarks/scale.py`` run measured on: its speed at the agent's kind of work, its
load, and the CPU time the hypervisor gave other guests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def machine_speed() -> dict:
    """The machine's speed at the agent's kind of work: ``benchmarks/ingest_decode.py``'s baseline
    (protobuf parsing and attributes read into dicts, one core), in spans per CPU second. CPU per
    query scales with it from one machine to another; the results files of other days say theirs."""
    from ingest_decode import baseline, build_payloads

    payloads = build_payloads()
    baseline(payloads)  # warm
    start = time.process_time()
    spans = sum(baseline(payloads) for _ in range(5))
    return {"bare_otlp_parse_spans_per_cpu_s": round(spans / (time.process_time() - start)),
            "what": "benchmarks/ingest_decode.py's baseline in this run"}


def host_ticks() -> dict[str, int]:
    """This VM's CPU time so far from ``/proc/stat``, in ticks: busy, stolen (by the hypervisor for
    other guests: a noisy neighbour), and in all."""
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in Path("/proc/stat").read_text().split()[1:9])
    return {"busy": user + nice + system + irq + softirq, "steal": steal,
            "total": user + nice + system + idle + iowait + irq + softirq + steal}


def uptime() -> str:
    """The machine's load (other work shares its cores): ``uptime``'s line."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
