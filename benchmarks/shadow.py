"""Production latency with a shadow candidate that always times out, against no shadow, in one process.

A simulated production request (~2 ms: a wait like a model call, a little CPU, a traced query
with three stages) runs in two interleaved arms: (a) no shadow; (b) ``q.shadow(...)`` on every
query with a candidate that waits 20x its 50 ms timeout (a slow model), so the runner is always
saturated: two candidates overrunning, eight waiting, the rest dropped. Budget: production's p50
and p99 with the shadow within noise of the baseline (ratio ~1.0). (c) the same with a CPU-bound
candidate, for information: in CPython a candidate that computes holds the GIL, so it competes
with production's own Python code (run such a candidate in another process).

Rounds alternate the arms and the medians of the per-round percentiles are taken.
Writes benchmarks/results/shadow.json.

    .venv/bin/python benchmarks/shadow.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rag_monitor  # noqa: E402
from rag_monitor.sdk import ShadowConfig  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "shadow.json"
TIMEOUT_S = 0.05


class DiscardingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def request(monitor, i: int, shadow=None) -> float:
    """One production request; its latency in seconds."""
    start = time.perf_counter()
    with monitor.query(f"How do I cancel plan {i}?", tenant="acme") as q:
        if shadow is not None:
            q.shadow("slow-candidate", shadow)
        with q.retrieve() as r:
            sum(range(2000))  # a little CPU
            r.documents([{"id": "doc-1", "content": "Cancel under Settings > Billing.", "score": 0.8}])
        with q.generate(model="gpt-4o-mini") as g:
            time.sleep(0.002)  # the model call
            g.tokens(prompt=300, completion=20)
        q.answer("Cancel under Settings > Billing.", citations=["doc-1"])
    return time.perf_counter() - start


def sleeping_candidate(ctx) -> None:
    ctx.cancelled.wait(20 * TIMEOUT_S)  # ignores the deadline as a slow model would, stops only when told...
    time.sleep(0.5)  # ... and then some: it overruns its timeout whatever happens


def computing_candidate(ctx) -> None:
    end = time.perf_counter() + 20 * TIMEOUT_S
    while time.perf_counter() < end and not ctx.cancelled.is_set():
        sum(range(1000))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


ARMS = ("baseline", "timing_out", "cpu_bound")


def measure(rounds: int = 10, per_round: int = 200, arms: tuple[str, ...] = ARMS) -> dict:
    """Interleaved arms; per arm the medians of per-round p50 and p99 (seconds) and the runner's counts."""
    monitors = {arm: rag_monitor.init("bench", span_exporter=DiscardingExporter(),
                                      shadow=ShadowConfig(share=1.0, timeout_s=TIMEOUT_S, max_concurrency=2, max_pending=8))
                 for arm in arms}
    candidates = {"baseline": None, "timing_out": sleeping_candidate, "cpu_bound": computing_candidate}
    p50s: dict[str, list[float]] = {arm: [] for arm in monitors}
    p99s: dict[str, list[float]] = {arm: [] for arm in monitors}
    try:
        for arm, monitor in monitors.items():  # warm up
            for i in range(50):
                request(monitor, i, candidates[arm])
        for r in range(rounds):
            order = list(monitors) if r % 2 == 0 else list(monitors)[::-1]
            for arm in order:
                latencies = [request(monitors[arm], i, candidates[arm]) for i in range(per_round)]
                p50s[arm].append(percentile(latencies, 0.5))
                p99s[arm].append(percentile(latencies, 0.99))
    finally:
        for monitor in monitors.values():
            monitor.shutdown(timeout_s=5.0)
    stats = {arm: vars(monitors[arm].shadow_stats()) for arm in monitors if arm != "baseline"}
    out: dict = {"arms": {}}
    for arm in monitors:
        out["arms"][arm] = {"p50_s": statistics.median(p50s[arm]), "p99_s": statistics.median(p99s[arm])}
    base = out["arms"]["baseline"]
    for arm in [a for a in arms if a != "baseline"]:
        a = out["arms"][arm]
        a["ratio_p50_over_baseline"] = a["p50_s"] / base["p50_s"]
        a["ratio_p99_over_baseline"] = a["p99_s"] / base["p99_s"]
        a["shadow_stats"] = stats[arm]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args(argv)
    result = measure(rounds=3, per_round=100) if args.quick else measure()
    result.update({"script": "benchmarks/shadow.py", "timeout_s": TIMEOUT_S, "python": platform.python_version(),
                   "machine": platform.machine(), "quick": args.quick})
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    t = result["arms"]["timing_out"]
    print(f"timing-out candidate: p50 {t['ratio_p50_over_baseline']:.2f}x, p99 {t['ratio_p99_over_baseline']:.2f}x of no shadow;"
          f" {t['shadow_stats']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
