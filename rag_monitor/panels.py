"""Which panel shows each metric: the metric definitions, PromQL helpers and the panel plan.

Every metric the agent defines (``rag_monitor/alerts/metrics.py``, and the scrape-time gauges
of ``agent/scrape.py``) gets a panel in the row of its section (the ``# --- name ---`` comments
of ``AgentMetrics``): a curated panel where one is written below (quantiles, ratios, bands and
thresholds from the shipped ``rag_monitor/defaults/alerts/thresholds.yaml``), a generic one
otherwise. ``rag_monitor/dashboard.py`` turns the plan into Grafana's model.

Usage::

    for row, panels in panel_plan():
        print(row, [p.title for p in panels])
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field

RATE = "$__rate_interval"
# An unlabelled counter every running agent exports: ``or 0 * ...`` turns "no event yet" into
# 0 while the agent is up, and leaves a gap when it is down.
AGENT_UP = f"sum(rate(rag_agent_spans_received_total[{RATE}]))"
# Labels that never split a generic panel (bounded but many: one line per release x variant).
WIDE_LABELS = {"release", "variant", "tenant", "intent"}


@dataclass(frozen=True)
class Metric:
    """One metric family as Prometheus sees it."""

    name: str  # the series name (counters with ``_total``)
    kind: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    doc: str
    section: str
    computed: str = ""  # where a scrape-time gauge comes from ("from reviews, at scrape")


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    title: str
    targets: tuple[Target, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # timeseries, stat or state
    thresholds: tuple[float, ...] = ()  # drawn as dashed red lines
    width: int = 12
    log_scale: bool = False
    metrics: tuple[str, ...] = field(default=(), compare=False)


# --- the metric definitions ---------------------------------------------------------------------


def _sections() -> dict[str, str]:
    """``AgentMetrics`` attribute -> the section comment above it."""
    from rag_monitor.alerts.metrics import AgentMetrics

    section, out = "other", {}
    for line in inspect.getsource(AgentMetrics.__init__).splitlines():
        if m := re.match(r"\s*# --- (.+?) ---", line):
            section = m.group(1)
        elif m := re.match(r"\s*self\.(\w+)\s*=", line):
            out[m.group(1)] = section
    return out


def metric_definitions() -> list[Metric]:
    """Every family the agent exports, in the order (and sections) of their definitions."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics import MetricWrapperBase

    from rag_monitor.agent.scrape import ReviewStatsCollector
    from rag_monitor.alerts.families import LeanCounter, LeanHistogram
    from rag_monitor.alerts.metrics import AgentMetrics
    from rag_monitor.review.collector import ReviewMetricsCollector
    from rag_monitor.review.shadow_collector import ShadowMetricsCollector
    from rag_monitor.review.unsupported import UnsupportedRateCollector

    sections = _sections()
    registry = CollectorRegistry()
    out = []
    for attr, metric in vars(AgentMetrics(registry)).items():
        if isinstance(metric, (MetricWrapperBase, LeanCounter, LeanHistogram)):
            described = metric.describe()[0]
            suffix = "_total" if described.type == "counter" else ""
            out.append(Metric(described.name + suffix, described.type, tuple(metric._labelnames),
                              described.documentation, sections.get(attr, "other")))

    class _NoReviews:  # a store whose review queue (``store.queue``) holds no reviewed query
        def __init__(self):
            self.queue = self

        def reviewed(self, since=None):
            return []

    for family in ReviewStatsCollector(_NoReviews()).collect():
        out.append(Metric(family.name, "gauge", ("release",), family.documentation, "filters", "from reviews, at scrape"))
    for family in ReviewMetricsCollector.families().values():
        out.append(Metric(family.name, "gauge", tuple(family._labelnames), family.documentation, "review",
                          "from reviews, at scrape"))
    for family in UnsupportedRateCollector.families().values():
        out.append(Metric(family.name, "gauge", tuple(family._labelnames), family.documentation, "faithfulness",
                          "from the scored sample and reviews, at scrape"))
    for family in ShadowMetricsCollector.families().values():
        out.append(Metric(family.name, "gauge", tuple(family._labelnames), family.documentation, "shadow",
                          "from shadow pairs, at scrape"))
    return out


def _thresholds() -> dict:
    import yaml

    from rag_monitor.alerts.thresholds import THRESHOLDS_FILE

    return yaml.safe_load(THRESHOLDS_FILE.read_text())


# --- PromQL helpers -------------------------------------------------------------------------------


def _by(labels) -> str:
    return f" by ({', '.join(labels)})" if labels else ""


def rate(name: str, by=(), match: str = "") -> str:
    return f"sum{_by(by)} (rate({name}{{{match}}}[{RATE}]))" if match else f"sum{_by(by)} (rate({name}[{RATE}]))"


def quantile(q: float, name: str, by=(), match: str = "") -> str:
    selector = f"{name}_bucket{{{match}}}" if match else f"{name}_bucket"
    return f"histogram_quantile({q}, sum{_by(('le', *by))} (rate({selector}[{RATE}])))"


def ratio(num: str, den: str, on=(), many: bool = False) -> str:
    """num / den matched on ``on``, 0 (not absent) where the denominator has traffic and the
    numerator none; ``many``: the numerator has more labels than the denominator."""
    match = f" on ({', '.join(on)})" if on or many else ""
    return f"({num} or{match} 0 * {den}) /{match}{' group_left' if many else ''} {den}"


def or_zero(expr: str) -> str:
    return f"{expr} or on () 0 * {AGENT_UP}"


# --- panels ------------------------------------------------------------------------------------------


def _latency(m: Metric, what: str) -> list[PanelSpec]:
    split = [label for label in m.labels if label not in WIDE_LABELS]
    legend = "".join(f"{{{{{label}}}}} " for label in split)
    return [PanelSpec(f"{what} p50 / p95 / p99", tuple(
        Target(quantile(q, m.name, split), f"{legend}p{int(q * 100)}") for q in (0.5, 0.95, 0.99)), "s", m.doc)]


def curated(t: dict) -> dict[str, Callable[[Metric], list[PanelSpec]]]:
    """Panels written by hand for the metrics that need more than a rate or a value."""
    per_q = "rag_queries_total"
    return {
        "rag_queries_total": lambda m: [
            PanelSpec("Queries per second by release", (Target(rate(m.name, ["release"]), "{{release}}"),), "reqps", m.doc),
            PanelSpec("Queries per second by variant", (Target(rate(m.name, ["variant"]), "{{variant}}"),), "reqps", m.doc)],
        "rag_query_errors_total": lambda m: [PanelSpec("Errors and refusals (share of queries)", (
            Target(ratio(rate(m.name), rate(per_q)), "errors"),
            Target(ratio(rate("rag_refusals_total"), rate(per_q)), "refusals")), "percentunit", m.doc,
            metrics=("rag_refusals_total",))],
        "rag_refusals_total": lambda m: [],  # with the errors
        "rag_query_duration_seconds": lambda m: [PanelSpec("Query latency p50 / p95 / p99", tuple(
            Target(quantile(q, m.name), f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)), "s", m.doc,
            thresholds=(t["latency"]["p95_slo_seconds"], t["latency"]["p99_slo_seconds"]))],
        "rag_stage_duration_seconds": lambda m: [
            PanelSpec(f"Stage latency p{int(q * 100)}", (Target(quantile(q, m.name, ["stage"]), "{{stage}}"),), "s", m.doc, width=8)
            for q in (0.5, 0.95, 0.99)],
        "rag_time_to_first_token_seconds": lambda m: _latency(m, "Time to first token"),
        "rag_query_cost_usd": lambda m: [PanelSpec("Cost per query p50 / p99 and mean", (
            Target(quantile(0.5, m.name), "p50"), Target(quantile(0.99, m.name), "p99"),
            Target(f"{rate(m.name + '_sum')} / {rate(m.name + '_count')}", "mean")), "currencyUSD", m.doc,
            thresholds=(t["cost"]["max_usd_per_query"],))],
        "rag_query_component_cost_usd": lambda m: [PanelSpec("Mean cost per priced query by component", (
            Target(f"{rate(m.name + '_sum', ['component'])} / on () group_left {rate('rag_query_cost_usd_count')}", "{{component}}"),),
            "currencyUSD", m.doc)],
        "rag_cache_requests_total": lambda m: [PanelSpec("Cache hit rate by cache, and the prompt cache's share of prompt tokens", (
            Target(ratio(rate(m.name, ["cache"], 'outcome="hit"'), rate(m.name, ["cache"]), ["cache"]), "{{cache}}"),
            Target(ratio(rate("rag_tokens_total", match='kind="cached_prompt"'), rate("rag_tokens_total", match='kind="prompt"')),
                   "prompt (tokens)")), "percentunit", m.doc)],
        "rag_index_freshness_lag_seconds": lambda m: [PanelSpec("Index freshness lag p50 / p99 (commit to searchable)", tuple(
            Target(quantile(q, m.name), f"p{int(q * 100)}") for q in (0.5, 0.99)), "s", m.doc,
            thresholds=(t["freshness"]["p99_slo_seconds"],))],
        "rag_index_stale_queries_total": lambda m: [PanelSpec("Queries served a stale document (share of checked)", (
            Target(ratio(rate(m.name, ["variant"]), rate("rag_index_checked_queries_total", ["variant"]), ["variant"]), "{{variant}}"),),
            "percentunit", m.doc, thresholds=(t["freshness"]["max_stale_ratio"],), metrics=("rag_index_checked_queries_total",))],
        "rag_index_checked_queries_total": lambda m: [],  # with the stale share
        "rag_cost_usd_total": lambda m: [PanelSpec("Cost per second by model", (Target(rate(m.name, ["model"]), "{{model}}"),), "currencyUSD", m.doc)],
        "rag_tokens_total": lambda m: [PanelSpec("Tokens per second by kind and model", (
            Target(rate(m.name, ["kind", "model"]), "{{kind}} {{model}}"),), "short", m.doc)],
        "rag_release_info": lambda m: [PanelSpec("Releases (first seen)", (
            Target(f"max by (service, release) (rag_release_first_seen_timestamp_seconds * on (service, release) {m.name}) * 1000",
                   "{{service}} {{release}}"),),
            "dateTimeAsIso", m.doc, kind="stat", width=24, metrics=("rag_release_first_seen_timestamp_seconds",))],
        "rag_release_first_seen_timestamp_seconds": lambda m: [],  # with the release info
        "rag_change_last_timestamp_seconds": lambda m: [PanelSpec("Latest change of each kind (also drawn as annotations)", (
            Target(f"min by (kind, change) ({m.name}) * 1000", "{{kind}} {{change}}"),),
            "dateTimeAsIso", m.doc, kind="stat", width=24)],
        "rag_feedback_total": lambda m: [PanelSpec("Feedback per query by kind", (
            Target(ratio(rate(m.name, ["kind"]), rate(per_q), many=True), "{{kind}}"),), "percentunit", m.doc)],
        "rag_regenerated_queries_total": lambda m: [PanelSpec("Regeneration rate against its band (alert rule windows)", (
            Target("rag:regeneration_ratio", "{{variant}} ratio"),
            Target("rag:regeneration_ratio:band_high", "{{variant}} band high"),
            Target("rag:regeneration_ratio:band_low", "{{variant}} band low")), "percentunit", m.doc)],
        # The signals apart: a click and the re-ask it triggers show in both lines, once in the rate.
        "rag_regenerations_total": lambda m: [PanelSpec("Regeneration signals per query by source", (
            Target(ratio(rate(m.name, ["source"]), rate(per_q), many=True), "{{source}}"),), "percentunit", m.doc)],
        "rag_filter_queries_total": lambda m: [PanelSpec("Queries that applied a filter, by kind", (
            Target(rate(m.name, ["filter_kind"]), "{{filter_kind}}"),), "reqps", m.doc)],
        "rag_filter_exclusions_total": lambda m: [PanelSpec("Filter exclusions (share of filtered queries)", (
            Target(ratio(rate(m.name, ["filter_kind", "outcome"]), rate("rag_filter_queries_total", ["filter_kind"]), ["filter_kind"], many=True),
                   "{{filter_kind}} {{outcome}}"),), "percentunit", m.doc)],
        "rag_filter_false_exclusion_ratio": lambda m: [PanelSpec("False-exclusion rate by release (reviewed sample)", (
            Target(f"max by (release) ({m.name})", "{{release}}"),), "percentunit", m.doc,
            thresholds=(t["filter_false_exclusion"]["max_ratio"],))],
        "rag_faithfulness_score": lambda m: [PanelSpec("Faithfulness score p50 / p10 by scorer", tuple(
            Target(quantile(q, m.name, ["scorer"]), f"{{{{scorer}}}} p{int(q * 100)}") for q in (0.5, 0.1)), "percentunit", m.doc)],
        "rag_faithfulness_weighted_total": lambda m: [PanelSpec("Unsupported answers by scorer (weighted, alert window)", (
            Target("max by (scorer) (rag:faithfulness_unsupported_ratio)", "{{scorer}}"),), "percentunit", m.doc,
            thresholds=(t["faithfulness"]["max_unsupported_ratio"],))],
        "rag_unsupported_rate_ppi": lambda m: [PanelSpec("Unsupported-answer rate by release: prediction-powered (interval), humans only, scorer only", (
            Target('max by (release) (rag_unsupported_rate_ppi{bound="estimate",variant!="shadow"})', "{{release}} prediction-powered"),
            Target('max by (release) (rag_unsupported_rate_ppi{bound="lower",variant!="shadow"})', "{{release}} prediction-powered lower"),
            Target('max by (release) (rag_unsupported_rate_ppi{bound="upper",variant!="shadow"})', "{{release}} prediction-powered upper"),
            Target('max by (release) (rag:unsupported_rate_human{bound="estimate",variant!="shadow"})', "{{release}} humans only"),
            Target('max by (release) (rag:unsupported_rate_scorer{variant!="shadow"})', "{{release}} scorer only (biased)")),
            "percentunit", m.doc, thresholds=(t["faithfulness"]["max_unsupported_ratio"],))],
        "rag_faithfulness_scored_total": lambda m: [PanelSpec("Scored answers per second by scorer and verdict", (
            Target(rate(m.name, ["scorer", "verdict"]), "{{scorer}} {{verdict}}"),), "reqps", m.doc)],
        "rag_drift_p_value": lambda m: [PanelSpec("Drift p-values", (
            Target(f"max by (signal, detector) ({m.name})", "{{signal}} {{detector}}"),), "short", m.doc,
            thresholds=(0.01,), log_scale=True)],
        "rag_drift_detected": lambda m: [PanelSpec("Drift verdicts (1 = drift)", (
            Target(f"max by (signal, detector) ({m.name})", "{{signal}} {{detector}}"),), "short", m.doc, kind="state")],
        "rag_drift_last_run_timestamp_seconds": lambda m: [PanelSpec("Age of the latest drift run", (
            Target(f"time() - max by (signal, detector) ({m.name})", "{{signal}} {{detector}}"),), "s", m.doc)],
        "rag_probe_topk_overlap": lambda m: [PanelSpec("Probe top-k overlap with the pinned baseline (mean, and the worst probe)", (
            Target(f"max by (measure) ({m.name})", "{{measure}} mean"),
            Target("max by (measure) (rag_probe_topk_overlap_min)", "{{measure}} worst probe")), "percentunit", m.doc,
            thresholds=(t["neighbour_stability"]["min_rbo"],), metrics=("rag_probe_topk_overlap_min",))],
        "rag_probe_topk_overlap_min": lambda m: [],  # with the mean
        "rag_signal_direction": lambda m: [PanelSpec("Implicit signals: direction established by blind review (1 more of the verdict, -1 less, 0 not established)", (
            Target(f"max by (signal, verdict) ({m.name})", "{{signal}} / {{verdict}}"),), "short", m.doc, kind="state", width=24)],
        "rag_signal_association": lambda m: [PanelSpec("Implicit signals against blind verdicts, all releases (rate difference or dwell AUC, 95% interval)", (
            Target(f'max by (signal, verdict, bound) ({m.name}{{release="all"}})', "{{signal}} / {{verdict}} {{bound}}"),),
            "short", m.doc)],
        "rag_signal_items": lambda m: [PanelSpec("Reviewed answers behind each signal, all releases (judged, and with the signal)", (
            Target(f'max by (signal, verdict) ({m.name}{{release="all"}})', "{{signal}} / {{verdict}} judged"),
            Target('max by (signal, verdict) (rag_signal_items_with_signal{release="all"})', "{{signal}} / {{verdict}} with the signal")),
            "short", m.doc, metrics=("rag_signal_items_with_signal",))],
        "rag_signal_items_with_signal": lambda m: [],  # with the judged items
    }


def generic(m: Metric) -> list[PanelSpec]:
    """A panel for a metric nobody wrote one for: a rate, p95 or value, split by its narrow labels."""
    split = [label for label in m.labels if label not in WIDE_LABELS]
    title = m.doc.split(",")[0].split(" (")[0].rstrip(".")
    if m.kind == "counter":
        # A labelled counter has no series before its first event: show 0 while the agent is up.
        expr = or_zero(rate(m.name, split)) if m.labels else rate(m.name)
        return [PanelSpec(f"{title} (per second)", (Target(expr, _legend(split, m.name)),), "short", m.doc)]
    if m.kind == "histogram":
        unit = "s" if m.name.endswith("_seconds") else "short"
        return [PanelSpec(f"{title} (p95)", (Target(quantile(0.95, m.name, split), _legend(split, m.name)),), unit, m.doc)]
    # Gauges are computed per label set (releases included): one line each.
    return [PanelSpec(title, (Target(f"max{_by(m.labels)} ({m.name})", _legend(m.labels, m.name)),), "short", m.doc)]


def _legend(labels, default: str) -> str:
    return " ".join(f"{{{{{label}}}}}" for label in labels) or default


def release_row() -> list[PanelSpec]:
    """The per-release comparison, filtered by the ``release`` variable."""
    sel = 'release=~"$release"'
    return [
        PanelSpec("p95 latency by release", (Target(quantile(0.95, "rag_query_duration_seconds", ["release"], sel), "{{release}}"),), "s", width=8),
        PanelSpec("Cost per query p99 by release", (Target(quantile(0.99, "rag_query_cost_usd", ["release"], sel), "{{release}}"),), "currencyUSD", width=8),
        PanelSpec("Unsupported answers by release (weighted)", (Target(ratio(
            rate("rag_faithfulness_weighted_total", ["release"], sel + ',verdict="unsupported"'),
            rate("rag_faithfulness_weighted_total", ["release"], sel + ',verdict=~"supported|unsupported"'), ["release"]),
            "{{release}}"),), "percentunit", width=8),
        PanelSpec("False-exclusion rate by release", (Target(f"max by (release) (rag_filter_false_exclusion_ratio{{{sel}}})", "{{release}}"),), "percentunit", width=8),
        PanelSpec("Regenerated queries per query by release", (Target(ratio(
            rate("rag_regenerated_queries_total", ["release"], sel), rate("rag_queries_total", ["release"], sel), ["release"]), "{{release}}"),),
            "percentunit", width=8),
        PanelSpec("Thumbs-down per query by release", (Target(ratio(
            rate("rag_feedback_total", ["release"], sel + ',kind="thumbs_down"'), rate("rag_queries_total", ["release"], sel), ["release"]),
            "{{release}}"),), "percentunit", width=8),
    ]


def overview() -> list[PanelSpec]:
    return [
        PanelSpec("Queries / s", (Target(rate("rag_queries_total")),), "reqps", kind="stat", width=6),
        PanelSpec("Query latency p95", (Target(quantile(0.95, "rag_query_duration_seconds")),), "s", kind="stat", width=6),
        PanelSpec("Cost per query (mean)", (Target(f"{rate('rag_query_cost_usd_sum')} / {rate('rag_query_cost_usd_count')}"),),
                  "currencyUSD", kind="stat", width=6),
        PanelSpec("Review queue (waiting)", (Target('sum(rag_agent_review_queue_depth{state="queued"})'),), "short", kind="stat", width=6),
    ]


def panel_plan() -> list[tuple[str, list[PanelSpec]]]:
    """(row title, panels) in dashboard order; every defined metric appears in some panel."""
    definitions = metric_definitions()
    hand = curated(_thresholds())
    rows: dict[str, list[PanelSpec]] = {}
    for m in definitions:
        build = hand.get(m.name, generic)
        rows.setdefault(m.section, []).extend(build(m))
    titled = [(section[0].upper() + section[1:], panels) for section, panels in rows.items() if panels]
    return [("Overview", overview()), ("Per-release comparison ($release)", release_row()), *titled]
