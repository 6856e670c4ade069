"""A seeded production-traffic simulator that knows, for every query, what the agent must export.

    traffic = simulate(seed=7, queries=300)
    for batch in traffic.phases[0]: post(batch.body)       # real OTLP/HTTP protobuf bodies
    expected = traffic.truth                                # counters, sums, cost per model, ...

``scenario`` draws the queries (releases with canaries, shadow variants, routers and generators
on different models, embeddings and cached tokens, filters, feedback, re-asks, hidden content,
lost roots, PII everywhere), ``wire`` renders each one in an instrumentation dialect (the
project's SDK, OpenInference LangChain / LlamaIndex shapes, ``gen_ai.*``) and splits the spans
into export requests, and ``truth`` computes the exact numbers from the scenario alone, never
from the agent's code. The oracle test and ``benchmarks/oracle.py`` compare the two.
"""

from rag_monitor.simulate.scenario import Scenario, SimQuery, generate
from rag_monitor.simulate.truth import Truth, expected
from rag_monitor.simulate.wire import Batch, Traffic, render

__all__ = ["Batch", "Scenario", "SimQuery", "Traffic", "Truth", "expected", "generate", "render", "simulate"]


def simulate(seed: int, queries: int = 300, **knobs) -> Traffic:
    """Draw a scenario and render it: the bodies to send, with their truth."""
    scenario = generate(seed, queries=queries, **knobs)
    return render(scenario)
