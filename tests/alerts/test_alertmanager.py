"""The shipped Alertmanager routing: valid, and routes by severity and triage as documented."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.alerting import ALERTS_DIR, alertmanager_test_config
from tests.services import require_binary

CONFIG = ALERTS_DIR / "alertmanager.yml"


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([require_binary("amtool"), *args], capture_output=True, text=True)


def test_amtool_accepts_the_shipped_config():
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 receivers" in result.stdout


@pytest.mark.parametrize(("labels", "receivers"), [
    (["severity=page", "triage=regression"], "oncall-pager,release-owners"),
    (["severity=page", "triage=drift"], "oncall-pager,ml-data"),
    (["severity=warning", "triage=regression"], "release-owners"),
    (["severity=warning", "triage=drift"], "ml-data"),
    (["severity=warning"], "oncall-tickets"),
])
def test_routes_by_severity_and_triage(labels, receivers):
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}", "alertname=RagFaithfulnessLow", *labels)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == receivers


def test_a_page_inhibits_the_warning_of_the_same_alert():
    rules = yaml.safe_load(CONFIG.read_text())["inhibit_rules"]
    assert {"source_matchers": ['severity="page"'], "target_matchers": ['severity="warning"'], "equal": ["alertname", "variant"]} in rules


def test_receivers_ship_placeholder_urls_that_the_harness_replaces(tmp_path):
    shipped = yaml.safe_load(CONFIG.read_text())
    assert all(".example.invalid/" in hook["url"] for r in shipped["receivers"] for hook in r["webhook_configs"])
    config = alertmanager_test_config("http://127.0.0.1:9")
    assert {hook["url"] for r in config["receivers"] for hook in r["webhook_configs"]} == {
        f"http://127.0.0.1:9/{r['name']}" for r in shipped["receivers"]}
    assert config["route"]["group_wait"] == "1s" and all(r.get("repeat_interval", "1h") == "1h" for r in config["route"]["routes"])
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
    assert amtool("check-config", str(tmp_path / "am.yml")).returncode == 0
