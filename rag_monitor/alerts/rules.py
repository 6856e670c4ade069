"""Reads the Prometheus rule files in ``rag_monitor/defaults/alerts/rules/`` and describes them.

Tests use it to check the rules against the metrics the agent defines; the README's alert
reference is rendered from it, so the documentation cannot drift from the rules.

Usage::

    rules = load_rules()                           # the shipped rules (RULES_DIR)
    [r.name for r in rules if r.kind == "alert"]    # ['RagFaithfulnessLow', ...]
    referenced_metrics(rules[0].expr)              # {'rag_faithfulness_weighted_total', ...}
    print(render_markdown(rules, load_thresholds()))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rag_monitor.alerts.metrics import METRIC_PREFIX
from rag_monitor.alerts.thresholds import RULES_DIR

RECORD_PREFIX = "rag:"

# PromQL string literals (label values, regexes) may contain anything that looks like a name.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![A-Za-z0-9_:])[A-Za-z_:][A-Za-z0-9_:]*")
# Template annotations run PromQL through `query "..."`; runbooks name metrics in prose.
_ANNOTATION_NAME = re.compile(r"(?<![A-Za-z0-9_:.])(?:rag_[a-z0-9_]+|rag:[a-z0-9_:]+[a-z0-9_])")


@dataclass(frozen=True)
class Rule:
    """One recording (``kind="record"``) or alerting (``kind="alert"``) rule."""

    name: str
    kind: Literal["alert", "record"]
    expr: str
    group: str
    file: str
    for_: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def severity(self) -> str | None:
        return self.labels.get("severity")


class RuleFileError(ValueError):
    """A rule file is not the Prometheus rule format; the message names the file and rule."""


def _parse_rule(raw: Any, group: str, file: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise RuleFileError(f"{file}: group {group!r}: a rule must be a mapping, got {raw!r}")
    if ("alert" in raw) == ("record" in raw):
        raise RuleFileError(f"{file}: group {group!r}: a rule needs exactly one of 'alert' or 'record': {dict(raw)}")
    kind = "alert" if "alert" in raw else "record"
    name = raw[kind]
    if not isinstance(raw.get("expr"), str) or not raw["expr"].strip():
        raise RuleFileError(f"{file}: rule {name!r} has no expr")
    return Rule(
        name=name, kind=kind, expr=raw["expr"].strip(), group=group, file=file,
        for_=raw.get("for"), labels=dict(raw.get("labels") or {}), annotations=dict(raw.get("annotations") or {}),
    )


def load_rules(directory: str | Path = RULES_DIR) -> list[Rule]:
    """Every rule of every ``*.yml``/``*.yaml`` file in ``directory``, in file and group order."""
    root = Path(directory)
    files = sorted([*root.glob("*.yml"), *root.glob("*.yaml")])
    if not files:
        raise RuleFileError(f"no rule files (*.yml) in {root}")
    rules: list[Rule] = []
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        groups = doc.get("groups") if isinstance(doc, Mapping) else None
        if not isinstance(groups, list):
            raise RuleFileError(f"{path.name}: expected a top-level 'groups' list")
        for group in groups:
            for raw in group.get("rules") or []:
                rules.append(_parse_rule(raw, group.get("name", "?"), path.name))
    return rules


def referenced_metrics(expr: str) -> set[str]:
    """Agent metric names (``rag_...``) a PromQL expression selects; record names (``rag:``) excluded."""
    return {n for n in _NAME.findall(_STRING.sub('""', expr)) if n.startswith(METRIC_PREFIX)}


def referenced_records(expr: str) -> set[str]:
    """Recording-rule outputs (``rag:...``) a PromQL expression reads."""
    return {n for n in _NAME.findall(_STRING.sub('""', expr)) if n.startswith(RECORD_PREFIX)}


def annotation_names(rule: Rule) -> set[str]:
    """Metric and record names mentioned in a rule's annotations (template queries and runbook prose)."""
    return {n for text in rule.annotations.values() for n in _ANNOTATION_NAME.findall(text)}


_TEMPLATE = re.compile(r"(?:\{\{.*?\}\})+")


def _untemplated(text: str) -> str:
    """A summary with its Go-template actions shown as an ellipsis: what a reader needs in a table."""
    return _TEMPLATE.sub("…", text)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render_markdown(rules: Iterable[Rule], thresholds: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The README's alert reference: alerts, then thresholds (when given), then recording rules."""
    rules = list(rules)
    alerts = [r for r in rules if r.kind == "alert"]
    records = [r for r in rules if r.kind == "record"]
    out = ["### Alerts", "", "| alert | severity | for | guardrail | summary |", "|---|---|---|---|---|"]
    for r in alerts:
        extra = f" ({r.labels['quantile']})" if "quantile" in r.labels else ""
        out.append(f"| `{r.name}`{extra} | {r.severity or ''} | {r.for_ or '0s'} | {r.labels.get('guardrail', '')} | {_cell(_untemplated(r.annotations.get('summary', '')))} |")
    out += ["", "Every alert carries `triage` (`regression` with `suspected_change` and, for a release, `suspected_release`; "
            "or `drift`), decided by comparison (`rag:triage`, one series per guardrail) and kept while the alert fires, and a `runbook` annotation.", ""]
    if thresholds:
        out += ["### Thresholds (`rag_monitor/defaults/alerts/thresholds.yaml`)", "", "| setting | value |", "|---|---|"]
        for section, values in thresholds.items():
            for key, value in values.items():
                out.append(f"| `{section}.{key}` | `{value}` |")
        out.append("")
    out += ["### Recording rules", "", "| record | expression |", "|---|---|"]
    for r in records:
        out.append(f"| `{r.name}` | `{_cell(r.expr)}` |")
    out += ["", "### Runbooks", ""]
    seen = set()
    for r in alerts:
        if r.name in seen:
            continue
        seen.add(r.name)
        out += [f"**{r.name}**: {_cell(r.annotations.get('runbook', ''))}", ""]
    return "\n".join(out)
