"""The login throttle over real HTTP on two replicas sharing one PostgreSQL: parallel guesses
never get more token checks than the limits, and guesses at an account never lock its owner out
of an address she uses."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rag_monitor.review.auth import LoginThrottle, Reviewers
from tests.review.test_review_api import Client
from tests.review.test_review_workflow import TOKENS

LIMITS = LoginThrottle(store=None)


@pytest.fixture
def replicas(start_agent, postgres_url):
    return [start_agent(review_tokens=TOKENS, store_url=postgres_url, trusted_proxies="127.0.0.1") for _ in range(2)]


@pytest.fixture
def token_checks(monkeypatch):
    """Counts calls to the token verification, on every replica (they share this process)."""
    calls: list[str] = []  # list.append is atomic under the GIL
    real = Reviewers.authenticate

    def counted(self, name, token):
        calls.append(name)
        return real(self, name, token)

    monkeypatch.setattr(Reviewers, "authenticate", counted)
    return lambda: len(calls)


def login(replica, name: str, token: str, client: str) -> int:
    return Client(replica.http_url).call("POST", "/review/login", form={"reviewer": name, "token": token},
                                         headers={"X-Forwarded-For": client})[0]


def in_parallel(requests: list[tuple]) -> list[int]:
    start = threading.Barrier(len(requests))

    def send(args):
        start.wait()
        return login(*args)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(send, requests))


def test_parallel_guesses_get_at_most_the_limit_of_token_checks(replicas, token_checks):
    statuses = in_parallel([(replicas[i % 2], "alice", f"guess-{i}", "203.0.113.1") for i in range(40)])
    assert token_checks() == LIMITS.per_client
    assert sorted(statuses) == [401] * LIMITS.per_client + [429] * (40 - LIMITS.per_client)

    before = token_checks()
    statuses = in_parallel([(replicas[i % 2], "bob", f"guess-{i}", f"198.51.100.{i + 1}") for i in range(40)])
    assert token_checks() - before == LIMITS.per_account
    assert sorted(statuses) == [401] * LIMITS.per_account + [429] * (40 - LIMITS.per_account)


def test_guesses_at_an_account_never_stop_its_owner_from_her_address(replicas, token_checks):
    a, b = replicas
    assert login(a, "alice", "alice-token", "192.0.2.10") == 200  # her usual address (200: the page after the redirect)
    statuses = [login((a, b)[i % 2], "alice", f"guess-{i}", f"203.0.113.{1 + i % 2}") for i in range(10)]
    assert statuses == [401] * 10  # ten wrong tokens from two other addresses: the account's limit
    assert login(b, "alice", "guess-11", "203.0.113.3") == 429  # strangers now wait ...
    assert login(a, "alice", "alice-token", "192.0.2.10") == 200  # ... she does not
    assert login(b, "alice", "alice-token", "192.0.2.10") == 200
    assert login(a, "bob", "bob-token", "192.0.2.99") == 200  # nor anyone else
    # An address of hers that guesses wrong is throttled like any other.
    assert [login(a, "alice", f"typo-{i}", "192.0.2.10") for i in range(6)] == [401] * 5 + [429]
