"""Prompt-cache reads and writes priced as each provider reports them, through the real clients.

The real ``openai`` and ``anthropic`` clients call a loopback server that answers like each API
(OpenAI: ``prompt_tokens`` include ``prompt_tokens_details.cached_tokens``; Anthropic:
``input_tokens`` exclude ``cache_read_input_tokens`` and ``cache_creation_input_tokens``), the
real OpenInference instrumentors trace the calls inside the app's chain span, and a real agent prices
them. The cost per query it exports, and the demo summary's line that reads it, equal the price
computed by hand from the provider's usage and the shipped price table's rows.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rag_monitor import semconv as sc
from rag_monitor.collectors import PriceTable
from rag_monitor.config_files import shipped_path
from rag_monitor.demo.summary import collect_summary, render_summary
from tests.services import wait_until

pytestmark = pytest.mark.integration

OPENAI_MODEL, ANTHROPIC_MODEL = "gpt-4o-2024-08-06", "claude-sonnet-4-20250514"
OPENAI_USAGE = {"prompt_tokens": 20_000, "completion_tokens": 500, "total_tokens": 20_500,
                "prompt_tokens_details": {"cached_tokens": 18_000}}
ANTHROPIC_WRITE = {"input_tokens": 200, "output_tokens": 400, "cache_creation_input_tokens": 16_000, "cache_read_input_tokens": 0}
ANTHROPIC_READ = {"input_tokens": 200, "output_tokens": 400, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 16_000}


class ProviderAPI(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions`` as OpenAI answers, ``POST /v1/messages`` as Anthropic does;
    the usage of the next Anthropic answer is ``server.anthropic_usage``."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/chat/completions":
            body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": OPENAI_MODEL,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "Cancel under Settings, then Billing."}}],
                    "usage": OPENAI_USAGE}
        elif self.path == "/v1/messages":
            body = {"id": "msg_1", "type": "message", "role": "assistant", "model": ANTHROPIC_MODEL,
                    "content": [{"type": "text", "text": "Cancel under Settings, then Billing."}],
                    "stop_reason": "end_turn", "stop_sequence": None, "usage": self.server.anthropic_usage}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def provider_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ProviderAPI)
    server.anthropic_usage = ANTHROPIC_WRITE
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def by_hand(model: str, uncached: int, read: int, written: int, completion: int) -> float:
    """USD from the price table's row: uncached prompt at input, reads at cached_input, writes at cached_write."""
    row = PriceTable.load(shipped_path("price_table")).lookup(model)
    write_rate = row.cached_write_per_million if row.cached_write_per_million is not None else row.input_per_million
    return (uncached * row.input_per_million + read * row.cached_input_per_million + written * write_rate
            + completion * row.output_per_million) / 1e6


def test_cache_reads_and_writes_priced_per_provider(start_agent, provider_api):
    import anthropic
    import openai
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    agent = start_agent()
    base = f"http://127.0.0.1:{provider_api.server_port}"
    openai_client = openai.OpenAI(base_url=f"{base}/v1", api_key="test-key", max_retries=0)
    anthropic_client = anthropic.Anthropic(base_url=base, api_key="test-key", max_retries=0)
    instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor()]

    def ask(release: str, call) -> None:
        """One query of an app instrumented with OpenInference (as the README sets it up): a chain
        span around the provider call, the release in ``service.version``."""
        provider = TracerProvider(resource=Resource.create({"service.name": "support-bot", "service.version": release}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{agent.otlp_url}/v1/traces")))
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=provider)
        try:
            with provider.get_tracer("app").start_as_current_span("rag_chain") as root:
                root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: sc.SPAN_KIND_CHAIN, sc.INPUT_VALUE: "How do I cancel?"})
                root.set_attribute(sc.OUTPUT_VALUE, call())
        finally:
            for instrumentor in instrumentors:
                instrumentor.uninstrument()
            provider.shutdown()

    messages = [{"role": "user", "content": "How do I cancel?"}]
    ask("openai", lambda: openai_client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message.content)
    ask("anthropic-write", lambda: anthropic_client.messages.create(model="claude-sonnet-4", max_tokens=400, messages=messages).content[0].text)
    provider_api.anthropic_usage = ANTHROPIC_READ
    ask("anthropic-read", lambda: anthropic_client.messages.create(model="claude-sonnet-4", max_tokens=400, messages=messages).content[0].text)

    expected = {
        # OpenAI: cached_tokens are part of prompt_tokens.
        "openai": (by_hand(OPENAI_MODEL, 2_000, 18_000, 0, 500), 20_000, 18_000, 0),
        # Anthropic: input_tokens are the uncached rest; cache writes cost above input, reads far below.
        "anthropic-write": (by_hand(ANTHROPIC_MODEL, 200, 0, 16_000, 400), 16_200, 0, 16_000),
        "anthropic-read": (by_hand(ANTHROPIC_MODEL, 200, 16_000, 0, 400), 16_200, 16_000, 0),
    }
    for release in expected:
        wait_until(lambda: agent.metric_sum("rag_query_cost_usd_count", release=release) == 1, timeout=20,
                   what=f"the priced query of {release}")
    assert expected["anthropic-write"][0] > by_hand(ANTHROPIC_MODEL, 16_200, 0, 0, 400) > expected["anthropic-read"][0]
    summary = render_summary(collect_summary(agent.agent, phases=[], alerts=[], urls={}))
    for release, (usd, prompt, read, written) in expected.items():
        assert agent.metric_sum("rag_query_cost_usd_sum", release=release) == pytest.approx(usd, rel=1e-9), release
        tokens = {kind: agent.metric_sum("rag_tokens_total", release=release, kind=kind)
                  for kind in ("prompt", "cached_prompt", "cache_write_prompt")}
        assert tokens == {"prompt": prompt, "cached_prompt": read, "cache_write_prompt": written}, release
        line = next(line for line in summary.splitlines() if line.strip().startswith(f"{release} "))
        assert f"{usd:.5f}" in line.split(), line  # the cost per query a user reads
