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

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until the ingest sinks have consumed what the requests so far fanned out to them
        (the metrics they move are read next)."""
        assert self.agent.settle(timeout_s), "the agent's sinks did not drain in time"

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        self.settle()
        return self.agent.registry.get_sample_value(name, labels or {})

    def metric_sum(self, name: str, **match: str) -> float:
        """Sum of every sample of ``name`` whose labels include ``match``."""
        self.settle()
        total = 0.0
        for family in self.agent.registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                    total += sample.value
        return total

    def scrape(self) -> str:
        self.settle()
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
            # The bare lexical scorer keeps test agents light; tests of the default ask for "support".
            "offline_scorer": "lexical",
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


class AgentProcess:
    """``rag-monitor agent`` in a process of its own (as replicas run), configured by environment."""

    def __init__(self, data_dir, ready_timeout_s: float = 60.0, module: str = "rag_monitor.cli",
                 env: dict[str, str] | None = None, **settings):
        """``module``: what runs ``agent`` (``tests.newer_replica``: a version ahead); ``env``: more variables."""
        import os
        import subprocess
        import sys

        self.otlp_port, self.http_port = free_port(), free_port()
        self.otlp_url = f"http://127.0.0.1:{self.otlp_port}"
        self.http_url = f"http://127.0.0.1:{self.http_port}"
        env = dict(os.environ, RAG_MONITOR_DATA_DIR=str(data_dir), RAG_MONITOR_OTLP_PORT=str(self.otlp_port),
                   RAG_MONITOR_HTTP_PORT=str(self.http_port), RAG_MONITOR_HHEM_MODEL_PATH="", RAG_MONITOR_OFFLINE_SCORER="lexical",
                   **{f"RAG_MONITOR_{k.upper()}": str(v) for k, v in settings.items()}, **(env or {}))
        self.log = open(f"{data_dir}.log", "wb")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where ``-m tests.…`` imports from
        self.proc = subprocess.Popen([sys.executable, "-m", module, "agent"], env=env,
                                     cwd=root if module.startswith("tests.") else None,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        from tests.services import wait_until

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited: {open(self.log.name).read()[-3000:]}")
            with urllib.request.urlopen(f"{self.http_url}/readyz", timeout=1) as r:
                return r.status == 200

        wait_until(ready, timeout=ready_timeout_s, what="the agent process to be ready")
        self.instance_suffix = f":{self.proc.pid}:{self.otlp_port}"

    def metric_sum(self, name: str, **match: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
        )

    def stop(self) -> None:
        from tests.services import stop_process

        stop_process(self.proc, timeout=30)
        self.log.close()


@pytest.fixture
def start_agent_process(tmp_path):
    started: list[AgentProcess] = []

    def start(**settings) -> AgentProcess:
        process = AgentProcess(tmp_path / f"replica{len(started)}", **settings)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def langchain_rag_chain(content: str, doc_id: str, answer: str):
    """A minimal LangChain RAG chain (a one-document retriever, a prompt, a fake chat model)."""
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class OneDocumentRetriever(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            return [Document(page_content=content, metadata={"doc_id": doc_id})]

    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    return ({"context": OneDocumentRetriever(), "question": RunnablePassthrough()} | prompt
            | FakeListChatModel(responses=[answer]) | StrOutputParser())
