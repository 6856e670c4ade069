"""False pages over a month of stationary traffic with a daily topic cycle, driving the real drift
feed, store and runs with a fast-forwarded clock; then windows to page under a 10% new topic.
(The regeneration band's false pages are ``regeneration_band.py``'s.)

Drift: banking77 training queries (67 known intents) are the traffic (see ``drift_data.py``).
Every intent has its own peak hour: its share swings by +-80% over the day, and the query rate by
+-60% (``--rate`` an hour on average), so a window of a few hours holds a different topic mix than
the whole day. Each query retrieves the 3 nearest of 400 "documents" (banking77 queries set
apart as FAQ entries), and a quarter of the queries also get one of 5 popular documents, so
documents repeat across queries. The simulation feeds ``DriftFeed`` (SQLite store in a temp
directory), and at every hourly slot calls ``run_profile`` for each default profile of
``detectors/profiles.yaml`` (the scheduler's slot logic, fast-forwarded): 7 days of reference
period, then ``--days`` (30) days of stationary traffic, then ``--shift-days`` (3) with 10% of the
traffic on 10 intents held out of everything before.

Bounded for two shared cores: the drift part runs at ``--rate 100`` queries an hour, so a default
1,000-query window fills in about 10 hours (the hourly schedule skips until then: 72 windows in
30 days rather than one an hour); the profiles' own windows and reference unless ``--window`` /
``--reference-size`` cut them. Writes ``benchmarks/results/drift_month.json``.
Run: ``PYTHONPATH=. .venv/bin/python benchmarks/drift_month.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from drift_data import banking77, embed  # noqa: E402

from rag_monitor.detectors.feed import DriftFeed  # noqa: E402
from rag_monitor.detectors.jobs import run_profile  # noqa: E402
from rag_monitor.detectors.profiles import load_profiles  # noqa: E402
from rag_monitor.record import QueryRecord  # noqa: E402
from rag_monitor.store import open_store  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HOUR = 3600.0
DAY = 86400.0
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC (a Thursday)
MODEL = "all-MiniLM-L6-v2"


class DailyTraffic:
    def __init__(self, seed: int, rate: float):
        self.rate = rate
        texts, intents = banking77()
        self.vectors = embed(texts, "banking77_train")
        self.rng = np.random.default_rng(seed)
        names = np.unique(intents)
        held = self.rng.choice(names, size=10, replace=False)
        known = np.flatnonzero(~np.isin(intents, held))
        self.new_topic = np.flatnonzero(np.isin(intents, held))
        documents = self.rng.choice(known, size=400, replace=False)
        self.documents = self.vectors[documents]
        self.pool = np.setdiff1d(known, documents)
        self.intents = intents
        pool_intents = intents[self.pool]
        self.names = np.unique(pool_intents)
        self.by_intent = {n: self.pool[pool_intents == n] for n in self.names}
        self.peak = self.rng.uniform(0, 24, size=len(self.names))
        self.popular = self.rng.choice(len(self.documents), size=5, replace=False)
        self.counter = 0

    def hour(self, t0: float, shift: float = 0.0) -> list[QueryRecord]:
        hour_of_day = (t0 / HOUR) % 24
        n = self.rng.poisson(self.rate * (1 + 0.6 * math.cos(2 * math.pi * (hour_of_day - 14) / 24)))
        weights = 1 + 0.8 * np.cos(2 * np.pi * (hour_of_day - self.peak) / 24)
        chosen_intents = self.rng.choice(self.names, size=n, p=weights / weights.sum())
        rows = np.array([self.rng.choice(self.by_intent[i]) for i in chosen_intents], dtype=np.int64)
        if shift:
            moved = self.rng.random(n) < shift
            rows[moved] = self.rng.choice(self.new_topic, size=int(moved.sum()))
        times = np.sort(self.rng.uniform(t0, t0 + HOUR, size=n))
        vectors = self.vectors[rows]
        nearest = np.argsort(-(vectors @ self.documents.T), axis=1)[:, :3]
        popular = self.rng.random(n) < 0.25
        nearest[popular, 2] = self.rng.choice(self.popular, size=int(popular.sum()))
        out = []
        for k in range(n):
            self.counter += 1
            out.append(QueryRecord(
                trace_id=f"{self.counter:032x}", root_span_id="1" * 16, start_ns=int(times[k] * 1e9),
                end_ns=int(times[k] * 1e9) + 1, query=f"query {rows[k]}", intent=str(self.intents[rows[k]]),
                embedding_model=MODEL, query_embedding=vectors[k].tolist(),
                document_embeddings=[self.documents[d].tolist() for d in nearest[k]],
            ))
        return out


def simulate_drift(args) -> dict:
    profiles = load_profiles(ROOT / "detectors" / "profiles.yaml")
    if args.window or args.reference_size:
        profiles = [dataclasses.replace(p, current_size=args.window or p.current_size, min_current=args.window or p.min_current,
                                        reference_size=args.reference_size or p.reference_size) if p.signal != "intent" else p
                    for p in profiles]
    traffic = DailyTraffic(seed=args.seed, rate=args.rate)
    tmp = tempfile.mkdtemp(prefix="drift-month-")
    store = open_store(f"sqlite:///{tmp}/store.db")
    clock = [START]
    feed = DriftFeed(store, profiles, embedder=None, embedding_model=MODEL, max_pending=100_000, clock=lambda: clock[0])
    reference_hours = int(7 * 24)
    stationary_hours = int(args.days * 24)
    shift_hours = int(args.shift_days * 24)
    runs = {p.name: [] for p in profiles}
    started = time.perf_counter()
    documents_seen: dict[int, int] = {}
    for hour in range(reference_hours + stationary_hours + shift_hours):
        t0 = START + hour * HOUR
        shifted = hour >= reference_hours + stationary_hours
        records = traffic.hour(t0, shift=0.1 if shifted else 0.0)
        clock[0] = t0 + HOUR
        feed.offer(records)
        while feed.tick(batch=2000):
            pass
        if hour < 24:
            for r in records:
                for v in r.document_embeddings[:3]:
                    documents_seen[hash(tuple(v[:4]))] = documents_seen.get(hash(tuple(v[:4])), 0) + 1
        for profile in profiles:
            result = run_profile(store, profile, holder="sim", now=clock[0])
            if result and result.get("status") in ("done", "degenerate"):
                runs[profile.name].append({
                    "hour": hour, "phase": "shift" if shifted else "stationary", "status": result["status"],
                    "p_value": result.get("p_value"), "log_evidence": result["log_evidence"],
                    "decision": result["decision"], "match_hours": result["match_hours"],
                    "n_reference": result.get("n_reference"), "n_current": result.get("n_current"),
                    "top_over": (result.get("changes", {}).get("over") or [{}])[0].get("current_share"),
                })
        if hour % 24 == 23:
            print(f"day {hour // 24 + 1}: {time.perf_counter() - started:.0f} s, "
                  + ", ".join(f"{n}: {len(r)} windows" for n, r in runs.items()), flush=True)
    store.close()
    counts = sorted(documents_seen.values(), reverse=True)
    out = {}
    for profile in profiles:
        rows = runs[profile.name]
        stationary = [r for r in rows if r["phase"] == "stationary"]
        shift = [r for r in rows if r["phase"] == "shift"]
        pages, previous = 0, False
        for r in stationary:
            pages += int(r["decision"] and not previous)
            previous = r["decision"]
        rule = profile.sequential_rule()
        to_page = next((i + 1 for i, r in enumerate(shift) if r["decision"]), None)
        p_values = [r["p_value"] for r in stationary if r["p_value"] is not None]
        out[profile.name] = {
            "signal": profile.signal, "detector": profile.detector,
            "windows_stationary": len(stationary),
            "false_pages": pages,
            "false_pages_per_30_days": pages * 30 / args.days,
            "window_false_alarm_rate_at_0.05": float(np.mean(np.array(p_values) < 0.05)) if p_values else None,
            "max_log_evidence_stationary": max((r["log_evidence"] for r in stationary), default=None),
            "log_page_threshold": rule.log_threshold, "page_threshold": rule.threshold,
            "min_windows_to_page": rule.min_windows_to_page,
            "shift_windows": len(shift), "windows_to_page_after_shift": to_page,
            "shift_p_values": [r["p_value"] for r in shift],
            "runs": rows,
        }
    return {"profiles": out, "seconds": round(time.perf_counter() - started, 1),
            "documents_first_day": {"distinct": len(counts), "top5_share_of_retrievals": sum(counts[:5]) / max(sum(counts), 1)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--shift-days", type=float, default=3, help="days of the 10%% new topic (about 7 windows at --rate 100)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--rate", type=float, default=100, help="drift simulation: queries an hour on average")
    parser.add_argument("--window", type=int, default=None, help="cut the embedding profiles' window (default: theirs)")
    parser.add_argument("--reference-size", type=int, default=None, help="cut the embedding profiles' reference reservoir")
    args = parser.parse_args()
    result = {}
    result["drift"] = simulate_drift(args)
    query = next(p for p in load_profiles(ROOT / "detectors" / "profiles.yaml") if p.signal == "query_embedding")
    result["drift"]["traffic"] = {"queries_per_hour_mean": args.rate, "embedding_window": args.window or query.current_size,
                                  "embedding_reference_size": args.reference_size or query.reference_size,
                                  "reference_ratio": query.reference_ratio, "daily_rate_swing": 0.6, "daily_intent_share_swing": 0.8,
                                  "reference_days": 7, "stationary_days": args.days, "shift_days": args.shift_days,
                                  "shift": "10% of traffic on 10 held-out banking77 intents"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "drift_month.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
