"""Triage by comparison: Prometheus decides, per guardrail, whether an alert is a suspected
regression (a change made the signal worse than what it replaced) or suspected drift.

Two comparisons, both with numbers that do not move with the time since a deploy:

- **Releases** (guardrails measured per release): the newest release serving production is
  compared with the release before it on the same signal: side by side while both serve (a
  canary, or the tail of a rollout), otherwise the newest release's first value against the
  previous release's last stable value (its value while it served alone). Both are latched by
  recording rules that read their own previous value, so a release rolled out hours ago that is
  still worse stays a regression, and a release rolled back stops being a suspect once it no
  longer serves.
- **Other changes** (a provider's model version under one requested name, a prompt or config
  version, an index rebuild or bulk load: ``rag_change_last_timestamp_seconds{kind, change}``;
  for guardrails with no release series, releases too): the signal latched at the change
  (``before``: its last value ``triage.sighting_lag`` before the change was first seen, because a
  probe run can move the signal before the release's first spans are exported and scraped, and
  traffic may have paused before the change) against its
  value over the first full window after it (``after``; the current value until then). A change that came after the newest release is compared first.

The decision is latched per incident, an incident being one alert: while an alert fires it keeps
the labels it began to fire with (read back from its own ``ALERTS`` series, ``rulekit._with_triage``),
so a firing alert never flips and never re-routes, while an alert that begins later (a page during a
warning's incident, a new release's series) is triaged by the comparison at its own start. A pending
alert can still change label once, when the change behind it is seen late (its first spans exported
and scraped after a probe run already saw it): its ``for:`` restarts under the new label, so the page
carries the right one when ``for:`` is at least ``triage.sighting_lag``. ``rag:triage`` (the current
comparison) has one series per guardrail, which every alert that is not firing joins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rag_monitor.alerts.rulekit import PRODUCTION, TRIAGE_RECORD, _indent, _num, _record
from rag_monitor.alerts.thresholds import parse_duration

LOOKBACK = "5m"
"""The change gauges are read over Prometheus's own lookback, ignoring staleness markers: a failed
scrape marks every series of the target stale at once, and without this the comparison lost its
change for that evaluation and read drift (a loaded demo flipped a pending page's label every few
seconds). A change the agent stopped exporting lingers this long; the newest one still wins."""

CHANGE_KINDS = ("release", "model", "prompt", "config", "index")
"""What counts as a change (``rag_change_events_total{kind}``)."""


@dataclass(frozen=True)
class Signal:
    """How one guardrail is measured for triage: ``value(by)`` is a PromQL expression of the
    signal aggregated ``by`` the given labels (``"release"`` or ``""``), absent below its
    minimum sample; ``worse`` is ``"higher"`` or ``"lower"``; ``window`` is how long after a
    change the signal holds only post-change data."""

    guardrail: str
    value: Callable[[str], str]
    worse: str
    window: str
    per_release: bool
    kinds: tuple[str, ...]


def _ratio(part: str, whole: str, by: str, window: str, func: str = "increase") -> str:
    return (f"(\n  sum by ({by}) ({func}({part}[{window}]))\n  or\n  0 * sum by ({by}) ({func}({whole}[{window}]))\n)\n"
            f"/\n(sum by ({by}) ({func}({whole}[{window}])) > 0)")


def _guard(expr: str, by: str, count: str, minimum: int) -> str:
    return f"(\n{_indent(expr, 2)}\n)\nand on ({by})\n(sum by ({by}) (increase({count}[{{w}}])) >= {minimum})"


def _signals(t: Mapping[str, Any]) -> list[Signal]:
    f, lat, c, r = t["faithfulness"], t["latency"], t["cost"], t["regeneration"]
    fr, ca, fx = t["freshness"], t["cache"], t["filter_false_exclusion"]
    settle = t["triage"]["settle"]
    prod = "{" + PRODUCTION + "}"
    scored = 'verdict=~"supported|unsupported",' + PRODUCTION

    def faithfulness(by: str) -> str:
        inner = ", ".join(x for x in (by, "scorer") if x)
        w = f["window"]
        ratio = _ratio(f'rag_faithfulness_weighted_total{{verdict="unsupported",{PRODUCTION}}}', f"rag_faithfulness_weighted_total{{{scored}}}", inner, w)
        guarded = f"(\n{_indent(ratio, 2)}\n)\nand on ({inner})\n(sum by ({inner}) (increase(rag_faithfulness_scored_total{{{scored}}}[{w}])) >= {f['min_scored']})"
        return f"max by ({by}) (\n{_indent(guarded, 2)}\n)"  # the worst scorer

    def latency(by: str) -> str:
        w = lat["window"]
        le = ", ".join(x for x in ("le", by) if x)
        q = f"histogram_quantile(0.95, sum by ({le}) (rate(rag_query_duration_seconds_bucket{prod}[{w}])))"
        return _guard(q, by, f"rag_query_duration_seconds_count{prod}", lat["min_queries"]).replace("{w}", w)

    def cost(by: str) -> str:
        w = c["window"]
        mean = f"sum by ({by}) (rate(rag_query_cost_usd_sum{prod}[{w}]))\n/\n(sum by ({by}) (rate(rag_query_cost_usd_count{prod}[{w}])) > 0)"
        return _guard(mean, by, f"rag_query_cost_usd_count{prod}", c["min_queries"]).replace("{w}", w)

    def regeneration(by: str) -> str:
        w = r["window"]
        ratio = _ratio(f"rag_regenerated_queries_total{prod}", f"rag_queries_total{prod}", by, w, "rate")
        return _guard(ratio, by, f"rag_queries_total{prod}", r["min_queries"]).replace("{w}", w)

    def false_exclusion(by: str) -> str:
        # Every replica exports the store's review-based gauges: max deduplicates.
        if by:
            return (f"max by (release) (rag_filter_false_exclusion_ratio)\nand on (release)\n"
                    f"(max by (release) (rag_filter_false_exclusion_eligible) >= {fx['min_eligible']})")
        return (f"sum(max by (release) (rag_filter_false_exclusions))\n/\n"
                f"(sum(max by (release) (rag_filter_false_exclusion_eligible)) >= {fx['min_eligible']})")

    def freshness(by: str) -> str:
        w = fr["window"]
        if not by:  # no release series: the commit-to-searchable lag, which index changes move
            return (f"histogram_quantile(0.99, sum by (le) (rate(rag_index_freshness_lag_seconds_bucket[{w}])))\n"
                    f"and on ()\n(sum(increase(rag_index_freshness_lag_seconds_count[{w}])) >= {fr['min_events']})")
        ratio = _ratio(f"rag_index_stale_queries_total{prod}", f"rag_index_checked_queries_total{prod}", by, w, "rate")
        return _guard(ratio, by, f"rag_index_checked_queries_total{prod}", fr["min_checked_queries"]).replace("{w}", w)

    def cache(by: str) -> str:
        w = ca["window"]
        inner = ", ".join(x for x in (by, "cache") if x)
        hit = _ratio(f'rag_cache_requests_total{{outcome="hit",{PRODUCTION}}}', f"rag_cache_requests_total{prod}", inner, w, "rate")
        guarded = _guard(hit, inner, f"rag_cache_requests_total{prod}", ca["min_requests"]).replace("{w}", w)
        return f"min by ({by}) (\n{_indent(guarded, 2)}\n)"  # the worst cache

    def drift(by: str) -> str:
        return "max(rag_drift_evidence)"

    def neighbours(by: str) -> str:
        return 'max(rag_probe_topk_overlap{measure="rbo"})'

    app = ("model", "prompt", "config", "index")
    return [
        Signal("faithfulness", faithfulness, "higher", f["window"], True, app),
        Signal("latency", latency, "higher", lat["window"], True, app),
        Signal("cost", cost, "higher", c["window"], True, app),
        Signal("regeneration", regeneration, "higher", r["window"], True, app),
        Signal("filter_false_exclusion", false_exclusion, "higher", settle, True, ("config", "index")),
        Signal("freshness", freshness, "higher", fr["window"], True, ("config", "index")),
        Signal("cache", cache, "lower", ca["window"], True, app),
        # Documents' embeddings move with the index and a release's retrieval; queries with nothing the app does.
        Signal("drift", drift, "higher", settle, False, ("release", "index")),
        Signal("neighbour_stability", neighbours, "lower", settle, False, ("release", "index", "config")),
    ]


def _rec(guardrail: str, name: str, expr: str) -> dict[str, Any]:
    """A per-guardrail recording rule: the rule's label names the guardrail (and keeps rule names unique)."""
    return {**_record(name, expr), "labels": {"guardrail": guardrail}}


def _worse(s: Signal, margin: float, on: str) -> str:
    """The comparison operator and the scaled right-hand side: ``> on (...) 1.2 *``."""
    if s.worse == "higher":
        return f"> on ({on}) group_left () {_num(round(1 + margin, 6))} *"
    return f"< on ({on}) group_left () {_num(round(1 - margin, 6))} *"


def _release_rules(s: Signal, t: Mapping[str, Any]) -> list[dict[str, str]]:
    g, hold, margin = s.guardrail, t["triage"]["hold"], t["triage"]["min_relative_change"]
    sel = f'{{guardrail="{g}"}}'
    value, first, stable = f"rag:triage:release_value{sel}", f"rag:triage:release_first{sel}", f"rag:triage:release_stable{sel}"
    newest, previous = f"rag:triage:release_newest{sel}", f"rag:triage:release_previous{sel}"
    first_seen = "max by (release) (rag:release:first_seen_timestamp_seconds)"
    worse = _worse(s, margin, "")
    serving = f"({first_seen} and on (release) (sum by (release) (rate(rag_queries_total{{{PRODUCTION}}}[{s.window}])) > 0))"
    return [
        _rec(g, "rag:triage:release_value", s.value("release")),
        # Each release's first value, latched (it reads its own previous evaluation).
        _rec(g, "rag:triage:release_first", f"last_over_time({first}[{hold}])\nor on (release)\n{value}"),
        # Each release's value while it served alone, held when it no longer does.
        _rec(g, "rag:triage:release_stable", f"({value} and on () (count({value}) == 1))\nor on (release)\nlast_over_time({stable}[{hold}])"),
        # The newest release serving production (value: its first sighting).
        _rec(g, "rag:triage:release_newest", f"topk(1, {first_seen} and on (release) {value})"),
        # The release before it: the newest older one that has a stable value.
        _rec(g, "rag:triage:release_previous", f"topk(1, ({first_seen} and on (release) {stable}) < on () group_left () {newest})"),
        # Undecided while the newest release serving production queries has too few samples to
        # compare (bounded by one window): its alerts wait rather than start with a guess.
        _rec(g, "rag:triage:undecided", f"""
(time() - max({serving}) < {_num(parse_duration(s.window))})
unless on ()
({value} and on (release) topk(1, {serving}))"""),
        _rec(g, "rag:triage:release_regression", f"""
(
  # side by side: both serve
  ({value} and on (release) {newest})
  {worse} ({value} and on (release) {previous})
)
or on ()
(
  # the previous release no longer serves: the newest one's first value against its last stable one
  ({first} and on (release) {newest})
  {worse} ({stable} and on (release) {previous})
  unless on () ({value} and on (release) {previous})
)"""),
    ]


def _change_rules(s: Signal, t: Mapping[str, Any]) -> list[dict[str, str]]:
    g, hold, margin = s.guardrail, t["triage"]["hold"], t["triage"]["min_relative_change"]
    sel = f'{{guardrail="{g}"}}'
    kinds = [k for k in s.kinds if k != "release"] if s.per_release else list(s.kinds)
    change, signal = f"rag:triage:change{sel}", f"rag:triage:signal{sel}"
    before, after = f"rag:triage:change_before{sel}", f"rag:triage:change_after{sel}"
    at = f'count_values by (guardrail) ("change_at", {change})'
    window, settle = _num(parse_duration(s.window)), _num(parse_duration(t["triage"]["settle"]))
    lag = t["triage"]["sighting_lag"]
    return [
        _rec(g, "rag:triage:change", f'topk(1, rag:change:last_timestamp_seconds{{kind=~"{"|".join(kinds)}"}})'),
        _rec(g, "rag:triage:signal", s.value("")),
        # Latched per change (keyed by its timestamp): the signal's last value ``sighting_lag`` before
        # the change was first seen (the last one it had when traffic paused before the change, as a
        # provider update seen with the morning's first query; only while the change is recent: a
        # Prometheus that was not watching has no "before") ...
        _rec(g, "rag:triage:change_before", f"""
(last_over_time({before}[{hold}]) and on (guardrail, change_at) {at})
or on (guardrail)
(
  last_over_time({signal}[{hold}] offset {lag}) * on (guardrail) group_left (change_at) ({at} * 0 + 1)
  and on (guardrail) (time() - {change} < {settle})
)"""),
        # ... and over the first full window after it.
        _rec(g, "rag:triage:change_after", f"""
(last_over_time({after}[{hold}]) and on (guardrail, change_at) {at})
or on (guardrail)
(
  {signal} * on (guardrail) group_left (change_at) ({at} * 0 + 1)
  and on (guardrail) (time() - {change} >= {window})
)"""),
        _rec(g, "rag:triage:change_regression", f"""
(
  (
    {after}
    or on (guardrail)
    ({signal} * on (guardrail) group_left (change_at) ({at} * 0 + 1))
  )
  {_worse(s, margin, "guardrail, change_at")} {before}
)
* on (guardrail) group_left (kind, change)
({change} * 0 + 1)"""),
    ]


def _decision(s: Signal) -> str:
    g = s.guardrail
    sel = f'{{guardrail="{g}"}}'
    named = (f'label_replace(rag:triage:change_regression{{guardrail="{g}",kind="release"}}, "suspected_release", "$1", "change", "(.*)")\n'
             f'  or rag:triage:change_regression{{guardrail="{g}",kind!="release"}}')
    change = (f'label_replace(\n  label_join(\n    {named},\n    "suspected_change", " ", "kind", "change"\n  ),\n'
              f'  "triage", "regression", "", ""\n)')
    parts = []
    if s.per_release:
        # A change of another kind is compared unless the newest release came after it.
        change = f"({change}\n  unless on (guardrail) (rag:triage:change{sel} < on (guardrail) rag:triage:release_newest{sel}))"
        release = (f'label_replace(label_replace(label_replace(rag:triage:release_regression{sel},\n'
                   f'  "suspected_release", "$1", "release", "(.*)"), "suspected_change", "release $1", "release", "(.*)"),\n'
                   f'  "triage", "regression", "", "")')
        parts = [change, release]
    else:
        parts = [change]
    drift = f'label_replace(label_replace(vector(1), "triage", "drift", "", ""), "guardrail", "{g}", "", "")'
    options = "\nor on (guardrail)\n".join(
        f"max by (guardrail, triage, suspected_release, suspected_change) (\n{_indent(p, 2)}\n) * 0 + 1" for p in parts)
    decided = f"(\n{_indent(options, 2)}\n  or on (guardrail)\n  {drift}\n)"
    if s.per_release:
        decided += f"\nunless on (guardrail)\nrag:triage:undecided{sel}"
    return decided


def _triage_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    rules: list[dict[str, str]] = [
        # Replicas see a release at slightly different times: the earliest sighting wins.
        _record("rag:release:first_seen_timestamp_seconds", f"min by (service, release) (last_over_time(rag_release_first_seen_timestamp_seconds[{LOOKBACK}]))"),
        # Every change but releases (those come from the release sightings above), earliest sighting.
        # A release is a change when it serves production (a shadow candidate is not one); with no
        # query metrics at all, the newest release seen.
        _record("rag:change:last_timestamp_seconds", f"""
min by (kind, change) (last_over_time(rag_change_last_timestamp_seconds{{kind!="release"}}[{LOOKBACK}]))
or
label_replace(
  label_replace(
    topk(1,
      (first_seen and on (release) (sum by (release) (rate(rag_queries_total{{{PRODUCTION}}}[{t["triage"]["settle"]}])) > 0))
      or on ()
      first_seen
    ),
    "change", "$1", "release", "(.*)"
  ),
  "kind", "release", "", ""
)""".replace("first_seen", "max by (release) (rag:release:first_seen_timestamp_seconds)")),
    ]
    return [{"name": "rag-triage", "rules": rules}]


def guardrail_triage_group(t: Mapping[str, Any], guardrail: str, name: str) -> dict[str, Any]:
    """The triage records of one guardrail, in the guardrail's own rule file (so its tests evaluate
    only its own comparisons): per release, then per change, then the decision, ``rag:triage``."""
    s = next(x for x in _signals(t) if x.guardrail == guardrail)
    rules = _release_rules(s, t) if s.per_release else []
    rules += _change_rules(s, t)
    # The current comparison. Each alert latches its own labels while it fires (rulekit._with_triage).
    rules.append(_rec(guardrail, TRIAGE_RECORD, _decision(s)))
    return {"name": name, "rules": rules}


def with_triage(guardrails: tuple[str, ...], file: str, build):
    """A rule-file builder: each guardrail's triage group (``rag-<file>-triage``), then ``build``'s groups."""
    def groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
        names = [f"rag-{file}-triage" if len(guardrails) == 1 else f"rag-{file}-{g}-triage" for g in guardrails]
        return [*(guardrail_triage_group(t, g, n) for g, n in zip(guardrails, names)), *build(t)]
    return groups
