"""The shipped rule files: generated from the thresholds, valid, tested by promtool, and
written against the metrics the agent defines."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from prometheus_client import CollectorRegistry

from rag_monitor.alerts.generate import (
    SCHEMA, ThresholdsError, format_duration, load_thresholds, parse_duration, render_rule_files, stale_rule_files,
    validate_thresholds,
)
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.alerts.rules import (
    RuleFileError, annotation_names, load_rules, referenced_metrics, referenced_records, render_markdown,
)
from rag_monitor.alerts.thresholds import ALERTS_DIR, RULES_DIR
from tests.services import require_binary

ALERTS = ALERTS_DIR  # the shipped alerting config: thresholds.yaml, generated rules/, promtool tests/
RULES = RULES_DIR
PROMTOOL_TESTS = sorted((ALERTS / "tests").glob("*.test.yml"))


class NoReviews:
    """A store with no reviewed query: enough for the collector to name its families."""

    def __init__(self):
        self.queue = self

    def reviewed(self, since: float) -> list:
        return []


def collector_metric_names() -> set[str]:
    """The review-based gauges the agent computes at scrape time (not in AgentMetrics)."""
    from rag_monitor.agent.scrape import ReviewStatsCollector
    from rag_monitor.review.collector import ReviewMetricsCollector
    from rag_monitor.review.unsupported import UnsupportedRateCollector

    return ({family.name for family in ReviewStatsCollector(NoReviews()).collect()}
            | {family.name for family in UnsupportedRateCollector.families().values()}
            | {family.name for family in ReviewMetricsCollector.families().values()})


GUARDRAIL_ALERTS = {
    "RagFaithfulnessLow", "RagQueryLatencyOverSLO", "RagFilterFalseExclusionsHigh",
    "RagRegenerationRateOutsideBand", "RagCostPerQueryOverBudget", "RagDriftDetected",
    "RagIndexFreshnessLagOverSLO", "RagStaleIndexServed", "RagCacheHitRateCollapsed",
    "RagNeighbourOverlapDropped",
}


def defined_metric_names() -> set[str]:
    """Every series name AgentMetrics exposes, with the suffixes of its type."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for family in AgentMetrics(CollectorRegistry()).registry.collect():
        names.update(family.name + s for s in suffixes[family.type])
    return names


@pytest.fixture(scope="module")
def rules():
    return load_rules(RULES)


def test_rule_files_are_generated_from_the_current_thresholds():
    assert stale_rule_files(ALERTS) == [], "run: python -m rag_monitor.alerts.generate"


def test_promtool_accepts_every_rule_file():
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "rules", *sorted(map(str, RULES.glob("*.yml")))], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)  # the faithfulness cases evaluate every rule over 7 hours of 1-minute steps
@pytest.mark.parametrize("cases", PROMTOOL_TESTS, ids=lambda p: p.stem)
def test_promtool_unit_tests_pass(cases):
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "test", "rules", str(cases)], capture_output=True, text=True, cwd=ALERTS)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_every_alert_has_promtool_cases_for_firing_quiet_and_both_triage_branches(rules):
    cases: dict[str, list[list[dict]]] = {}
    for path in PROMTOOL_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], []).append(case.get("exp_alerts") or [])
    assert {r.name for r in rules if r.kind == "alert"} == GUARDRAIL_ALERTS == set(cases)
    for name, expectations in cases.items():
        triages = {a["exp_labels"]["triage"] for exp in expectations for a in exp}
        assert triages == {"regression", "drift"}, name
        assert sum(1 for exp in expectations if not exp) >= 2, f"{name}: needs quiet cases (good series, too little data)"
        for exp in expectations:
            for a in exp:
                if a["exp_labels"]["triage"] == "regression":
                    change = a["exp_labels"]["suspected_change"]
                    assert a["exp_annotations"]["triage"].startswith(f"suspected regression after {change}:")
                    if change.startswith("release "):
                        assert a["exp_labels"]["suspected_release"] == change.removeprefix("release ")
                else:
                    assert "suspected_change" not in a["exp_labels"]
                    assert a["exp_annotations"]["triage"].startswith("suspected drift: the releases serving moved together")


def test_triage_is_decided_by_comparison_for_each_case_the_docs_name():
    """The four cases of docs/alerts.md, plus a model change without a release, have promtool cases."""
    names = [c["name"] for c in yaml.safe_load((ALERTS / "tests" / "triage.test.yml").read_text())["tests"]]
    for case in ("canary worse", "all releases worse", "after 3 hours", "rolled back", "model version changes"):
        assert any(case in n for n in names), case


def test_every_guardrail_has_one_triage_series_and_alerts_join_their_own(rules):
    guardrails = {r.labels["guardrail"] for r in rules if r.kind == "alert"}
    triage = {r.labels.get("guardrail") for r in rules if r.name == "rag:triage"}
    assert triage == guardrails
    for rule in (r for r in rules if r.kind == "alert"):
        assert f'rag:triage{{guardrail="{rule.labels["guardrail"]}"}}' in rule.expr, rule.name


def test_rules_use_only_metrics_the_agent_defines(rules):
    defined = defined_metric_names() | collector_metric_names()
    used = {m for r in rules for m in referenced_metrics(r.expr)}
    mentioned = {n for r in rules for n in annotation_names(r) if n.startswith("rag_")}
    assert used, "the parser found no metric names"
    assert used - defined == set()
    # Runbooks and template queries name metrics too: they must exist (a bare family name is fine).
    families = defined | {f.name for f in AgentMetrics(CollectorRegistry()).registry.collect()}
    assert {"rag_filter_false_exclusion_ratio", "rag_filter_false_exclusion_eligible"} <= defined
    assert mentioned - families == set()


def test_recorded_series_read_by_rules_and_annotations_exist(rules):
    records = {r.name for r in rules if r.kind == "record"}
    read = {n for r in rules for n in referenced_records(r.expr)} | {n for r in rules for n in annotation_names(r) if n.startswith("rag:")}
    assert read - records == set()


def test_every_alert_carries_severity_triage_and_runbook(rules):
    for rule in (r for r in rules if r.kind == "alert"):
        assert rule.severity in {"page", "warning"}, rule.name
        assert "group_left (triage, suspected_release, suspected_change)" in rule.expr, rule.name
        assert {"summary", "triage", "runbook"} <= set(rule.annotations), rule.name
        runbook = rule.annotations["runbook"]
        for part in ("Meaning:", "Check first:", "Phoenix", "First step:"):
            assert part in runbook, (rule.name, part)


def test_the_parser_ignores_names_in_strings_and_labels():
    expr = 'sum by (intent) (rate(rag_queries_total{intent="rag_fake_total"}[5m])) / on (variant) rag:regeneration_ratio'
    assert referenced_metrics(expr) == {"rag_queries_total"}
    assert referenced_records(expr) == {"rag:regeneration_ratio"}


def test_every_threshold_changes_the_generated_rules():
    """Thresholds live in one place: each setting reaches the rules, none is a dead key."""
    base = load_thresholds(ALERTS / "thresholds.yaml")
    rendered = render_rule_files(base)
    bumped = {"duration": lambda v: format_duration(parse_duration(v) + 60), "severity": lambda v: "warning" if v == "page" else "page",
              "ratio": lambda v: v + 0.01 if v < 0.9 else v - 0.01, "count": lambda v: v + 1, "number": lambda v: v + 1}
    for section, keys in SCHEMA.items():
        for key, kind in keys.items():
            changed = render_rule_files(load_thresholds(ALERTS / "thresholds.yaml", {f"{section}.{key}": bumped[kind](base[section][key])}))
            assert changed != rendered, f"{section}.{key} does not reach the rules"


def test_generation_writes_overridden_windows_and_durations(tmp_path):
    from rag_monitor.alerts.generate import write_rule_files

    thresholds = load_thresholds(ALERTS / "thresholds.yaml", {"faithfulness.window": "30s", "faithfulness.for": "2s"})
    write_rule_files(tmp_path, thresholds)
    faith = {r.name: r for r in load_rules(tmp_path) if r.file == "faithfulness.yml"}
    assert faith["RagFaithfulnessLow"].for_ == "2s"
    assert "[30s]" in faith["rag:faithfulness_unsupported_ratio"].expr and "[6h]" not in faith["rag:faithfulness_unsupported_ratio"].expr


@pytest.mark.parametrize(("overrides", "message"), [
    ({"faithfulness.window": "6 hours"}, "not a Prometheus duration"),
    ({"faithfulness.max_unsupported_ratio": 1.5}, "within 0..1"),
    ({"faithfulness.min_scored": 2.5}, "whole number"),
    ({"drift.severity": "critical"}, "severity must be one of"),
    ({"latency.p95_slo": 3}, "names no threshold"),
    ({"regeneration.min_seasons": 9}, "must not exceed"),
])
def test_bad_thresholds_are_rejected_with_the_key(overrides, message):
    with pytest.raises(ThresholdsError, match=message):
        load_thresholds(ALERTS / "thresholds.yaml", overrides)


def test_unknown_or_missing_keys_are_rejected():
    raw = yaml.safe_load((ALERTS / "thresholds.yaml").read_text())
    raw["cost"]["max_usd"] = 1
    with pytest.raises(ThresholdsError, match=r"cost: unknown keys \['max_usd'\]"):
        validate_thresholds(raw)
    del raw["cost"]["max_usd"], raw["drift"]
    with pytest.raises(ThresholdsError, match="missing section 'drift'"):
        validate_thresholds(raw)


def test_durations_round_trip():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert format_duration(3 * 604800) == "3w"
    assert format_duration(90061) == "1d1h1m1s"


def test_render_markdown_lists_alerts_thresholds_and_records(rules):
    text = render_markdown(rules, load_thresholds(ALERTS / "thresholds.yaml"))
    for rule in rules:
        assert f"`{rule.name}`" in text
    assert "| `faithfulness.max_unsupported_ratio` | `0.2` |" in text
    assert "**RagDriftDetected**: Meaning:" in text


def test_load_rules_rejects_malformed_files(tmp_path):
    with pytest.raises(RuleFileError, match="no rule files"):
        load_rules(tmp_path)
    (tmp_path / "bad.yml").write_text("groups:\n- name: g\n  rules:\n  - alert: A\n    record: b\n    expr: up\n")
    with pytest.raises(RuleFileError, match="exactly one of 'alert' or 'record'"):
        load_rules(tmp_path)


def test_the_regeneration_band_constants_are_scipys_quantiles_at_the_monthly_budget():
    """The shipped rule's z (binomial term) is the normal quantile and its t per season count the
    Student quantile with S - 1 degrees of freedom, both at the two-sided tail budget / windows."""
    import re

    from scipy.stats import norm, t

    r = load_thresholds(ALERTS / "thresholds.yaml")["regeneration"]
    tail = r["false_pages_per_30d"] / (30 * 86400 / parse_duration(r["window"]))
    records = {rule["record"]: rule["expr"] for group in yaml.safe_load((RULES / "regeneration.yml").read_text())["groups"]
               for rule in group["rules"] if "record" in rule}
    shipped_t = {int(n): float(v) for n, v in re.findall(r"baseline_seasons == (\d+)\) \+ ([\d.]+)", records["rag:regeneration_ratio:band_t"])}
    assert sorted(shipped_t) == list(range(r["min_seasons"], r["seasons"] + 1))
    for seasons, value in shipped_t.items():
        assert value == pytest.approx(t.ppf(1 - tail / 2, seasons - 1), abs=5e-4), seasons
    z_squared = float(re.search(r"sqrt\(\s*([\d.]+) \*", records["rag:regeneration_ratio:half_width"]).group(1))
    assert z_squared ** 0.5 == pytest.approx(norm.ppf(1 - tail / 2), abs=5e-4)


def test_the_regeneration_band_needs_two_seasons():
    with pytest.raises(ThresholdsError, match="min_seasons must be at least 2"):
        load_thresholds(ALERTS / "thresholds.yaml", overrides={"regeneration.min_seasons": 1})
