"""rag_monitor/defaults/collectors/otelcol-gateway.yaml (the shipped gateway config): structure and wiring, and how the chart deploys it.

No OpenTelemetry Collector binary is available here, so the checks are structural: the
component references a collector would resolve at start-up, plus what the design needs
(trace-id routing to the agents' headless Service, a Phoenix fan-out)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import CHART, FULLNAME, POSTGRESQL_VALUES, agent_deployment, container, env_var, one, render

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "rag_monitor" / "defaults" / "collectors" / "otelcol-gateway.yaml"
BRIDGE = CHART / "files" / "bridge" / "otelcol-bridge.yaml"
ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def pipeline_problems(config: dict) -> list[str]:
    """Every component a pipeline or the service names must be defined, and every defined
    receiver/exporter used (the collector refuses unknown ids and warns on unused ones)."""
    problems = []
    service = config.get("service") or {}
    pipelines = service.get("pipelines") or {}
    if not pipelines:
        problems.append("no pipelines")
    used = {"receivers": set(), "processors": set(), "exporters": set()}
    for name, pipeline in pipelines.items():
        signal = name.split("/")[0]
        if signal not in {"traces", "metrics", "logs"}:
            problems.append(f"pipeline {name}: unknown signal {signal!r}")
        for section in ("receivers", "exporters"):
            if not pipeline.get(section):
                problems.append(f"pipeline {name}: no {section}")
        for section in used:
            for component in pipeline.get(section) or []:
                used[section].add(component)
                if component not in (config.get(section) or {}):
                    problems.append(f"pipeline {name}: {section[:-1]} {component!r} is not defined")
    for extension in service.get("extensions") or []:
        if extension not in (config.get("extensions") or {}):
            problems.append(f"extension {extension!r} is not defined")
    for section in ("receivers", "exporters"):
        for component in set(config.get(section) or {}) - used[section]:
            problems.append(f"{section[:-1]} {component!r} is defined but no pipeline uses it")
    return problems


@pytest.fixture(scope="module")
def gateway() -> dict:
    return yaml.safe_load(GATEWAY.read_text())


def test_gateway_pipelines_are_wired(gateway):
    assert pipeline_problems(gateway) == []


def test_pipeline_check_catches_broken_wiring(gateway):
    broken = yaml.safe_load(GATEWAY.read_text())
    broken["service"]["pipelines"]["traces/agents"]["exporters"].append("otlp/missing")
    del broken["processors"]["memory_limiter"]
    problems = pipeline_problems(broken)
    assert "pipeline traces/agents: exporter 'otlp/missing' is not defined" in problems
    assert any("processor 'memory_limiter' is not defined" in p for p in problems)


def test_gateway_routes_by_trace_id_to_the_agents(gateway):
    (lb_name,) = [name for name in gateway["exporters"] if name.split("/")[0] == "loadbalancing"]
    lb = gateway["exporters"][lb_name]
    assert lb["routing_key"] == "traceID"
    assert "otlp" in lb["protocol"]
    resolver = lb["resolver"]
    assert set(resolver) & {"dns", "k8s"}
    assert "endpoint" not in lb["protocol"]["otlp"], "the loadbalancing exporter sets endpoints itself"
    # Every trace pipeline that receives app traffic must reach the agents.
    agents = [p for p in gateway["service"]["pipelines"].values() if lb_name in p["exporters"]]
    assert agents and all("otlp" in p["receivers"] for p in agents)


def test_gateway_fans_out_to_phoenix_over_otlp_http(gateway):
    phoenix = [name for name in gateway["exporters"] if name.split("/")[0] == "otlphttp"]
    assert phoenix
    pipelines = [p for p in gateway["service"]["pipelines"].values() if set(phoenix) & set(p["exporters"])]
    assert pipelines
    # The spans reaching Phoenix this way have not been through the agent's redactor.
    for pipeline in pipelines:
        assert any(proc.split("/")[0] == "redaction" for proc in pipeline["processors"])


def test_gateway_receives_otlp_grpc_and_http(gateway):
    protocols = gateway["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")


def test_bridge_sidecar_config_is_wired():
    bridge = yaml.safe_load(BRIDGE.read_text())
    assert pipeline_problems(bridge) == []
    assert "grpc" in bridge["receivers"]["otlp"]["protocols"]
    assert bridge["exporters"]["otlphttp/agent"]["endpoint"].startswith("http://127.0.0.1:")


def test_environment_references_are_documented_and_set_by_the_chart():
    text = GATEWAY.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    referenced = set(ENV_REFERENCE.findall(text))
    assert referenced, "the gateway takes its endpoints from the environment"
    for name in referenced:
        assert name in header, f"{name} is used but not documented in the file's header"
    docs = render(POSTGRESQL_VALUES)
    gateway_container = container(one(docs, "Deployment", f"{FULLNAME}-gateway"), "otelcol")
    assert referenced <= {e["name"] for e in gateway_container["env"]}
    bridge_refs = set(ENV_REFERENCE.findall(BRIDGE.read_text()))
    bridge_container = container(agent_deployment(docs), "otlp-bridge")
    assert bridge_refs - {"RAG_MONITOR_OTLP_TOKEN"} <= {e["name"] for e in bridge_container["env"]}


def test_chart_gateway_reaches_every_agent_pod_through_the_bridge():
    docs = render(POSTGRESQL_VALUES)
    headless = one(docs, "Service", f"{FULLNAME}-headless")
    grpc = [p for p in headless["spec"]["ports"] if p["name"] == "otlp-grpc"]
    bridge = container(agent_deployment(docs), "otlp-bridge")
    assert grpc and grpc[0]["targetPort"] in {p["name"] for p in bridge["ports"]}
    gw = container(one(docs, "Deployment", f"{FULLNAME}-gateway"), "otelcol")
    assert env_var(gw, "AGENT_HEADLESS_SERVICE")["value"] == f"{FULLNAME}-headless.monitoring.svc.cluster.local"
    assert env_var(gw, "AGENT_GRPC_PORT")["value"] == str(grpc[0]["port"])
    rendered = yaml.safe_load(one(docs, "ConfigMap", f"{FULLNAME}-gateway")["data"]["gateway.yaml"])
    assert pipeline_problems(rendered) == [] or all("defined but no pipeline uses it" in p for p in pipeline_problems(rendered))


@pytest.mark.parametrize("fanout", [False, True])
def test_chart_phoenix_fanout_switch(fanout):
    docs = render(POSTGRESQL_VALUES, f"gateway.phoenixFanout={str(fanout).lower()}")
    rendered = yaml.safe_load(one(docs, "ConfigMap", f"{FULLNAME}-gateway")["data"]["gateway.yaml"])
    assert ("traces/phoenix" in rendered["service"]["pipelines"]) is fanout
    assert "traces/agents" in rendered["service"]["pipelines"]
