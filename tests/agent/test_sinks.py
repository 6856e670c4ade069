"""The ingest fan-out: each sink behind its own bounded queue, so a failing or slow sink costs its
own output (counted in rag_agent_sink_dropped_total{sink}) and nothing else: the request path
answers 200, the other sinks get every record, /readyz names the sink; and the lifecycle stops
the components in reverse start order."""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from rag_monitor import semconv
from rag_monitor.agent.component import Component, Lifecycle
from rag_monitor.store import StoreUnavailable
from tests.agent.test_forwarding import Sink as PhoenixSink
from tests.services import wait_until

SINKS = ("metrics", "regeneration", "freshness", "drift_feed", "forwarder")
N = 12


def query_request(i: int) -> bytes:
    """One finished query in one request: a lone ``rag.query`` root span with a session and an intent."""
    tid = (0xC0 << 120 | i + 1).to_bytes(16, "big")
    start = time.time_ns()
    span = trace_pb2.Span(trace_id=tid, span_id=tid[8:], name=semconv.RAG_QUERY_SPAN_NAME,
                          start_time_unix_nano=start, end_time_unix_nano=start + 5_000_000)
    attrs = {semconv.OPENINFERENCE_SPAN_KIND: "CHAIN", semconv.INPUT_VALUE: f"question number {i}",
             semconv.OUTPUT_VALUE: f"answer {i}", semconv.SESSION_ID: f"s{i}", semconv.RAG_INTENT: "billing"}
    for key, value in attrs.items():
        span.attributes.append(common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value)))
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    return request.SerializeToString()


def readyz(agent) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{agent.http_url}/readyz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def agent_with_every_sink(start_agent, tmp_path):
    """An agent with all five sinks enabled (a categorical drift profile, a Phoenix stand-in), each
    sink's consumer wrapped to count the items it is handed."""
    (tmp_path / "profiles.yaml").write_text("""
profiles:
  - {name: intent-chi, signal: intent, detector: chi_square, alpha: 0.01, reference_size: 50,
     current_size: 50, min_current: 50, interval_s: 3600, reference_days: null}
""")
    phoenix = PhoenixSink(fail_first=0)
    agent = start_agent(detector_profiles=str(tmp_path / "profiles.yaml"), phoenix_url=phoenix.url)
    sinks = {sink.sink: sink for sink in agent.agent.pipeline.sinks.sinks}
    assert set(sinks) == set(SINKS)
    consumed: collections.Counter[str] = collections.Counter()
    for name, sink in sinks.items():
        def counting(batch, _consume=sink.consume, _name=name, _size=sink.size):
            _consume(batch)
            consumed[_name] += _size(batch)
        sink.consume = counting
    yield agent, sinks, consumed, phoenix
    phoenix.close()


def send(agent, first: int, n: int) -> None:
    for i in range(first, first + n):
        status, _, body = agent.post(query_request(i))
        assert status == 200, body


def dropped(agent, sink: str) -> float:
    return agent.metric("rag_agent_sink_dropped_total", {"sink": sink})


@pytest.mark.parametrize("broken", SINKS)
def test_a_failing_sink_loses_only_its_own_output_counted_and_named_by_readyz(agent_with_every_sink, broken):
    agent, sinks, consumed, phoenix = agent_with_every_sink
    send(agent, 0, N)  # the baseline: every sink healthy
    agent.settle()
    assert all(dropped(agent, name) == 0 for name in SINKS)

    def fail(batch):
        raise RuntimeError(f"{broken} is broken")

    sinks[broken].consume = fail
    send(agent, N, N)
    agent.settle()
    per_item = 1  # one record per request; one span per request for the forwarder
    assert dropped(agent, broken) == N * per_item
    for name in SINKS:
        if name != broken:
            assert consumed[name] == 2 * N, name  # every record reached every other sink
            assert dropped(agent, name) == 0, name
    assert consumed[broken] == N  # the baseline's only
    if broken != "metrics":  # the number a user reads still counts every query
        assert agent.metric_sum("rag_queries_total") == 2 * N
    if broken != "forwarder":
        wait_until(lambda: agent.metric("rag_agent_forwarded_spans_total", {"outcome": "sent"}) == 2 * N,
                   timeout=30, what="every span forwarded")
    status, body = readyz(agent)
    assert status == 200  # degraded: the records are stored, the replica stays in service
    assert body["status"] == "degraded"
    assert body["components"][f"sink:{broken}"] == {"status": "degraded",
                                                    "reason": f"last batch failed: RuntimeError: {broken} is broken"}
    assert all(body["components"][f"sink:{name}"]["status"] == "ok" for name in SINKS if name != broken)
    assert agent.metric("rag_agent_sink_queue_depth", {"sink": broken}) == 0


@pytest.mark.parametrize("slow", SINKS)
def test_a_blocked_sink_never_holds_up_the_request_path_or_the_other_sinks(agent_with_every_sink, slow):
    agent, sinks, consumed, phoenix = agent_with_every_sink
    sink = sinks[slow]
    sink.max_items = 4
    release, entered = threading.Event(), threading.Event()
    original = sink.consume

    def blocked(batch):
        entered.set()
        release.wait(120)
        original(batch)

    sink.consume = blocked
    try:
        # The sink's worker sits on the first batch until the test says so: had any request waited
        # on it, these POSTs would never return (no clock involved).
        send(agent, 0, N)
        assert entered.is_set() or entered.wait(30)
        assert agent.agent.settle(0.2) is False  # the slow sink still holds its queue
        for name in SINKS:
            if name != slow:
                assert sinks[name].settle(30), name
                assert consumed[name] == N, name
        depth = agent.agent.registry.get_sample_value("rag_agent_sink_queue_depth", {"sink": slow})
        lost = agent.agent.registry.get_sample_value("rag_agent_sink_dropped_total", {"sink": slow})
        assert 0 < depth <= sink.max_items and lost == N - depth  # the rest dropped, counted
        status, body = readyz(agent)
        assert status == 200 and body["components"][f"sink:{slow}"]["status"] == "degraded"
        assert "queue full" in body["components"][f"sink:{slow}"]["reason"]
    finally:
        release.set()
    agent.settle()
    assert consumed[slow] + dropped(agent, slow) == N  # each item consumed or counted, once
    assert all(dropped(agent, name) == 0 for name in SINKS if name != slow)


def test_readyz_names_every_component_and_fails_when_the_store_is_gone(running_agent):
    status, body = readyz(running_agent)
    assert status == 200 and body["status"] == "ok"
    names = list(body["components"])
    assert names[0] == "store" and names[-2:] == ["receiver", "scheduler"]
    assert {"scorer", "sink:metrics", "sink:regeneration", "sink:freshness"} <= set(names)

    def unreachable():
        raise StoreUnavailable("connection refused")

    running_agent.agent.store.ping = unreachable
    status, body = readyz(running_agent)
    assert status == 503 and body["status"] == "failed"
    assert body["components"]["store"]["status"] == "failed" and "connection refused" in body["components"]["store"]["reason"]


def test_the_agent_stops_its_components_in_reverse_start_order(start_agent):
    running = start_agent()
    agent = running.agent
    lifecycle = agent.lifecycle
    started = [c.name for c in lifecycle.started]
    assert started == [c.name for c in lifecycle.components]  # every one, in declared order
    stopped: list[str] = []
    for component in lifecycle.components:
        def recording(_stop=component.stop, _name=component.name):
            stopped.append(_name)
            _stop()
        component.stop = recording
    agent.stop()
    assert stopped == started[::-1]
    assert not agent.ready()


class Recorder(Component):
    def __init__(self, name, log, fail_start=False, fail_stop=False):
        super().__init__(name)
        self.log, self.fail_start, self.fail_stop = log, fail_start, fail_stop

    def _start(self):
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    def _stop(self):
        self.log.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError(f"{self.name} cannot stop")


def test_a_failing_stop_never_keeps_the_others_from_stopping():
    log: list[str] = []
    lifecycle = Lifecycle([Recorder("a", log), Recorder("b", log, fail_stop=True), Recorder("c", log)])
    lifecycle.start()
    assert lifecycle.stop() == ["b"]
    assert log == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]
    assert lifecycle.report()[0] is False  # stopped components are failed


def test_a_failing_start_stops_what_it_started_and_goes_up():
    log: list[str] = []
    lifecycle = Lifecycle([Recorder("a", log), Recorder("b", log, fail_start=True), Recorder("c", log)])
    with pytest.raises(RuntimeError, match="b cannot start"):
        lifecycle.start()
    assert log == ["start a", "stop a"] and lifecycle.started == []
