"""The oracle: simulated production traffic with exact ground truth, through real agents over
OTLP/HTTP, against every number they export.

One agent on SQLite, then two replicas on PostgreSQL splitting the traffic by trace id. Counters
and histogram counts must equal the truth, sums to rounding, cost per model to 1e-9 USD; every
query the single-draw design samples must be in the queue with its probability; the exported
weighted rates must be the Horvitz-Thompson sums of the scored sample; and no seeded PII string
may reach the store, the forwarded spans, the logs, ``/metrics`` or the golden export.
Unbiasedness over hundreds of seeds is ``benchmarks/oracle.py``'s job.
"""

from __future__ import annotations

import pytest
import yaml

from rag_monitor.simulate import simulate
from tests.oracle.harness import RECENT_TTL_S, SAMPLING, OtlpSink, run_oracle

pytestmark = pytest.mark.integration

QUERIES = 100


def _settings(tmp_path, sink: OtlpSink, **more) -> dict:
    sampling = tmp_path / "sampling.yaml"
    sampling.write_text(yaml.safe_dump(SAMPLING))
    return dict(sampling_config=str(sampling), recent_ttl_s=RECENT_TTL_S, root_timeout_s=2.0,
                score_interval_s=0.5, phoenix_url=sink.url, detector_profiles="", **more)


def _report(outcome) -> str:
    failed = [str(c) for c in outcome.checks if not c.ok]
    leaks = [f"PII in {sink}: {values[:3]} ({len(values)})" for sink, values in outcome.leaks.items()]
    return "\n".join(failed + leaks)


@pytest.fixture
def sink():
    s = OtlpSink()
    yield s
    s.close()


def test_oracle_one_agent_on_sqlite(start_agent_process, tmp_path, sink):
    traffic = simulate(seed=11, queries=QUERIES)
    agent = start_agent_process(**_settings(tmp_path, sink))
    store_url = f"sqlite:///{(tmp_path / 'replica0').resolve() / 'rag-monitor.db'}"
    outcome = run_oracle(traffic, [agent], store_url, sink, [agent.log.name])
    assert outcome.reviewed > 0 and len(outcome.checks) > 40
    assert not _report(outcome), _report(outcome)


def test_oracle_two_agents_on_postgresql(start_agent_process, postgres_url, tmp_path, sink):
    traffic = simulate(seed=12, queries=QUERIES)
    settings = _settings(tmp_path, sink, store_url=postgres_url)
    agents = [start_agent_process(**settings), start_agent_process(**settings)]
    outcome = run_oracle(traffic, agents, postgres_url, sink, [a.log.name for a in agents])
    assert outcome.reviewed > 0
    assert not _report(outcome), _report(outcome)
