"""The demo's settings: alert windows shrunk to minutes, and the sampling, prices and drift profile
it writes next to the shipped defaults (``run.py`` starts the agent and the alerting stack on them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_monitor.demo.waits import DRIFT_PROFILE

# Demo-sized alert windows: every rule keeps its shape, only windows, minimums and `for:`
# shrink so that a few minutes of traffic can fire them. The SLOs fit the demo app's latency.
DEMO_OVERRIDES: dict[str, Any] = {
    "faithfulness.window": "30s", "faithfulness.for": "2s", "faithfulness.min_scored": 5,
    # The page's `for:` is one window, as in production (5m and 5m): right after a change the window
    # still mixes the queries before it, the tail (p99) can move before the triage's p95 does, and
    # the page carries the comparison once it has held for a window, not the first mixed reading.
    "latency.window": "20s", "latency.p95_for": "2s", "latency.p99_for": "20s", "latency.min_queries": 5,
    # The spans are timed by the traffic script, whatever the machine's load (demo/timing.py): r1's
    # queries take about 0.11 s (0.08-0.14), r2 adds 0.35 s (quick) or 0.55 s (full) to each uncached one.
    # The page (p99) sits far above r1 and below the full demo's provider update (every third answer
    # 4 s slower), so it pages at that model change, not before.
    "latency.p95_slo_seconds": 0.45, "latency.p99_slo_seconds": 2.5,
    "filter_false_exclusion.for": "2s", "filter_false_exclusion.min_eligible": 3,
    "regeneration.window": "30s", "regeneration.season": "1m",
    "regeneration.min_queries": 5, "regeneration.for": "2s",
    "cost.window": "30s", "cost.for": "2s", "cost.min_queries": 5,
    "drift.for": "0s", "drift.min_window_items": 40,
    "freshness.window": "1m", "freshness.for": "2s", "freshness.min_events": 5, "freshness.min_checked_queries": 5,
    "cache.window": "20s", "cache.baseline_window": "1m", "cache.for": "2s", "cache.min_requests": 5,
    "neighbour_stability.for": "15s",  # at least triage.sighting_lag: the page names the release
    "triage.settle": "20s", "triage.sighting_lag": "15s",
}
DRIFT_WINDOW = {True: 50, False: 120}
"""Most recent queries in the current drift window."""
REFERENCE_SIZE = {True: 100, False: 250}
"""The first queries of the baseline phase (132 quick, 300 full) become the drift reference."""


def write_configs(root: Path, quick: bool) -> dict[str, str]:
    """Sampling, prices and drift profiles for the demo, next to the shipped defaults."""
    import yaml

    from rag_monitor.config_files import shipped_path

    config = root / "config"
    config.mkdir(exist_ok=True)
    # 20% base rate (production default 1%) so a few minutes of traffic fill the review queue.
    # The scorer labels more (60%, no budget): the prediction-powered rate has a scored sample to lean on.
    (config / "sampling.yaml").write_text(yaml.safe_dump({"base_rate": 0.2, "thumbs_down_rate": 1.0, "refusal_rate": 0.2,
                                                          "shadow_pair_rate": 0.5, "score_rate": 0.6, "score_budget": 0}))
    shipped = yaml.safe_load(shipped_path("price_table").read_text())
    models = dict(shipped.get("models", {}))
    # The extractive generator is free; priced like a small hosted model so cost per query means something.
    models["demo-extractive-*"] = {"input": 0.15, "output": 0.60, "cached_input": 0.075}
    models["all-minilm-l6-v2"] = {"input": 0.02, "output": 0}
    calls = {**shipped.get("calls", {}), "demo-hybrid-reranker-1": {"per_1k_calls": 1.0}, "demo-help-center": {"per_1k_calls": 0.4}}
    (config / "prices.yaml").write_text(yaml.safe_dump({"models": models, "calls": calls}))
    (config / "profiles.yaml").write_text(yaml.safe_dump(drift_profiles(quick)))
    # ingest_config and redaction_rules keep their `default`: the shipped files.
    return {"sampling_config": str(config / "sampling.yaml"), "price_table": str(config / "prices.yaml"),
            "detector_profiles": str(config / "profiles.yaml")}





def drift_profiles(quick: bool) -> dict[str, Any]:
    """The baseline phase fills the reference; the newest queries are the current window."""
    window = DRIFT_WINDOW[quick]
    return {"profiles": [{
        "name": DRIFT_PROFILE, "signal": "query_embedding", "detector": "mmd", "alpha": 0.01,
        "reference_size": REFERENCE_SIZE[quick], "current_size": window, "min_current": window,
        "current_max_age_s": None, "interval_s": 3, "options": {"n_permutations": 200},
        "reference_days": None,  # the demo's scripted baseline is its reference (minutes, not a week)
        "page_threshold": 200,  # a window at the smallest p-value (1/201) pages; production profiles derive it from the budget
    }]}
