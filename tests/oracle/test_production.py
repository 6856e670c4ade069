"""The oracle at production rates (short): the shipped 1% base sampling (weights to 100), a month
of traffic arriving in bursts, exporter retries across two replicas on PostgreSQL with one
replica killed mid-run, and the pruning job dropping hot partitions and history during the run.

Every check of ``tests/oracle/test_oracle.py`` holds here too; what this adds is said at each
test. Many seeds: ``benchmarks/oracle.py --scenario production``.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from rag_monitor.simulate import simulate
from rag_monitor.simulate.oracle import Check, compare
from tests.oracle.harness import RECENT_TTL_S, Samples, run_oracle, scrape
from tests.oracle.production import KNOBS, deliver, plan, production_sampling
from tests.oracle.test_oracle import _report, _settings
from tests.services import wait_until

pytestmark = pytest.mark.integration

QUERIES = 200
"""With 1% base sampling, the complaints and other strata are most of the sample: enough items."""


def _production_settings(tmp_path, sink, **more) -> dict:
    import yaml

    settings = _settings(tmp_path, sink, **more)
    (tmp_path / "sampling.yaml").write_text(yaml.safe_dump(production_sampling()))
    return settings


@pytest.mark.timeout(600)
def test_production_rates_in_bursts_one_agent_on_sqlite(start_agent, tmp_path, sink):
    """1% base sampling and a month of bursts (20 to 40 queries within a second, then hours of
    quiet), each burst's requests back to back."""
    traffic = simulate(seed=21, queries=QUERIES, **KNOBS)
    agent = start_agent(**_production_settings(tmp_path, sink))
    sampling = production_sampling()
    outcome = run_oracle(traffic, [agent], agent.agent.settings.resolved_store_url(), sink, [],
                         sampling=sampling, deliver=deliver(plan(traffic, 21, replicas=1), RECENT_TTL_S, ""))
    assert outcome.reviewed > 0 and len(outcome.checks) > 40
    assert any(w == 1 / sampling["base_rate"] for w in _weights(agent.agent.settings.resolved_store_url()))
    assert not _report(outcome), _report(outcome)


def _weights(store_url: str) -> list[float]:
    engine = sa.create_engine(store_url)
    with engine.connect() as c:
        weights = [row[0] for row in c.execute(sa.text("SELECT weight FROM review_items"))]
    engine.dispose()
    return weights


@pytest.mark.timeout(900)  # two agent processes, a kill, and a partition's ttl to wait out on a loaded machine
def test_production_two_replicas_retries_a_kill_and_a_month_of_pruning(start_agent_process, postgres_url, tmp_path, sink):
    """Two replicas on PostgreSQL: 15% of the bodies retried on the other replica, one replica
    killed mid-run (its last body retried on the survivor); a month of traffic with the pruning
    job every second: a hot partition is dropped during the run, then history past a (compressed)
    retention is deleted, and the numbers a user reads still match the truth."""
    from rag_monitor.store import open_store
    from rag_monitor.store.partitions import partitions_of

    traffic = simulate(seed=22, queries=QUERIES, **KNOBS)
    settings = _production_settings(tmp_path, sink, store_url=postgres_url, pseudonym_key="oracle-pseudonym-key",
                                    prune_interval_s=1.0)
    agents = [start_agent_process(ready_timeout_s=180, **settings) for _ in range(2)]
    engine = sa.create_engine(postgres_url)
    with engine.connect() as c:
        at_start = {name for name in partitions_of(c) if not name.endswith("_default")}
    delivery_plan = plan(traffic, 22)
    assert delivery_plan.killed == 1 and delivery_plan.duplicated
    outcome = run_oracle(traffic, agents, postgres_url, sink, [a.log.name for a in agents],
                         sampling=production_sampling(), deliver=deliver(delivery_plan, RECENT_TTL_S, postgres_url))
    assert outcome.reviewed > 0
    assert not _report(outcome), _report(outcome)

    # The hot tables: the slot partitions the first records went to are dropped whole by the job.
    survivor = agents[0]

    def dropped() -> set[str]:
        with engine.connect() as c:
            return at_start - partitions_of(c)

    wait_until(lambda: dropped(), timeout=180, what="a hot partition dropped by the pruning job")
    with engine.connect() as c:
        held = c.execute(sa.text("SELECT count(*) FROM recent_records")).scalar()
    assert held < len(traffic.truth.records), (held, len(traffic.truth.records))

    # History a month later: a pruning tick past a compressed retention (60 s for 90 days).
    before = scrape(survivor)
    store = open_store(postgres_url, history_retention_s=60.0)
    try:
        depth_before = store.queue.depth()
        deleted = store.retention.prune(now=time.time() + 61.0)
        depth = store.queue.depth()
    finally:
        store.close()
    assert deleted["scores"] > 0 and deleted["feedback"] > 0, deleted
    after = scrape(survivor)
    checks = [c for c in compare(traffic.truth, [after, *outcome.frozen], single_agent=False)
              if c.name not in ("spans received", "partial traces")]  # the delivery's, checked above
    for name in ("rag_faithfulness_weighted_total", "rag_filter_false_exclusion_ratio"):
        checks.append(Check(f"{name} unchanged by pruning", Samples([before]).sum(name), Samples([after]).sum(name),
                            Samples([before]).sum(name) == Samples([after]).sum(name)))
    for state, n in depth.items():
        got = Samples([after]).sum("rag_agent_review_queue_depth", state=state)
        checks.append(Check(f"review queue depth {state} after pruning", n, got, n == got))
    checks.append(Check("reviewed items kept (the golden set)", depth_before, depth, depth == depth_before and depth.get("reviewed")))
    failed = [str(c) for c in checks if not c.ok]
    assert not failed, "\n".join(failed)
    engine.dispose()
