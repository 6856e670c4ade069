"""False pages of the regeneration band (``RagRegenerationRateOutsideBand``) with week-to-week
variation, per 30 days, with an exact Poisson upper 95% limit, for each number of seasons.

The rule's arithmetic is the generator's (``regeneration_rules.band_half_width``, ``band_z``,
``band_t``; the PromQL's formula in numpy) on hourly windows (the rule's ``window``) of streams of
independent simulated weeks. A window's true regeneration probability is a daily profile (5% +-30%)
plus Gaussian week-to-week variation: a week-level, a day-level and an hour-level term, each
drawn afresh every week (the hour of the week repeats, its value does not). The band is learned
from the same hour of the ``S`` previous weeks, as ``offset 1w .. Sw`` does. A page is a run of
consecutive hourly windows outside the band with at least ``min_queries`` queries (one page
however long the run, as one firing alert); every page is false (nothing changed).

Cases:

- ``high_traffic``: 20,000 queries an hour and no binomial noise (the window's ratio is its true
  probability): the week-to-week spread alone decides, so the Student t term must carry the
  budget. The normal quantile of the old rule (``old_normal_z``) is shown beside it.
- ``low_traffic``: 60 queries an hour (+-60% over the day), binomial draws: the binomial term
  dominates, week-to-week variation small.
- ``holiday``: high traffic, and one week in 13 a holiday whose regeneration level is 40% higher
  all week (a week that differs): it pages while it lasts only if it is far outside what the
  seasons' spread allows, and it widens the band of the weeks that follow while it is in their
  history.

Writes ``benchmarks/results/regeneration_band.json``.
Run: ``PYTHONPATH=. .venv/bin/python benchmarks/regeneration_band.py`` (``--weeks`` per case and
season count; about 20 s with the default).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_monitor.alerts.generate import load_thresholds, parse_duration  # noqa: E402
from rag_monitor.alerts.regeneration_rules import band_half_width, band_t, band_z  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HOURS = 168
DAYS_PER_30 = 30.0
CASES = {
    # name: queries an hour, binomial noise, relative sd of the week, day and hour terms, holiday every N weeks
    "high_traffic": dict(per_hour=20_000, binomial=False, sd=(0.10, 0.05, 0.05), holiday_every=0),
    "low_traffic": dict(per_hour=60, binomial=True, sd=(0.03, 0.02, 0.02), holiday_every=0),
    "holiday": dict(per_hour=20_000, binomial=False, sd=(0.10, 0.05, 0.05), holiday_every=13),
}
BASE_RATIO = 0.05


def simulate_weeks(rng: np.random.Generator, streams: int, weeks: int, case: dict) -> tuple[np.ndarray, np.ndarray]:
    """(ratio, queries) of every hourly window, shape (streams, weeks, 168)."""
    hour = np.arange(HOURS)
    profile = BASE_RATIO * (1 + 0.3 * np.cos(2 * np.pi * (hour % 24 - 20) / 24))
    traffic = case["per_hour"] * (1 + 0.6 * np.cos(2 * np.pi * (hour % 24 - 14) / 24))
    week_sd, day_sd, hour_sd = case["sd"]
    shape = (streams, weeks, HOURS)
    relative = (week_sd * rng.standard_normal((streams, weeks, 1))
                + day_sd * np.repeat(rng.standard_normal((streams, weeks, 7)), 24, axis=2)
                + hour_sd * rng.standard_normal(shape))
    if case["holiday_every"]:
        holiday = (np.arange(weeks) % case["holiday_every"]) == case["holiday_every"] - 1
        relative = relative + 0.4 * holiday[None, :, None]
    p = np.clip(profile * (1 + relative), 0.0, 1.0)
    if not case["binomial"]:
        return p, np.broadcast_to(traffic, shape).astype(float)
    queries = rng.poisson(np.broadcast_to(traffic, shape))
    regenerated = rng.binomial(queries, p)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(queries > 0, regenerated / np.maximum(queries, 1), np.nan), queries.astype(float)


def pages(outside: np.ndarray) -> int:
    """Runs of consecutive outside windows along each stream's time axis (weeks x hours)."""
    flat = outside.reshape(outside.shape[0], -1)
    starts = flat[:, 1:] & ~flat[:, :-1]
    return int(starts.sum() + flat[:, 0].sum())


def poisson_upper(k: int, confidence: float = 0.95) -> float:
    """Exact one-sided upper confidence limit of a Poisson mean after ``k`` events."""
    from scipy.stats import chi2

    return float(chi2.ppf(confidence, 2 * (k + 1)) / 2)


def evaluate(rng: np.random.Generator, r: dict, case: dict, seasons: int, weeks: int, streams: int) -> dict:
    z, t = band_z(r), band_t(r)[seasons]
    ratio, queries = simulate_weeks(rng, streams, weeks + seasons, case)
    past = np.stack([ratio[:, seasons - k: seasons - k + weeks] for k in range(1, seasons + 1)])
    current, n = ratio[:, seasons:], queries[:, seasons:]
    with np.errstate(invalid="ignore"):
        baseline = np.nanmean(past, axis=0)
        stdvar = np.nanvar(past, axis=0)
        present = np.sum(~np.isnan(past), axis=0)
    guard = (n >= r["min_queries"]) & (present == seasons) & ~np.isnan(current)

    holiday = np.zeros(weeks, dtype=bool)
    if case["holiday_every"]:  # the week itself (its level truly differs): its pages are counted apart
        holiday = ((np.arange(weeks) + seasons) % case["holiday_every"]) == case["holiday_every"] - 1
    ordinary = ~holiday[None, :, None]

    def false_pages(half: np.ndarray) -> tuple[int, int, int]:
        outside = guard & ((current > baseline + half) | (current < np.maximum(baseline - half, 0)))
        return pages(outside & ordinary), int((outside & ordinary).sum()), pages(outside & ~ordinary)

    new_pages, new_windows, holiday_pages = false_pages(band_half_width(baseline, n, stdvar, seasons, z, t, r["min_band"]))
    # The old rule: the normal z on both terms.
    old_half = np.maximum(z * np.sqrt(baseline * (1 - baseline) / np.maximum(n, 1) + stdvar * (1 + 1 / seasons)), r["min_band"])
    old_pages, _, _ = false_pages(old_half)
    months = streams * int((~holiday).sum()) * 7 / DAYS_PER_30
    out = {
        "seasons": seasons, "t": t, "months": round(months, 1),
        "false_pages": new_pages, "false_pages_per_30d": new_pages / months,
        "upper95_per_30d": poisson_upper(new_pages) / months,
        "windows_outside_per_30d": new_windows / months,
        "old_normal_z_false_pages_per_30d": old_pages / months,
    }
    if case["holiday_every"]:
        out["pages_in_holiday_weeks_per_holiday"] = holiday_pages / (streams * int(holiday.sum()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weeks", type=int, default=3000, help="simulated weeks per case and season count")
    parser.add_argument("--streams", type=int, default=50, help="independent streams the weeks are split over")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    r = load_thresholds()["regeneration"]
    if parse_duration(r["window"]) != 3600 or parse_duration(r["season"]) != 7 * 86400:
        raise SystemExit("the simulation models 1h windows and 1w seasons: thresholds.yaml says otherwise")
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    results: dict[str, list[dict]] = {}
    for name, case in CASES.items():
        results[name] = [evaluate(rng, r, case, s, args.weeks // args.streams, args.streams)
                         for s in range(r["min_seasons"], r["seasons"] + 1)]
        for row in results[name]:
            print(name, json.dumps(row), flush=True)
    out = {
        "script": "benchmarks/regeneration_band.py",
        "command": " ".join(["PYTHONPATH=. .venv/bin/python benchmarks/regeneration_band.py", *sys.argv[1:]]),
        "z": band_z(r), "t_by_seasons": {str(k): v for k, v in band_t(r).items()},
        "thresholds": {k: r[k] for k in ("window", "season", "seasons", "min_seasons", "false_pages_per_30d", "min_band", "min_queries")},
        "cases": {name: {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in CASES[name].items()}, "by_seasons": rows}
                  for name, rows in results.items()},
        "worst_upper95_per_30d": max(row["upper95_per_30d"] for rows in results.values() for row in rows),
        "seconds": round(time.perf_counter() - started, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "regeneration_band.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
