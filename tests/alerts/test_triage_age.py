"""The regression triage says how long ago the release was deployed, as a person reads it.

The shipped annotation template, expanded by promtool at three ages: a few seconds read "just
now" (it read "deployed 0 minutes ago"), under a minute in seconds, then Prometheus' durations.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from rag_monitor.alerts.rulekit import _triage_annotation
from tests.services import require_binary

REGRESSION = 'label_replace(label_replace(vector(1), "triage", "regression", "", ""), "suspected_release", "r2", "", "")'


@pytest.mark.parametrize(("deployed_s", "reads"), [
    (598, "just now"), (570, "30 seconds ago"), (600 - 1230, "20m 30s ago"), (600 - 7500, "2h 5m 0s ago")])
def test_deployed_age_reads_as_a_person_says_it(tmp_path, deployed_s, reads):
    promtool = require_binary("promtool")
    rule = {"alert": "Regression", "expr": REGRESSION, "annotations": {"triage": _triage_annotation("2h")}}
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "t", "rules": [rule]}]}))
    case = {
        "interval": "1m",
        "input_series": [{"series": 'rag_release_first_seen_timestamp_seconds{service="s",release="r2"}',
                          "values": f"{deployed_s}x20"}],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "Regression", "exp_alerts": [{
            "exp_labels": {"triage": "regression", "suspected_release": "r2"},
            "exp_annotations": {"triage": f"suspected regression after release r2, deployed {reads}"}}]}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "tests": [case]}))
    result = subprocess.run([promtool, "test", "rules", "test.yml"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
