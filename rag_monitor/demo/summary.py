"""The demo's one-screen summary, read from the agent's metrics, its store and the alerts received.

    summary = collect_summary(agent, phases=stats, alerts=webhook.alerts, urls={...}, notes=[...])
    print(render_summary(summary))

Quantiles come from the agent's histogram buckets the way Prometheus' ``histogram_quantile``
computes them (linear interpolation inside a bucket), so they match what a dashboard shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_monitor.demo.probes import render_probes

STAGE_ORDER = ("retrieve", "embed", "filter", "rerank", "context", "generate")
PRODUCTION = {"variant": "production"}
"""What users got: a shadow candidate's queries are in the shadow report, not in these lines."""


def _samples(registry: Any, metric: str) -> Iterable[Any]:
    for family in registry.collect():
        if family.name == metric or family.name + "_total" == metric:
            yield from family.samples


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' estimate from cumulative ``(upper_bound, count)`` buckets; None when empty."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return buckets[-1][0]


def quantiles_by(registry: Any, metric: str, label: str, qs: Sequence[float] = (0.5, 0.95, 0.99),
                 where: Mapping[str, str] = PRODUCTION) -> dict[str, tuple[float | None, ...]]:
    """``{label value: (p50, p95, p99)}`` of a histogram (production's), summed over every other label."""
    cumulative: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for sample in _samples(registry, metric):
        if sample.name == metric + "_bucket" and all(sample.labels.get(k) == v for k, v in where.items()):
            cumulative[sample.labels.get(label, "")][float(sample.labels["le"])] += sample.value
    return {key: tuple(histogram_quantile(q, list(b.items())) for q in qs) for key, b in cumulative.items()}


def sums_by(registry: Any, metric: str, labels: Sequence[str], where: Mapping[str, str] | None = None) -> dict[tuple[str, ...], float]:
    """Counter (or histogram ``_sum``/``_count``) values summed by ``labels``, filtered by ``where``."""
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for sample in _samples(registry, metric):
        if sample.name not in (metric, metric + "_total"):
            continue
        if where and any(sample.labels.get(k) != v for k, v in where.items()):
            continue
        out[tuple(sample.labels.get(k, "") for k in labels)] += sample.value
    return dict(out)


def _histogram_part(registry: Any, metric: str, part: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for sample in _samples(registry, metric):
        if sample.name == f"{metric}_{part}" and all(sample.labels.get(k) == v for k, v in PRODUCTION.items()):
            out[sample.labels.get(label, "")] += sample.value
    return dict(out)


@dataclass
class ReleaseLine:
    release: str
    queries: int
    p50_p95_p99: tuple[float | None, ...]
    cost_per_query_usd: float | None
    regeneration_rate: float | None
    refusal_rate: float | None
    faithfulness_unsupported: float | None
    faithfulness_scored: int
    relevance_exclusion_rate: float | None
    false_exclusion_rate: float | None
    false_exclusion_eligible: int
    unsupported_three_ways: str = ""
    """Scorer-only, human-only and prediction-powered unsupported rates side by side (``_three_ways``)."""


def stage_quantiles(registry: Any, releases: Iterable[str]) -> dict[str, dict[str, tuple[float | None, ...]]]:
    """``{release: {stage: (p50, p95, p99)}}`` of production's stages, release by release.

    Pooled over releases a stage reads slower than one release's whole query when another
    release is slow (the bad release's retrieve against the good one's queries).
    """
    return {r: quantiles_by(registry, "rag_stage_duration_seconds", "stage", where={**PRODUCTION, "release": r}) for r in releases}


@dataclass
class DemoSummary:
    stages: dict[str, dict[str, tuple[float | None, ...]]]
    """``{release: {stage: (p50, p95, p99)}}`` (``stage_quantiles``)."""
    releases: list[ReleaseLine]
    phases: list[Any]
    drift: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    review_queue: dict[str, int]
    review_by_stratum: dict[str, int]
    thumbs_down_in_queue: int
    thumbs_down_sent: int
    urls: dict[str, str]
    notes: list[str] = field(default_factory=list)
    signals: list[Any] = field(default_factory=list)
    """Freshness, stale share, cache hit rates and cost by component per release (``demo/signals.py``)."""
    probes: list[Any] = field(default_factory=list)
    """Each phase's latest neighbour-stability probe run (``demo/probes.py``)."""
    probe_errors: float = 0.0
    shadow: Any = None
    """The shadow report over every sampled pair (``review.shadow.ShadowReport``)."""
    shadow_archived: Any = None
    """The same over the pairs whose production answer cited an archived policy."""
    human_queue: dict[str, int] = field(default_factory=dict)
    """What waits for the person trying the demo: ``items`` (claimable by them), ``pairs``."""
    changes: list[tuple[str, str, float]] = field(default_factory=list)
    """The latest change of each kind ``(kind, change, unix time)``: the dashboard's annotations."""


def change_lines(registry: Any) -> list[tuple[str, str, float]]:
    """``rag_change_last_timestamp_seconds`` as ``(kind, change, time)``, oldest first."""
    found = [(sample.labels["kind"], sample.labels["change"], sample.value)
             for sample in _samples(registry, "rag_change_last_timestamp_seconds")
             if sample.name == "rag_change_last_timestamp_seconds"]
    return sorted(found, key=lambda c: c[2])


def render_changes(changes: Sequence[tuple[str, str, float]]) -> list[str]:
    import time

    lines = ["", "Changes (dashboard annotations; each alert's triage compares its signal across the latest)"]
    if not changes:
        lines.append("  none seen")
    lines += [f"  {kind:<8} {change:<32} at {time.strftime('%H:%M:%S', time.gmtime(t))} UTC" for kind, change, t in changes]
    return lines


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def collect_summary(
    agent: Any, phases: Sequence[Any], alerts: Sequence[Mapping[str, Any]], urls: Mapping[str, str],
    drift: Sequence[Mapping[str, Any]] = (), notes: Sequence[str] = (), probes: Sequence[Any] = (),
    archived_ids: Iterable[str] = (), human_queue: Mapping[str, int] | None = None,
) -> DemoSummary:
    """Everything the summary shows, read from the agent (registry and store) and the webhook."""
    from rag_monitor.review.shadow import halves, shadow_report

    archived = frozenset(archived_ids)
    cites_archived = lambda item: bool(set(halves(item)[1].citations) & archived)  # noqa: E731 - production's half
    registry = agent.registry
    storage = agent.settings.storage_usd_per_query  # the agent's price of a query includes it; so does the shadow report's
    agent.refresh_gauges()
    by_release = quantiles_by(registry, "rag_query_duration_seconds", "release")
    queries = _histogram_part(registry, "rag_query_duration_seconds", "count", "release")
    cost_sum = _histogram_part(registry, "rag_query_cost_usd", "sum", "release")
    cost_count = _histogram_part(registry, "rag_query_cost_usd", "count", "release")
    # Regenerated queries: a regenerate click and the re-ask it triggers are one (as the alert's rate reads them).
    regenerations = sums_by(registry, "rag_regenerated_queries_total", ["release"], where=PRODUCTION)
    refusals = sums_by(registry, "rag_refusals_total", ["release"], where=PRODUCTION)
    weighted = sums_by(registry, "rag_faithfulness_weighted_total", ["release", "verdict"], where=PRODUCTION)
    scored = sums_by(registry, "rag_faithfulness_scored_total", ["release", "verdict"], where=PRODUCTION)
    filtered = sums_by(registry, "rag_filter_queries_total", ["release"], where={**PRODUCTION, "filter_kind": "relevance"})
    excluded = sums_by(registry, "rag_filter_exclusions_total", ["release"],
                       where={**PRODUCTION, "filter_kind": "relevance", "outcome": "removed_topk"})
    releases = []
    for release in sorted(queries, key=lambda r: (r == "other", r)):
        n = queries[release]
        supported = weighted.get((release, "supported"), 0.0)
        unsupported = weighted.get((release, "unsupported"), 0.0)
        ratio = registry.get_sample_value("rag_filter_false_exclusion_ratio", {"release": release})
        eligible = registry.get_sample_value("rag_filter_false_exclusion_eligible", {"release": release})
        releases.append(ReleaseLine(
            release=release, queries=int(n), p50_p95_p99=by_release.get(release, (None, None, None)),
            cost_per_query_usd=_ratio(cost_sum.get(release, 0.0), cost_count.get(release, 0.0)),
            regeneration_rate=_ratio(regenerations.get((release,), 0.0), n),
            refusal_rate=_ratio(refusals.get((release,), 0.0), n),
            faithfulness_unsupported=_ratio(unsupported, supported + unsupported),
            faithfulness_scored=int(sum(v for (r, verdict), v in scored.items() if r == release and verdict in ("supported", "unsupported"))),
            relevance_exclusion_rate=_ratio(excluded.get((release,), 0.0), filtered.get((release,), 0.0)),
            false_exclusion_rate=ratio, false_exclusion_eligible=int(eligible or 0),
            unsupported_three_ways=_three_ways(registry, release),
        ))
    depth = agent.store.queue.depth()
    thumbs_sent = {t for p in phases for t in p.thumbs_down_trace_ids}
    in_queue = sum(1 for t in thumbs_sent if agent.store.queue.item_for_trace(t) is not None)
    strata = {k[0]: int(v) for k, v in sums_by(registry, "rag_sampled_total", ["stratum"]).items()}
    from rag_monitor.demo.signals import signal_lines

    return DemoSummary(
        signals=signal_lines(registry, [r.release for r in releases], phases),
        stages=stage_quantiles(registry, [r.release for r in releases]), releases=releases, phases=list(phases), drift=[dict(d) for d in drift],
        alerts=_firing_first(alerts), review_queue=dict(depth), review_by_stratum=strata,
        thumbs_down_in_queue=in_queue, thumbs_down_sent=len(thumbs_sent), urls=dict(urls), notes=list(notes),
        human_queue=dict(human_queue or {}), probes=list(probes), changes=change_lines(registry), probe_errors=sum(sums_by(registry, "rag_probe_errors_total", []).values()),
        shadow=shadow_report(agent.store, call_cost=agent.prices.call_cost, storage_usd_per_query=storage),
        shadow_archived=shadow_report(agent.store, call_cost=agent.prices.call_cost, keep=cites_archived,
                                      storage_usd_per_query=storage),
    )


def _firing_first(alerts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One line per alert (name, labels): its first firing notification, in the order they came."""
    seen: dict[tuple, dict[str, Any]] = {}
    for alert in alerts:
        if alert.get("status") != "firing":
            continue
        labels = alert.get("labels", {})
        # One line per alert and subject (the triage is decided once per incident, docs/alerts.md): a
        # latency page (p99) is its own incident beside the warning (p95), triaged at its own start.
        key = (labels.get("alertname"), labels.get("signal"), labels.get("release"), labels.get("variant"), labels.get("quantile"))
        seen.setdefault(key, dict(alert))
    return list(seen.values())


def _ms(value: float | None) -> str:
    """Milliseconds in five characters: one decimal below 10 ms (sub-millisecond stages show)."""
    if value is None:
        return "    -"
    return f"{value * 1000:5.1f}" if value < 0.00995 else f"{value * 1000:5.0f}"


def _pct(value: float | None) -> str:
    return "   -" if value is None else f"{value * 100:3.0f}%"


def _three_ways(registry: Any, release: str) -> str:
    """The unsupported rate three ways for one release (the main scorer's gauges; never mixed)."""
    def rate(metric: str) -> str:
        values = {s.labels["bound"]: s.value for s in _samples(registry, metric)
                  if s.labels.get("release") == release and s.labels.get("variant") != "shadow" and s.name == metric}
        return "-" if "estimate" not in values else f"{_pct(values['estimate'])} [{_pct(values['lower'])}, {_pct(values['upper'])}]"
    labels = max((s.value for s in _samples(registry, "rag_unsupported_rate_ppi_labels")
                  if s.labels.get("release") == release and s.labels.get("variant") != "shadow"), default=0)
    return f"humans only {rate('rag_unsupported_rate_human')}, prediction-powered {rate('rag_unsupported_rate_ppi')} ({int(labels)} labels)"


def render_stages(stages: Mapping[str, Mapping[str, tuple[float | None, ...]]]) -> list[str]:
    """One row per stage, one p50/p95/p99 column per release (compare a stage with its own release's queries)."""
    releases = list(stages)
    names = sorted({st for by_stage in stages.values() for st in by_stage},
                   key=lambda st: (STAGE_ORDER.index(st) if st in STAGE_ORDER else 99, st))
    lines = ["", "Latency per stage (ms), p50/p95/p99" + "".join(f"  {r:>17}" for r in releases)]
    for stage in names:
        cells = ["/".join(_ms(v).strip() for v in stages[r].get(stage, (None, None, None))) for r in releases]
        lines.append(f"  {stage:<33}" + "".join(f"  {c:>17}" for c in cells))
    return lines


def render_summary(s: DemoSummary) -> str:
    """The summary as plain text, about one screen."""
    lines = ["", "=" * 78, "rag-monitor demo: summary", "=" * 78]
    lines.append("Traffic: " + "; ".join(
        f"{p.phase} ({p.release}) {p.queries} queries, {p.refused} refused, {p.archived_answers} from archived policies, "
        f"{p.feedback.get('thumbs_down', 0)} thumbs-down, {p.feedback.get('regenerate', 0)} regenerate clicks"
        for p in s.phases))
    lines += render_stages(s.stages)
    lines += ["", "Per release          queries  p50/p95/p99 ms     $/query   regen  refused  unsupported  excl.  false-excl."]
    for r in s.releases:
        p50, p95, p99 = r.p50_p95_p99
        cost = "      -" if r.cost_per_query_usd is None else f"{r.cost_per_query_usd:.5f}"
        faith = f"{_pct(r.faithfulness_unsupported)} (n={r.faithfulness_scored})"
        false_excl = f"{_pct(r.false_exclusion_rate)} (n={r.false_exclusion_eligible})"
        lines.append(f"  {r.release:<18} {r.queries:7d}  {_ms(p50)}/{_ms(p95)}/{_ms(p99)}  {cost}   {_pct(r.regeneration_rate)}   "
                     f"{_pct(r.refusal_rate)}   {faith:>11}  {_pct(r.relevance_exclusion_rate)}  {false_excl}")
    lines += ["", "Unsupported answers per release: scorer only (biased by its errors), humans only, prediction-powered"]
    lines += [f"  {r.release:<18} scorer only {_pct(r.faithfulness_unsupported)}, {r.unsupported_three_ways}" for r in s.releases]
    from rag_monitor.demo.signals import render_signals

    lines += render_signals(s.signals)
    lines += ["", "Drift verdicts"]
    if not s.drift:
        lines.append("  no drift test ran")
    for phase in dict.fromkeys(d["phase"] for d in s.drift):
        runs = [d for d in s.drift if d["phase"] == phase]
        last = runs[-1]
        flagged = sum(d["is_drift"] for d in runs)
        verdict = "DRIFT" if last["is_drift"] else "no drift"
        lines.append(f"  {phase:<12} {last['signal']} ({last['detector']}): latest {verdict} (p={last['p_value']:.3g}, "
                     f"n={last['n_reference']}/{last['n_current']}); {flagged} of {len(runs)} tests flagged drift")
    lines += render_probes(s.probes, s.probe_errors)
    lines += render_changes(s.changes)
    lines += ["", "Alerts that fired (Alertmanager -> webhook)"]
    if not s.alerts:
        lines.append("  none received" if "prometheus" in s.urls else "  (Prometheus/Alertmanager not running: no alerts evaluated)")
    for a in s.alerts:
        labels, ann = a.get("labels", {}), a.get("annotations", {})
        what = " ".join(x for x in (labels.get("signal") or labels.get("release") or labels.get("variant"), labels.get("quantile")) if x)
        lines.append(f"  {labels.get('alertname', '?'):<28} {labels.get('severity', ''):<8} {what:<16} -> {a.get('receiver', '')}")
        triage = ann.get("triage") or labels.get("triage", "")
        if triage:
            lines.append(f"      triage: {triage}")
    lines += ["", "Review queue: " + ", ".join(f"{k} {v}" for k, v in sorted(s.review_queue.items()))
              + "   sampled by stratum: " + ", ".join(f"{k} {v}" for k, v in sorted(s.review_by_stratum.items())),
              f"  thumbs-down answers in the queue: {s.thumbs_down_in_queue} of {s.thumbs_down_sent}"]
    if s.human_queue:
        lines.append(f"  waiting for you: {s.human_queue.get('items', 0)} items ({s.human_queue.get('pairs', 0)} of them shadow pairs),"
                     " never seen by the simulated reviewer: open the review page below")
    if s.shadow is not None:
        lines += ["", "Shadow candidate vs production (blind pairwise review; `rag-monitor shadow report`)"]
        lines += [f"  {line}" for line in s.shadow.text().splitlines()]
        for c in s.shadow_archived.candidates if s.shadow_archived is not None else []:
            w = c.win
            rate = "-" if w.value is None else f"{w.value:.2f} [{w.low:.2f}, {w.high:.2f}]"
            lines.append(f"  on questions production answered from an archived policy: win rate {rate}"
                         f" ({w.wins} wins, {w.ties} ties, {w.losses} losses)")
    lines += ["", "Open:"] + [f"  {name:<12} {url}" for name, url in s.urls.items()]
    if s.notes:
        lines += [""] + [f"Note: {n}" for n in s.notes]
    lines.append("=" * 78)
    return "\n".join(lines)
