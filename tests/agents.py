"""A real agent on loopback for each test: its own data directory, ports and registry."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator

import pytest

from rag_monitor.agent.service import Agent
from rag_monitor.settings import load_settings
from tests.services import free_port


class RunningAgent:
    def __init__(self, agent: Agent):
        self.agent = agent
        s = agent.settings
        self.otlp_url = f"http://127.0.0.1:{s.otlp_port}"
        self.http_url = f"http://127.0.0.1:{s.http_port}"

    @property
    def store(self):
        return self.agent.store

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.agent.registry.get_sample_value(name, labels or {})

    def metric_sum(self, name: str, **match: str) -> float:
        """Sum of every sample of ``name`` whose labels include ``match``."""
        total = 0.0
        for family in self.agent.registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                    total += sample.value
        return total

    def scrape(self) -> str:
        with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=5) as r:
            return r.read().decode()

    def post(self, body: bytes, content_type: str = "application/x-protobuf", headers: dict | None = None):
        """POST to /v1/traces; returns (status, headers, body) without raising on HTTP errors."""
        request = urllib.request.Request(
            f"{self.otlp_url}/v1/traces", data=body, method="POST",
            headers={"Content-Type": content_type, **(headers or {})},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()


@pytest.fixture
def start_agent(tmp_path) -> Iterator[Callable[..., RunningAgent]]:
    started: list[Agent] = []

    def start(**overrides) -> RunningAgent:
        settings = load_settings(overrides={
            "data_dir": str(tmp_path / f"agent{len(started)}"),
            "otlp_port": free_port(),
            "http_port": free_port(),
            "root_timeout_s": 5.0,
            "detector_profiles": "",  # no drift jobs (and no embedding model) unless a test asks
            "hhem_model_path": "",
            **overrides,
        })
        agent = Agent(settings)
        agent.start()
        started.append(agent)
        return RunningAgent(agent)

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def running_agent(start_agent) -> RunningAgent:
    return start_agent()
