"""False drift pages per 30 days under a shared reference, and time to page a 10% new topic.

Real embeddings: banking77 training queries (all-MiniLM-L6-v2, ``drift_data.py``), 10 intents held
out as the new topic. Traffic has a daily cycle (rate +-60%, every intent's share +-80% around its
own peak hour), so hour matching matters. Each simulated *deployment* captures one reference
reservoir (``reference_size`` items, uniform over a week of traffic: what Algorithm R keeps) and
then tests day after day against it, exactly as the agent does: the window is a uniform sample of
the interval (the feed's reservoir of ``current_size`` per interval), the reference is a fresh hour-matched draw (``detectors.references.draw_reference``), the test
is the profile's detector (``detectors.profiles.score_window``) and the page is the profile's rule
(``detectors/paging.py``), all from the shipped ``rag_monitor/defaults/detectors/profiles.yaml``.

The novelty profile (``window_s``) tests every 6 hours a sample of the trailing day: the
simulation keeps the feed's per-slot reservoirs of a stream of ``DAILY_QUERIES`` queries a day
(``Stream``), so consecutive windows share items as the agent's do.

Deployments are independent (each its own reference); days within one share it, which is the
dependence the page rule must survive. Reported per profile: false pages over the simulated
months with the exact Poisson upper 95% limit per 30 days, the per-reference spread of mean p and
of p <= 0.05 next to what independent uniform p-values would give, and, for the power case, the
hours from the start of a 10% new topic (at a random hour) to the page.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/drift_paging.py --profiles query-mmd:4x30,document-mmd:3x30,intent-chi-square:4x30``
(about 10 s per MMD test on a busy core, so most of an hour; ``--profiles query-novelty:10x30
--power-starts 8``: 1,200 null tests and the power starts took 37 minutes on a core shared with
other jobs, 1.8 s a test, most of it the 4,000 x 5,000 similarity matrix; ``--more --profiles query-mmd:2`` adds
two deployments to a profile already measured: the results file lists every command) or
``--quick`` (minutes). Writes ``benchmarks/results/drift_paging.json`` (``drift_paging_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from drift_data import banking77, embed  # noqa: E402

from rag_monitor.agent.drift.profiles import load_profiles  # noqa: E402
from rag_monitor.config_files import shipped_path  # noqa: E402
from rag_monitor.detectors.profiles import score_window  # noqa: E402
from rag_monitor.detectors.references import draw_reference  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HOUR, DAY = 3600.0, 86400.0
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
SHIFT_SHARE = 0.1
DAILY_QUERIES = 20_000
"""Traffic of the trailing-window profiles' stream (the share two overlapping windows' samples have in common)."""


@dataclass
class Window:
    """What ``store.reservoirs.window`` returns, for the functions the agent's runs call."""

    values: object
    times: np.ndarray
    trace_ids: list


class Traffic:
    """Daily-cycle traffic over banking77 queries; one item per query for each embedding signal."""

    def __init__(self, seed: int):
        texts, intents = banking77()
        vectors = embed(texts, "banking77_train")
        rng = np.random.default_rng(seed)
        names = np.unique(intents)
        held = rng.choice(names, size=10, replace=False)
        known = np.flatnonzero(~np.isin(intents, held))
        self.new_topic = np.flatnonzero(np.isin(intents, held))
        documents = rng.choice(known, size=400, replace=False)
        self.pool = np.setdiff1d(known, documents)
        self.intents = intents
        pool_intents = intents[self.pool]
        self.names = np.unique(pool_intents)
        self.by_intent = [self.pool[pool_intents == n] for n in self.names]
        self.peak = rng.uniform(0, 24, size=len(self.names))
        # the document signal's item: the normalised mean of the query's 3 nearest "documents",
        # one of 5 popular documents in the third place for a quarter of the queries
        self.query_vectors = vectors
        doc_vectors = vectors[documents]
        nearest = np.argsort(-(vectors @ doc_vectors.T), axis=1)[:, :3]
        popular = rng.choice(len(documents), size=5, replace=False)
        swapped = nearest.copy()
        swapped[:, 2] = popular[np.arange(len(vectors)) % 5]
        self.document_vectors = {False: _unit(doc_vectors[nearest].mean(axis=1)), True: _unit(doc_vectors[swapped].mean(axis=1))}

    def rate(self, hours: np.ndarray) -> np.ndarray:
        return 1 + 0.6 * np.cos(2 * np.pi * (hours % 24 - 14) / 24)

    def times(self, rng, start: float, end: float, n: int) -> np.ndarray:
        """``n`` query times in ``[start, end)`` following the daily rate (rejection sampling)."""
        out = np.empty(0)
        while out.size < n:
            t = rng.uniform(start, end, size=2 * n)
            t = t[rng.random(t.size) * 1.6 < self.rate(t / HOUR)]
            out = np.concatenate([out, t])
        return np.sort(out[:n])

    def rows(self, rng, times: np.ndarray, shift_from: float = math.inf) -> np.ndarray:
        hours = (times / HOUR) % 24
        weights = 1 + 0.8 * np.cos(2 * np.pi * (hours[:, None] - self.peak[None, :]) / 24)
        cumulative = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
        chosen = (rng.random(len(times))[:, None] > cumulative).sum(axis=1)
        rows = np.array([self.by_intent[i][rng.integers(len(self.by_intent[i]))] for i in chosen])
        moved = (times >= shift_from) & (rng.random(len(times)) < SHIFT_SHARE)
        rows[moved] = rng.choice(self.new_topic, size=int(moved.sum()))
        return rows

    def values(self, rng, signal: str, rows: np.ndarray):
        if signal == "query_embedding":
            return self.query_vectors[rows]
        if signal == "document_embedding":
            popular = rng.random(len(rows)) < 0.25
            return np.where(popular[:, None], self.document_vectors[True][rows], self.document_vectors[False][rows])
        return [str(v) for v in self.intents[rows]]

    def window(self, rng, signal: str, start: float, end: float, n: int, shift_from: float = math.inf):
        times = self.times(rng, start, end, n)
        rows = self.rows(rng, times, shift_from)
        return Window(self.values(rng, signal, rows), times, [f"{int(t * 1e6):x}-{k}" for k, t in enumerate(times)])


class Stream:
    """The feed's current window of one deployment: per ``interval_s`` slot, the ``current_size``
    queries with the smallest trace-id hashes among the slot's traffic (``daily_queries`` a day,
    following the daily rate); a trailing window is the smallest hashes of its slots, so
    consecutive windows share items as the agent's do (``jobs._trailing_window``)."""

    def __init__(self, traffic: Traffic, profile, rng, daily_queries: int, shift_from: float = math.inf):
        self.traffic, self.profile, self.rng = traffic, profile, rng
        self.daily_queries, self.shift_from = daily_queries, shift_from
        self._slots: dict[float, tuple] = {}

    def _slot(self, start: float) -> tuple:
        if start not in self._slots:
            end, size = start + self.profile.interval_s, self.profile.current_size
            hours = np.linspace(start, end, 64) / HOUR
            queries = self.rng.poisson(self.daily_queries * self.traffic.rate(hours).mean() * (end - start) / DAY)
            hashes = np.sort(self.rng.random(queries))[:size]  # the slot's smallest hashes ...
            times = self.traffic.times(self.rng, start, end, hashes.size)  # ... belong to queries at any time of it
            order = self.rng.permutation(hashes.size)
            times = times[order]
            rows = self.traffic.rows(self.rng, times, self.shift_from)
            self._slots[start] = (hashes, times, self.traffic.values(self.rng, self.profile.signal, rows))
        return self._slots[start]

    def window(self, end: float) -> Window:
        slots = [self._slot(end - self.profile.window_s + i * self.profile.interval_s)
                 for i in range(int(round(self.profile.window_s / self.profile.interval_s)))]
        hashes = np.concatenate([s[0] for s in slots])
        keep = np.sort(np.argsort(hashes)[: self.profile.current_size])
        times = np.concatenate([s[1] for s in slots])[keep]
        values = np.concatenate([s[2] for s in slots])[keep]
        return Window(values, times, [f"{h:.17f}" for h in hashes[keep]])


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_one(traffic: Traffic, profile, rng, reference: Window, slot_end: float, shift_from: float = math.inf,
             stream: Stream | None = None) -> float:
    """One scheduled run at ``slot_end``: the window is the interval's reservoir (``current_size``
    queries, a uniform sample of the interval, as the feed keeps), or the trailing ``window_s``
    of ``stream`` for a profile with overlapping windows."""
    if stream is not None:
        window = stream.window(slot_end)
    else:
        window = traffic.window(rng, profile.signal, slot_end - profile.interval_s, slot_end, profile.current_size, shift_from)
    seed = int(rng.integers(2**62))
    matched, _, _ = draw_reference(profile, reference, window.times, seed)
    return float(score_window(profile, matched, window.values, seed).p_value)


def poisson_upper(k: int, exposure: float, level: float = 0.95) -> float:
    """Exact (Garwood) one-sided upper limit of a Poisson rate: k events in ``exposure`` units."""
    from scipy.stats import chi2

    return float(chi2.ppf(level, 2 * (k + 1)) / 2 / exposure)


def null_references(traffic: Traffic, profile, first: int, count: int, days: float, seed: int) -> list[dict]:
    """Deployments ``first .. first + count - 1`` (each its own reference), ``days`` of tests each."""
    rule = profile.page_rule()
    runs = int(round(days * DAY / profile.interval_s))
    rows, started = [], time.perf_counter()
    for k in range(first, first + count):
        rng = np.random.default_rng([seed, k])
        week = traffic.window(rng, profile.signal, START, START + 7 * DAY, profile.reference_size)
        stream = Stream(traffic, profile, rng, DAILY_QUERIES) if profile.window_s else None
        first = START + 7 * DAY + (profile.window_s or profile.interval_s)  # the first full window after the reference
        p_values = [test_one(traffic, profile, rng, week, first + run * profile.interval_s, stream=stream) for run in range(runs)]
        page_flags = [rule.pages(rule.log_evidence(p)) for p in p_values]
        # a page is a test that pages after one that did not (consecutive paging tests are one page)
        pages = sum(1 for i, f in enumerate(page_flags) if f and (i == 0 or not page_flags[i - 1]))
        rows.append({"reference": k, "tests": runs, "mean_p": float(np.mean(p_values)),
                     "share_p_below_0.05": float(np.mean(np.array(p_values) < 0.05)), "min_p": float(min(p_values)), "pages": pages})
        print(f"  {profile.name}: reference {k}, {runs} tests, mean p {np.mean(p_values):.3f}, {pages} pages, "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    return rows


def summarise_null(profile, rows: list[dict], days: float) -> dict:
    """False pages over every deployment's days, the Poisson limit, and the shared reference's footprint."""
    rule = profile.page_rule()
    runs = int(round(days * DAY / profile.interval_s))
    pages = sum(r["pages"] for r in rows)
    months = len(rows) * days / 30
    means = np.array([r["mean_p"] for r in rows])
    below = np.array([r["share_p_below_0.05"] for r in rows])
    return {
        "references": len(rows), "days_per_reference": days, "tests": len(rows) * runs, "simulated_months": months,
        "false_pages": pages, "false_pages_per_30_days": pages / months,
        "false_pages_per_30_days_upper95": poisson_upper(pages, months),
        "bound_expected_false_pages_per_30_days": rule.expected_false_pages_per_30d(profile.interval_s),
        "page_threshold": rule.threshold, "page_at_p_at_most": 1 / rule.threshold, "p_floor": rule.p_floor,
        # the shared reference's footprint: the spread of per-reference means against independent uniform p
        "per_reference_mean_p_range": [float(means.min()), float(means.max())],
        "per_reference_mean_p_sd": float(means.std(ddof=1)) if len(rows) > 1 else None,
        "independent_mean_p_sd": math.sqrt(1 / 12 / runs),
        "per_reference_share_below_0.05_range": [float(below.min()), float(below.max())],
        "share_below_0.05": float(below.mean()),
        "per_reference": rows,
    }


def power(traffic: Traffic, profile, starts: int, seed: int, max_days: int = 3) -> dict:
    """Hours from a 10% new topic starting at a random time to the first paging test."""
    rule = profile.page_rule()
    hours, started = [], time.perf_counter()
    for k in range(starts):
        rng = np.random.default_rng([seed, 1000 + k])
        week = traffic.window(rng, profile.signal, START, START + 7 * DAY, profile.reference_size)
        first_run = START + 8 * DAY
        shift_from = first_run - rng.uniform(0, profile.interval_s)  # a random time in the interval before a run
        stream = Stream(traffic, profile, rng, DAILY_QUERIES, shift_from) if profile.window_s else None
        found = None
        for run in range(int(max_days * DAY / profile.interval_s)):
            slot_end = first_run + run * profile.interval_s
            if rule.pages(rule.log_evidence(test_one(traffic, profile, rng, week, slot_end, shift_from, stream))):
                found = (slot_end - shift_from) / HOUR
                break
        hours.append(found)
    paged = [h for h in hours if h is not None]
    return {"starts": starts, "paged": len(paged), "hours_to_page": hours,
            "median_hours_to_page": float(np.median(paged)) if paged else None,
            "max_hours_to_page": max(paged) if paged else None,
            "paged_within_24h": sum(1 for h in paged if h <= 24),
            "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer references and days (a smoke run)")
    parser.add_argument("--references", type=int, default=None, help="independent deployments (references) per profile")
    parser.add_argument("--days", type=float, default=None, help="days tested against each reference")
    parser.add_argument("--power-starts", type=int, default=None, help="new-topic starts per profile")
    parser.add_argument("--profiles", default="query-mmd,document-mmd,intent-chi-square,query-novelty",
                        help="profiles of the shipped detectors/profiles.yaml, each optionally NAME:REFERENCESxDAYS")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--more", action="store_true",
                        help="add NAME:REFERENCES deployments (the next ones, same days) to the profiles in the results file")
    args = parser.parse_args()
    default_references = args.references or (2 if args.quick else 10)
    default_days = args.days or (15 if args.quick else 30)
    starts = args.power_starts or (2 if args.quick else 8)
    traffic = Traffic(args.seed)
    profiles = {p.name: p for p in load_profiles(shipped_path("detector_profiles"))}
    header = {"data": "banking77 train queries, all-MiniLM-L6-v2; 10 intents held out as the new topic",
              "traffic": {"daily_rate_swing": 0.6, "daily_intent_share_swing": 0.8, "reference_days": 7,
                          "new_topic_share": SHIFT_SHARE}}
    path = RESULTS / ("drift_paging_quick.json" if args.quick else "drift_paging.json")
    command = "python benchmarks/drift_paging.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    for spec in args.profiles.split(","):
        name, _, size = spec.partition(":")
        profile = profiles[name]
        references = int(size.split("x")[0]) if size else default_references
        days = float(size.split("x")[1]) if "x" in size else default_days
        if args.more:  # more deployments for a profile already measured: their rows join the earlier ones
            result = json.loads(path.read_text())["profiles"][name]
            earlier, days = result["null"]["per_reference"], result["null"]["days_per_reference"]
            result["null"] = summarise_null(profile, earlier + null_references(traffic, profile, len(earlier), references, days, args.seed), days)
        else:
            print(f"{name}: null", flush=True)
            result = {"signal": profile.signal, "detector": profile.detector, "interval_s": profile.interval_s,
                      "window_s": profile.window_s, "season": profile.season,
                      **({"daily_queries": DAILY_QUERIES} if profile.window_s else {}),
                      "current_size": profile.current_size, "reference_size": profile.reference_size,
                      "reference_ratio": profile.reference_ratio, "options": profile.options,
                      "null": summarise_null(profile, null_references(traffic, profile, 0, references, days, args.seed), days)}
            print(f"{name}: power", flush=True)
            result["power"] = power(traffic, profile, starts, args.seed)
        # Each profile is written as soon as it is measured, into what the file holds then: runs for
        # different profiles (or --more) may share the file, and it lists every command that wrote it.
        saved = json.loads(path.read_text()) if path.exists() else {}
        commands = saved.get("commands") or ([saved["command"]] if saved.get("command") else [])
        out = {**saved, **header, "commands": commands + ([command] if command not in commands else []),
               "profiles": {**saved.get("profiles", {}), name: result}}
        out.pop("command", None)
        out["worst_false_pages_per_30_days_upper95"] = max(r["null"]["false_pages_per_30_days_upper95"] for r in out["profiles"].values())
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({n: {"false_pages": r["null"]["false_pages"], "months": r["null"]["simulated_months"],
                          "upper95": r["null"]["false_pages_per_30_days_upper95"],
                          "median_hours_to_page": r["power"]["median_hours_to_page"]} for n, r in out["profiles"].items()}, indent=1))


if __name__ == "__main__":
    main()
