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

import logging

import pytest
import yaml

from rag_monitor.simulate import simulate
from rag_monitor.review.auth import hash_token
from tests.oracle.harness import RECENT_TTL_S, REVIEWER_TOKEN, SAMPLING, OtlpSink, run_oracle

pytestmark = pytest.mark.integration

QUERIES = 100


def _settings(tmp_path, sink: OtlpSink, **more) -> dict:
    sampling = tmp_path / "sampling.yaml"
    sampling.write_text(yaml.safe_dump(SAMPLING))
    return dict(sampling_config=str(sampling), recent_ttl_s=RECENT_TTL_S, root_timeout_s=2.0,
                score_interval_s=0.5, regeneration_check_interval_s=0.1, phoenix_url=sink.url, detector_profiles="",
                review_tokens=f"oracle:reviewer:{hash_token(REVIEWER_TOKEN)}", **more)


def _report(outcome) -> str:
    failed = [str(c) for c in outcome.checks if not c.ok]
    leaks = [f"PII in {sink}: {values[:3]} ({len(values)})" for sink, values in outcome.leaks.items()]
    return "\n".join(failed + leaks)


def test_oracle_one_agent_on_sqlite(start_agent, tmp_path, sink):
    traffic = simulate(seed=11, queries=QUERIES)
    agent = start_agent(**_settings(tmp_path, sink))
    log = tmp_path / "agent.log"
    handler = logging.FileHandler(log)  # everything the agent logs, as its process would write it
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        outcome = run_oracle(traffic, [agent], agent.agent.settings.resolved_store_url(), sink, [str(log)])
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    assert outcome.reviewed > 0 and len(outcome.checks) > 40
    assert not _report(outcome), _report(outcome)


def test_oracle_two_agents_on_postgresql(start_agent_process, postgres_url, tmp_path, sink):
    traffic = simulate(seed=12, queries=QUERIES)
    # Replicas sharing a store share the pseudonym key (as the settings require): else a session id
    # carrying PII gets a different pseudonym on each replica, and a re-ask routed to the other
    # replica lands in another session window.
    settings = _settings(tmp_path, sink, store_url=postgres_url, pseudonym_key="oracle-pseudonym-key")
    agents = [start_agent_process(ready_timeout_s=180, **settings) for _ in range(2)]
    outcome = run_oracle(traffic, agents, postgres_url, sink, [a.log.name for a in agents])
    assert outcome.reviewed > 0
    assert not _report(outcome), _report(outcome)
