"""The LLM judge against a real OpenAI-compatible HTTP server on loopback, failures included."""

from __future__ import annotations

import pytest

from rag_monitor.faithfulness import FaithfulnessWorker, Pair
from rag_monitor.faithfulness.judge import CLAIMS_SCHEMA, JudgeConfig, JudgeScorer, parse_claims, MalformedOutput
from tests.faithfulness.openai_server import FakeJudgeServer

CONTEXT = "The Eiffel Tower was completed in 1889. It is 330 metres tall."


@pytest.fixture
def server():
    with FakeJudgeServer(slow_s=2.0) as s:
        yield s


def judge_for(server, calls=None, **overrides) -> JudgeScorer:
    config = dict(base_url=server.base_url, model="judge-test", timeout_s=1.0, concurrency=2, max_retries=3,
                  backoff_s=0.01, usd_per_million_input=2.0, usd_per_million_output=8.0)
    config.update(overrides)
    return JudgeScorer(JudgeConfig(**config), on_call=None if calls is None else calls.append)


def test_claims_come_back_per_sentence_with_verdicts_and_evidence(server):
    calls = []
    judge = judge_for(server, calls)
    result = judge.assess([CONTEXT], "It was completed in 1889. It cost 7 million francs.")
    assert result.error is None and result.value == 0.5
    assert [(c.text, c.verdict) for c in result.claims] == [
        ("It was completed in 1889.", "supported"), ("It cost 7 million francs.", "not_in_context")]
    assert result.claims[0].evidence and result.claims[1].evidence is None
    request = server.state.requests[0]
    assert request["temperature"] == 0 and request["model"] == "judge-test"
    assert request["response_format"]["json_schema"]["schema"] == CLAIMS_SCHEMA
    # Cost from the usage block: 120 input and 30 output tokens at 2 and 8 USD per million.
    assert [(c.outcome, c.input_tokens, c.output_tokens) for c in calls] == [("ok", 120, 30)]
    assert calls[0].cost_usd == pytest.approx((120 * 2 + 30 * 8) / 1e6) and calls[0].latency_s > 0
    judge.close()


def test_malformed_output_gets_one_retry_then_an_error_never_a_score(server):
    calls = []
    judge = judge_for(server, calls)
    recovered = judge.assess([CONTEXT], "[MALFORMED-ONCE] It is 330 metres tall.")
    assert recovered.error is None and recovered.value == 1.0
    assert server.state.seen["MALFORMED-ONCE"] == 2
    failed = judge.assess([CONTEXT], "[MALFORMED] It is 330 metres tall.")
    assert failed.value is None and "malformed" in failed.error
    assert server.state.seen["MALFORMED"] == 2  # one retry, not more
    truncated = judge.assess([CONTEXT], "[TRUNCATED] It is 330 metres tall.")
    assert truncated.value is None and "truncated" in truncated.error and server.state.seen["TRUNCATED"] == 2
    assert [c.outcome for c in calls].count("malformed") == 5
    judge.close()


def test_429_and_5xx_are_retried_with_backoff(server):
    calls = []
    judge = judge_for(server, calls)
    assert judge.assess([CONTEXT], "[RATE-LIMITED-2] It is 330 metres tall.").value == 1.0
    assert judge.assess([CONTEXT], "[SERVER-ERROR-1] It is 330 metres tall.").value == 1.0
    assert server.state.seen["RATE-LIMITED-2"] == 3 and server.state.seen["SERVER-ERROR-1"] == 2
    assert [(c.outcome, c.status) for c in calls if c.outcome == "retried"] == [("retried", 429)] * 2 + [("retried", 500)]
    judge.close()


def test_retries_are_bounded_and_end_in_an_error(server):
    judge = judge_for(server, max_retries=1)
    result = judge.assess([CONTEXT], "[RATE-LIMITED-2] It is 330 metres tall.")
    assert result.value is None and "429" in result.error and server.state.seen["RATE-LIMITED-2"] == 2
    rejected = judge.assess([CONTEXT], "[BAD-REQUEST] It is 330 metres tall.")
    assert "400" in rejected.error and server.state.seen["BAD-REQUEST"] == 1  # a 400 is not retried
    judge.close()


def test_a_hanging_endpoint_times_out_into_an_error(server):
    judge = judge_for(server, timeout_s=0.3, max_retries=1)
    result = judge.assess([CONTEXT], "[SLOW] It is 330 metres tall.")
    assert result.value is None and "timeout" in result.error and server.state.seen["SLOW"] == 2
    judge.close()


def test_concurrency_is_bounded_and_results_keep_their_order(server):
    judge = judge_for(server, concurrency=3)
    answers = [f"It is 330 metres tall. It has {n + 40} floors." if n % 2 else "It is 330 metres tall." for n in range(12)]
    scores = FaithfulnessWorker(judge, max_batch=12).score_pairs([Pair(str(i), [CONTEXT], a) for i, a in enumerate(answers)])
    assert [s.key for s in scores] == [str(i) for i in range(12)]
    assert [s.unsupported for s in scores] == [bool(i % 2) for i in range(12)]
    assert all(s.scorer == "llm-judge-v1" and s.threshold == 1.0 for s in scores)
    assert 2 <= server.state.peak_in_flight <= 3
    judge.close()


def test_errors_reach_the_worker_as_the_error_verdict(server):
    judge = judge_for(server)
    [score] = FaithfulnessWorker(judge).score_pairs([Pair("t", [CONTEXT], "[MALFORMED] It is tall.")])
    assert score.status == "error" and score.value is None and score.unsupported is None
    judge.close()


def test_the_judges_own_calls_are_never_traced(server):
    """An httpx-instrumented agent would otherwise ingest (and sample) its own judge calls."""
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    try:
        judge = judge_for(server)
        assert judge.assess([CONTEXT], "It is 330 metres tall.").value == 1.0
        assert exporter.get_finished_spans() == ()
        import httpx

        with httpx.Client() as other:  # the same instrumentation does trace any other client
            other.post(f"{server.base_url}/chat/completions", json={"messages": [{"content": "x"}]})
        assert len(exporter.get_finished_spans()) == 1
        judge.close()
    finally:
        HTTPXClientInstrumentor().uninstrument()


def test_parse_claims_rejects_what_is_not_the_schema():
    with pytest.raises(MalformedOutput):
        parse_claims('{"claims": [{"claim": "x", "verdict": "probably"}]}')
    with pytest.raises(MalformedOutput):
        parse_claims("[]")
    assert parse_claims('{"claims": []}') == ()


def test_invalid_config_is_refused():
    with pytest.raises(ValueError, match="base_url"):
        JudgeConfig(base_url="", model="m")
    with pytest.raises(ValueError, match="concurrency"):
        JudgeConfig(base_url="http://127.0.0.1:1/v1", model="m", concurrency=0)


def test_the_agent_runs_the_judge_beside_its_scorer_with_metrics(start_agent, tmp_path):
    """Configured by settings only: the judge scores sampled answers under its own name; its calls are metrics."""
    import rag_monitor
    from tests.agent.test_agent_ingest import run_query
    from tests.services import wait_until

    (tmp_path / "sampling.yaml").write_text("base_rate: 1.0\n")
    with FakeJudgeServer() as server:
        agent = start_agent(sampling_config=str(tmp_path / "sampling.yaml"), score_interval_s=0.5,
                            judge_url=server.base_url, judge_model="judge-test", judge_usd_per_million_input=2.0)
        monitor = rag_monitor.init(service_name="svc", endpoint=agent.otlp_url, release="r1")
        try:
            trace_id = run_query(monitor)
            monitor.force_flush()
        finally:
            monitor.shutdown()
        wait_until(lambda: "llm-judge-v1" in agent.store.scores.for_trace(trace_id), timeout=60, what="the judge's score")
    scores = agent.store.scores.for_trace(trace_id)
    assert set(scores) == {"lexical-v1", "llm-judge-v1"}
    judged = scores["llm-judge-v1"]
    assert judged.score == 1.0 and judged.label == "supported" and judged.threshold == 1.0 and "supported" in judged.claims
    assert agent.metric("rag_judge_requests_total", {"outcome": "ok"}) == 1
    assert agent.metric("rag_judge_tokens_total", {"kind": "input"}) == 120
    assert agent.metric("rag_judge_cost_usd_total") == pytest.approx(120 * 2.0 / 1e6)
    assert agent.metric("rag_scorer_info", {"scorer": "llm-judge-v1", "version": "1", "threshold": "1", "threshold_source": "shipped"}) == 1
    # The judge's call is not a query of its own: nothing but the app's query was ingested or queued.
    assert agent.metric_sum("rag_queries_total") == 1 and agent.store.queue.depth()["queued"] == 1
