"""Group commit: concurrent requests to one replica are written in one store transaction, each
answered on its own and counted as if they came one by one; a store failure fails each request
of the group with no metric moved, and the exporters' retries lose nothing. SQLite and PostgreSQL.

The requests are made concurrent by a hook, not by timing: the first transaction waits inside
the store until the other requests are in line behind it.
"""

from __future__ import annotations

import threading

import pytest

from rag_monitor.store import StoreUnavailable
from tests.agent.test_counted_once import COUNTED, sdk_body
from tests.services import wait_until

pytestmark = pytest.mark.integration

REQUESTS = 6  # within the receiver's max_concurrent_requests (8)
QUERIES_PER_REQUEST = 2
COMPARED = (*COUNTED, "rag_agent_spans_received_total", "rag_query_cost_usd_sum", "rag_tokens_total")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str | None:
    return None if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    return [sdk_body(QUERIES_PER_REQUEST) for _ in range(REQUESTS)]


class Transactions:
    """Counts the requests' transactions (``store.ingest.persist`` with records); the first one holds until the
    other requests wait behind it; ``fail_next`` makes the next one fail midway (after its records
    were written), as a connection lost mid-transaction would."""

    def __init__(self, agent):
        self.pipeline = agent.agent.pipeline
        ingest = agent.store.ingest
        self.calls = 0
        self.fail_next = False
        persist, put_records = ingest.persist, ingest._recent.put_in

        def counted(batch, **kw):
            if not batch.records:  # the expiry job's (empty) passes are not requests
                return persist(batch, **kw)
            self.calls += 1
            if self.calls == 1:
                wait_until(lambda: len(self.pipeline._waiting) == REQUESTS - 1, timeout=60,
                           what="the other requests to wait for the group commit")
            return persist(batch, **kw)

        def failing_midway(conn, records, now=None):
            stored = put_records(conn, records, now)
            if self.fail_next and records:
                self.fail_next = False
                raise StoreUnavailable("connection lost mid-transaction")
            return stored

        ingest.persist = counted
        ingest._recent.put_in = failing_midway


def post_at_once(agent, bodies: list[bytes]) -> list[int]:
    statuses: dict[int, int] = {}
    threads = [threading.Thread(target=lambda i=i, b=b: statuses.__setitem__(i, agent.post(b)[0]))
               for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [statuses[i] for i in range(len(bodies))]


def serial_totals(start_agent, bodies: list[bytes]) -> dict[str, float]:
    serial = start_agent()
    assert [serial.post(b)[0] for b in bodies] == [200] * len(bodies)
    return {name: serial.metric_sum(name) for name in COMPARED}


def test_concurrent_requests_commit_together_and_count_as_one_by_one(start_agent, store_url, bodies):
    agent = start_agent(**({"store_url": store_url} if store_url else {}))
    transactions = Transactions(agent)
    assert post_at_once(agent, bodies) == [200] * REQUESTS
    # The first request's transaction, then one for the five that waited behind it.
    assert transactions.calls == 2
    totals = {name: agent.metric_sum(name) for name in COMPARED}
    assert totals["rag_queries_total"] == REQUESTS * QUERIES_PER_REQUEST
    assert totals == serial_totals(start_agent, bodies)
    assert agent.metric("rag_agent_traces_pending") == 0


def test_a_store_failure_fails_every_request_of_the_group_and_the_retries_lose_nothing(start_agent, store_url, bodies):
    agent = start_agent(**({"store_url": store_url} if store_url else {}))
    transactions = Transactions(agent)
    persist = agent.store.ingest.persist

    def fail_the_group(batch, **kw):  # the first transaction commits; the group's fails midway
        out = persist(batch, **kw)
        transactions.fail_next = transactions.fail_next or (bool(batch.records) and transactions.calls == 1)
        return out

    agent.store.ingest.persist = fail_the_group
    statuses = post_at_once(agent, bodies)
    assert sorted(statuses) == [200] + [503] * (REQUESTS - 1)
    assert transactions.calls == 2
    assert agent.metric("rag_agent_store_errors_total", {"op": "ingest"}) == REQUESTS - 1
    # No metric moved for the failed requests: the replica counted the one that succeeded.
    succeeded = bodies[statuses.index(200)]
    assert {name: agent.metric_sum(name) for name in COMPARED} == serial_totals(start_agent, [succeeded])
    # The exporters retry: every query is counted once (a record kept by the failed transaction
    # would make its retry a duplicate, not counted), as the serial path counts them.
    failed = [b for b, s in zip(bodies, statuses) if s == 503]
    assert [agent.post(b)[0] for b in failed] == [200] * len(failed)
    assert transactions.calls == 2 + len(failed)
    assert {name: agent.metric_sum(name) for name in COMPARED} == serial_totals(start_agent, bodies)
    assert agent.metric("rag_agent_traces_pending") == 0
