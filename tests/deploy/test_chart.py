"""The Helm chart in both modes: lint, render, validate against Kubernetes schemas, and the
properties the modes promise (replicas, storage, secrets, probes, pod security, schema)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from rag_monitor.settings import AgentSettings
from tests.deploy.chart import (
    CHART,
    FULLNAME,
    KUBERNETES_VERSION,
    POSTGRESQL_VALUES,
    SQLITE_VALUES,
    agent_deployment,
    container,
    env_var,
    helm,
    helm_binary,
    kinds,
    one,
    render,
    template_args,
)
from tests.services import require_module

ROOT = CHART.parents[1]
MODES = {"sqlite": SQLITE_VALUES, "postgresql": POSTGRESQL_VALUES}
# prometheus-operator CRDs: not in kubernetes-validate's schemas; checked structurally below.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_is_clean(mode):
    result = helm("lint", "--strict", "-f", str(MODES[mode]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_default_values():
    result = helm("lint", "--strict")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mode", MODES)
def test_manifests_validate_against_kubernetes_schemas(mode):
    require_module("kubernetes_validate")
    import kubernetes_validate

    docs = render(MODES[mode])
    validated = set()
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            continue
        # strict: unknown fields (a typo such as `readinessprobe`) are errors too.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        validated.add(doc["kind"])
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount"} <= validated


@pytest.mark.parametrize("mode", MODES)
def test_operator_resources_have_the_expected_structure(mode):
    docs = render(MODES[mode])
    (monitor,) = kinds(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["path"] == "/metrics"
    # The ServiceMonitor must select the metrics Service and name one of its ports.
    metrics_svc = one(docs, "Service", f"{FULLNAME}-metrics")
    labels = metrics_svc["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert endpoint["port"] in {p["name"] for p in metrics_svc["spec"]["ports"]}
    for rule in kinds(docs, "PrometheusRule"):
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        for group in rule["spec"]["groups"]:
            assert group["name"] and group["rules"]
            for r in group["rules"]:
                assert ("alert" in r) != ("record" in r) and r["expr"]


def test_sqlite_mode_is_one_replica_with_a_pvc_and_no_hpa():
    docs = render(SQLITE_VALUES)
    deployment = agent_deployment(docs)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    (pvc,) = [p for p in kinds(docs, "PersistentVolumeClaim") if p["metadata"]["name"] == f"{FULLNAME}-data"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert not kinds(docs, "HorizontalPodAutoscaler")
    assert not kinds(docs, "PodDisruptionBudget")
    agent = container(deployment, "agent")
    assert env_var(agent, "RAG_MONITOR_STORE_URL") is None
    assert [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]] == ["agent"]


def test_postgresql_mode_scales_out_with_an_hpa_and_a_store_url_secret():
    docs = render(POSTGRESQL_VALUES)
    values = yaml.safe_load(POSTGRESQL_VALUES.read_text())
    deployment = agent_deployment(docs)
    # The HPA owns the replica count; a fixed one would reset it on every upgrade.
    assert "replicas" not in deployment["spec"]
    hpa = one(docs, "HorizontalPodAutoscaler", FULLNAME)
    assert hpa["spec"]["scaleTargetRef"]["name"] == FULLNAME
    assert hpa["spec"]["minReplicas"] == values["autoscaling"]["minReplicas"] > 1
    assert hpa["spec"]["maxReplicas"] == values["autoscaling"]["maxReplicas"]
    assert not [p for p in kinds(docs, "PersistentVolumeClaim") if p["metadata"]["name"] == f"{FULLNAME}-data"]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes["data"]
    store_url = env_var(container(deployment, "agent"), "RAG_MONITOR_STORE_URL")
    assert store_url["valueFrom"]["secretKeyRef"] == {"name": "rag-monitor-db", "key": "url"}
    # One pseudonym key for every replica, from a Secret (never in the agent's ConfigMap).
    key = env_var(container(deployment, "agent"), "RAG_MONITOR_PSEUDONYM_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "rag-monitor-pseudonyms", "key": "key"}
    assert one(docs, "PodDisruptionBudget", FULLNAME)["spec"]["maxUnavailable"] == 1


def test_postgresql_mode_without_hpa_runs_replica_count_replicas():
    docs = render(POSTGRESQL_VALUES, "autoscaling.enabled=false", "replicaCount=4")
    assert agent_deployment(docs)["spec"]["replicas"] == 4
    assert not kinds(docs, "HorizontalPodAutoscaler")


@pytest.mark.parametrize("mode", MODES)
def test_secrets_are_referenced_never_inlined(mode):
    docs = render(MODES[mode], "secrets.otlpToken.existingSecret=", "secrets.otlpToken.generate=false")
    assert not kinds(docs, "Secret"), "the chart must not create Secrets (but the OTLP token it generates)"
    agent = container(agent_deployment(docs), "agent")
    tokens = env_var(agent, "RAG_MONITOR_REVIEW_TOKENS")
    assert tokens["valueFrom"]["secretKeyRef"] == {"name": "rag-monitor-review", "key": "tokens"}
    for c in docs:
        if c["kind"] == "ConfigMap":
            text = yaml.safe_dump(c["data"])
            assert "store_url" not in text and "review_tokens" not in text and "pseudonym_key" not in text


@pytest.mark.parametrize("mode", MODES)
def test_an_otlp_token_is_generated_by_default(mode):
    """An open OTLP receiver lets slow clients hold reading slots and anyone send data: the chart
    generates a token unless the operator gives one, and the agent (and the gateway's bridge) use it."""
    import base64

    docs = render(MODES[mode], "secrets.otlpToken.existingSecret=")
    secret = one(docs, "Secret", f"{FULLNAME}-otlp-token")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert len(base64.b64decode(secret["data"]["token"])) == 48
    pod = agent_deployment(docs)
    names = [c["name"] for c in pod["spec"]["template"]["spec"]["containers"]]
    assert "agent" in names
    for name in names:
        if not env_var(container(pod, name), "AGENT_OTLP_PORT") and name != "agent":
            continue  # a container that does not talk to the agent's OTLP port
        ref = env_var(container(pod, name), "RAG_MONITOR_OTLP_TOKEN")["valueFrom"]["secretKeyRef"]
        assert ref == {"name": f"{FULLNAME}-otlp-token", "key": "token"}
    given = render(MODES[mode], "secrets.otlpToken.existingSecret=my-token")
    assert not kinds(given, "Secret")
    ref = env_var(container(agent_deployment(given), "agent"), "RAG_MONITOR_OTLP_TOKEN")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "my-token", "key": "token"}
    off = render(MODES[mode], "secrets.otlpToken.existingSecret=", "secrets.otlpToken.generate=false")
    assert all(e["name"] != "RAG_MONITOR_OTLP_TOKEN" for e in container(agent_deployment(off), "agent").get("env", []))


@pytest.mark.parametrize("mode", MODES)
def test_pods_run_unprivileged(mode):
    docs = render(MODES[mode])
    for deployment in kinds(docs, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        name = deployment["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["automountServiceAccountToken"] is False, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc.get("privileged", False) is False, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])


@pytest.mark.parametrize("mode", MODES)
def test_every_container_has_probes_and_resources(mode):
    docs = render(MODES[mode])
    for deployment in kinds(docs, "Deployment"):
        for c in deployment["spec"]["template"]["spec"]["containers"]:
            assert c.get("livenessProbe") and c.get("readinessProbe"), (deployment["metadata"]["name"], c["name"])
            assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
    agent = container(agent_deployment(docs), "agent")
    ports = {p["name"]: p["containerPort"] for p in agent["ports"]}
    assert ports == {"otlp": 4318, "http": 8080}
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert agent["startupProbe"]["httpGet"]["port"] in ports


@pytest.mark.parametrize("mode", MODES)
def test_services_expose_otlp_metrics_and_review(mode):
    docs = render(MODES[mode])
    selector = agent_deployment(docs)["spec"]["selector"]["matchLabels"]
    ports = {}
    for kind in ("otlp", "metrics", "review", "headless"):
        svc = one(docs, "Service", f"{FULLNAME}-{kind}")
        assert svc["spec"]["selector"] == selector
        ports[kind] = {p["targetPort"] for p in svc["spec"]["ports"]}
    assert ports["otlp"] == {"otlp"} and ports["metrics"] == {"http"} and ports["review"] == {"http"}
    assert one(docs, "Service", f"{FULLNAME}-headless")["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("mode", MODES)
def test_agent_config_is_valid_settings_and_points_at_mounted_files(mode):
    docs = render(MODES[mode])
    config = yaml.safe_load(one(docs, "ConfigMap", f"{FULLNAME}-agent")["data"]["agent.yaml"])
    fields = {f.name for f in dataclasses.fields(AgentSettings)}
    assert set(config) <= fields, set(config) - fields
    assert config["otlp_host"] == config["http_host"] == "0.0.0.0"
    # Every config-file path the chart sets must be a key of the ConfigMap mounted there.
    mounts = {m["mountPath"]: m["name"] for m in container(agent_deployment(docs), "agent")["volumeMounts"]}
    for setting in ("ingest_config", "redaction_rules", "price_table", "detector_profiles", "sampling_config"):
        if setting not in config:
            continue
        folder, name = config[setting].rsplit("/", 1)
        configmap = one(docs, "ConfigMap", f"{FULLNAME}-{mounts[folder]}")
        assert name in configmap["data"], (setting, config[setting])


def test_agent_config_carries_operator_settings():
    docs = render(SQLITE_VALUES, "json:agent.settings.scorer_threshold=0.35", "agent.settings.top_intents=7")
    config = yaml.safe_load(one(docs, "ConfigMap", f"{FULLNAME}-agent")["data"]["agent.yaml"])
    assert config["scorer_threshold"] == 0.35 and config["top_intents"] == 7


def test_phoenix_subchart_or_external_url():
    with_subchart = render(SQLITE_VALUES)
    assert one(with_subchart, "Deployment", "rm-phoenix")
    config = yaml.safe_load(one(with_subchart, "ConfigMap", f"{FULLNAME}-agent")["data"]["agent.yaml"])
    assert config["phoenix_url"] == "http://rm-phoenix:6006"
    external = render(POSTGRESQL_VALUES)
    assert not [d for d in kinds(external, "Deployment") if d["metadata"]["name"] == "rm-phoenix"]
    config = yaml.safe_load(one(external, "ConfigMap", f"{FULLNAME}-agent")["data"]["agent.yaml"])
    assert config["phoenix_url"] == "http://phoenix.observability.svc:6006"


# --- values.schema.json and the template's own checks ----------------------------------------


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("replicaCount=-1", "replicaCount"),
        ("mode=mysql", "mode"),
        ("ports.otlp=70000", "otlp"),
        ("autoscaling.targetCPUUtilizationPercentage=0", "targetCPUUtilizationPercentage"),
        ("securityContext.allowPrivilegeEscalation=true", "allowPrivilegeEscalation"),
        ("podSecurityContext.runAsNonRoot=false", "runAsNonRoot"),
        ("agent.settings.no_such_setting=1", "no_such_setting"),
        # Secrets belong in Secrets: the schema refuses them as plain settings.
        ("agent.settings.store_url=postgresql://u:p@db/x", "store_url"),
        ("agent.settings.top_intents=many", "top_intents"),
        ("phoenix.externalUrl=phoenix:6006", "externalUrl"),
    ],
)
def test_schema_rejects_bad_values(assignment, message):
    result = helm(*template_args(SQLITE_VALUES, (assignment,)))
    assert result.returncode != 0, f"{assignment} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr


@pytest.mark.parametrize(
    ("values_file", "sets", "message"),
    [
        (SQLITE_VALUES, ("replicaCount=3",), "mode=sqlite runs exactly one replica"),
        (SQLITE_VALUES, ("autoscaling.enabled=true",), "mode=sqlite cannot autoscale"),
        (SQLITE_VALUES, ("gateway.enabled=true",), "needs mode=postgresql"),
        (POSTGRESQL_VALUES, ("store.postgresql.existingSecret=",), "needs store.postgresql.existingSecret"),
        (POSTGRESQL_VALUES, ("secrets.pseudonymKey.existingSecret=",), "must use one pseudonym key"),
        (SQLITE_VALUES, ("phoenix.externalUrl=http://p:6006",), "not both"),
    ],
)
def test_inconsistent_values_fail_with_a_clear_message(values_file, sets, message):
    result = helm(*template_args(values_file, sets))
    assert result.returncode != 0
    assert message in result.stderr


def test_schema_agent_settings_match_settings_module():
    """agent.settings in the schema lists every setting the chart does not manage itself."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = schema["properties"]["agent"]["properties"]["settings"]["properties"]
    chart_managed = {
        "otlp_host", "otlp_port", "http_host", "http_port", "data_dir", "store_url",
        "review_tokens", "otlp_token", "pseudonym_key", "phoenix_url", "phoenix_project",
    }
    json_type = {int: "integer", float: "number", str: "string", bool: "boolean"}
    fields = {f.name: f for f in dataclasses.fields(AgentSettings)}
    missing = set(fields) - chart_managed - set(props)
    assert not missing, f"settings missing from values.schema.json (run python helm/sync_files.py): {sorted(missing)}"
    assert set(props) <= set(fields)
    for name, prop in props.items():
        declared = fields[name].metadata.get("schema")  # a setting whose values the Python type under-describes
        if declared:
            assert {k: v for k, v in prop.items() if k != "description"} == declared, name
        else:
            assert prop["type"] == json_type[type(fields[name].default)], name


# --- rule files -> PrometheusRule ------------------------------------------------------------

SAMPLE_RULES = """\
groups:
  - name: rag-sample
    rules:
      - record: rag:sample:ratio
        expr: sum(rate(rag_queries_total[5m]))
      - alert: RagSampleAlert
        expr: rag:sample:ratio > 1
        for: 10m
        labels:
          severity: page
        annotations:
          summary: "release {{ $labels.release }} at {{ $value | humanizePercentage }}"
"""


def _rule_sources(chart: Path) -> dict[str, dict]:
    sources = {}
    for path in sorted((chart / "files" / "alerts" / "rules").glob("*.y*ml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and "groups" in doc and "tests" not in doc:
            sources[path.name] = doc
    return sources


def _prometheus_rules_by_source(docs):
    return {r["metadata"]["annotations"]["rag-monitor.io/source"]: r for r in kinds(docs, "PrometheusRule")}


def test_prometheus_rules_equal_the_rule_files():
    docs = render(SQLITE_VALUES)
    rendered = _prometheus_rules_by_source(docs)
    sources = _rule_sources(CHART)
    assert set(rendered) == {f"alerts/rules/{name}" for name in sources}
    for name, doc in sources.items():
        assert rendered[f"alerts/rules/{name}"]["spec"]["groups"] == doc["groups"], name
    plain = one(docs, "ConfigMap", f"{FULLNAME}-alert-rules")["data"] or {}
    assert set(plain) == set(sources)


def test_prometheus_rules_keep_alert_templates_verbatim(tmp_path):
    """Alert annotations hold Prometheus templates ({{ $labels.x }}): Helm must not evaluate them.

    Runs on a copy of the chart with a sample rule file, next to a non-rule file (Alertmanager
    config, promtool test) that must be left out, so it holds whatever alerts/ holds today.
    """
    chart = tmp_path / "rag-monitor"
    shutil.copytree(CHART, chart)
    alerts = chart / "files" / "alerts" / "rules"
    alerts.mkdir(parents=True, exist_ok=True)
    (alerts / "sample.rules.yml").write_text(SAMPLE_RULES)
    (alerts / "sample-alertmanager.yml").write_text("route:\n  receiver: x\nreceivers:\n  - name: x\n")
    (alerts / "sample_test.yml").write_text("rule_files: [sample.rules.yml]\ntests: []\ngroups: []\n")
    docs = render(SQLITE_VALUES, chart=chart)
    rendered = _prometheus_rules_by_source(docs)
    assert "alerts/rules/sample.rules.yml" in rendered
    assert "alerts/rules/sample-alertmanager.yml" not in rendered and "alerts/rules/sample_test.yml" not in rendered
    groups = rendered["alerts/rules/sample.rules.yml"]["spec"]["groups"]
    assert groups == yaml.safe_load(SAMPLE_RULES)["groups"]
    assert groups[0]["rules"][1]["annotations"]["summary"] == "release {{ $labels.release }} at {{ $value | humanizePercentage }}"
    plain = one(docs, "ConfigMap", f"{FULLNAME}-alert-rules")["data"]
    assert plain["sample.rules.yml"] == SAMPLE_RULES


def test_prometheus_rule_resources_only_when_enabled():
    docs = render(SQLITE_VALUES, "prometheusRule.enabled=false", "serviceMonitor.enabled=false")
    assert not kinds(docs, "PrometheusRule") and not kinds(docs, "ServiceMonitor")


def test_grafana_dashboard_configmap_for_the_kube_prometheus_stack_sidecar():
    docs = render(SQLITE_VALUES)
    dashboard = one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    # kube-prometheus-stack's Grafana sidecar loads ConfigMaps labelled grafana_dashboard: "1".
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    source = (ROOT / "dashboards" / "rag-monitor.json").read_text()
    assert json.loads(dashboard["data"]["rag-monitor.json"]) == json.loads(source)
    folder = one(render(SQLITE_VALUES, "grafanaDashboard.folder=RAG", "grafanaDashboard.label=dash",
                        "grafanaDashboard.labelValue=yes"), "ConfigMap", f"{FULLNAME}-dashboard")["metadata"]
    assert folder["annotations"] == {"grafana_folder": "RAG"} and folder["labels"]["dash"] == "yes"
    assert not [d for d in render(SQLITE_VALUES, "grafanaDashboard.enabled=false") if d["metadata"]["name"].endswith("-dashboard")]


def test_packaged_chart_renders_the_same(tmp_path):
    """`helm package` keeps files/ (no symlinks to lose) and the rendered output is unchanged."""
    result = subprocess.run(
        [helm_binary(), "package", str(CHART), "--destination", str(tmp_path)], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (package,) = tmp_path.glob("rag-monitor-*.tgz")
    assert render(POSTGRESQL_VALUES, chart=package) == render(POSTGRESQL_VALUES)
