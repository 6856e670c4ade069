"""The review workflow over real HTTP: shared sessions, throttling, proxies, double review,
skips, assignment, and the human-judged rates and agreement in /metrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from rag_monitor.review.auth import hash_token
from tests.review.test_review_api import Client, sample_record

TOKENS = ",".join([
    f"alice:reviewer:{hash_token('alice-token')}::nurses",
    f"bob:reviewer:{hash_token('bob-token')}",
    f"carol:admin:{hash_token('carol-token')}",
])


@pytest.fixture
def shared_agents(start_agent, tmp_path):
    """Two agents on one store, as two replicas behind a load balancer."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    return [start_agent(review_tokens=TOKENS, store_url=url, review_double_share=1.0) for _ in range(2)]


def test_a_session_opened_on_one_replica_works_on_the_other(shared_agents):
    a, b = shared_agents
    alice = Client(a.http_url)
    assert alice.login("alice-token") == 200
    alice.base = b.http_url  # the load balancer sends the next request to the other replica
    assert alice.api("POST", "/api/review/claim")[0] == 204
    assert alice.api("POST", "/review/logout")[0] == 200
    alice.base = a.http_url
    assert alice.api("POST", "/api/review/claim")[0] == 401  # logged out on both


def test_every_item_reviewed_twice_yields_kappa_in_metrics_and_on_the_page(shared_agents):
    a, b = shared_agents
    store = a.store
    # faithful labels: (alice, bob) per item -> observed agreement 3/4, chance 1/2, kappa 0.5
    plan = {"a1": ("yes", "yes"), "a2": ("no", "no"), "a3": ("yes", "no"), "a4": ("no", "no")}
    for n, trace in enumerate(plan):
        store.queue.enqueue(sample_record(f"{n + 1:032x}"), stratum="base", inclusion_prob=1.0)
    alice, bob = Client(a.http_url), Client(b.http_url)
    alice.login("alice-token")
    bob.login("bob-token")
    order = list(plan)
    for who, position in ((alice, 0), (bob, 1)):
        for _ in plan:
            status, body = who.api("POST", "/api/review/claim")
            view = json.loads(body)
            trace = store.queue.get_item(view["item"]).trace_id
            label = plan[order[int(trace, 16) - 1]][position]
            assert who.review_step(view["item"], {"faithful": label}) == 200
        assert who.api("POST", "/api/review/claim")[0] == 204  # never the same item twice
    assert store.queue.depth()["reviewed"] == 4
    assert a.metric("rag_review_agreement_kappa", {"label": "faithful"}) == pytest.approx(0.5)
    assert b.scrape().count('rag_review_agreement_pairs{label="faithful"} 4.0') == 1
    assert a.metric("rag_review_agreement_kappa", {"label": "correct"}) is None  # nobody gave it: absent
    assert a.metric("rag_review_reviewer_reviews", {"reviewer": "alice"}) == 4
    assert a.metric("rag_review_reviewer_recent_reviews", {"reviewer": "bob"}) == 4
    progress = json.loads(alice.api("GET", "/api/review/progress")[1])
    faithful = next(x for x in progress["agreement"] if x["label"] == "faithful")
    assert faithful["kappa"] == pytest.approx(0.5) and faithful["pairs"] == 4
    assert progress["you"]["reviews"] == 4 and progress["available"] == 0


def test_skip_with_a_reason_passes_the_item_on(shared_agents):
    a, _ = shared_agents
    a.store.queue.enqueue(sample_record(), stratum="base", inclusion_prob=1.0)
    alice, bob = Client(a.http_url), Client(a.http_url)
    alice.login("alice-token")
    bob.login("bob-token")
    item = json.loads(alice.api("POST", "/api/review/claim")[1])["item"]
    assert alice.api("POST", f"/api/review/items/{item}/skip", {"reason": " "})[0] == 400
    assert alice.api("POST", f"/api/review/items/{item}/skip", {"reason": "cannot judge billing"})[0] == 200
    assert alice.api("POST", "/api/review/claim")[0] == 204  # not offered to alice again
    assert json.loads(bob.api("POST", "/api/review/claim")[1])["item"] == item
    assert a.metric("rag_review_reviewer_skips", {"reviewer": "alice"}) == 1


def test_items_assigned_to_a_reviewer_or_group_go_only_to_them(shared_agents):
    a, _ = shared_agents
    store = a.store
    store.queue.enqueue(sample_record("01" * 16), stratum="base", inclusion_prob=1.0)
    store.queue.enqueue(sample_record("02" * 16), stratum="base", inclusion_prob=1.0)
    carol, alice, bob = Client(a.http_url), Client(a.http_url), Client(a.http_url)
    for client, token in ((carol, "carol-token"), (alice, "alice-token"), (bob, "bob-token")):
        client.login(token)
    assert carol.api("POST", "/api/review/assign", {"to": "bob", "count": 1})[1] == b'{"assigned":1}'
    assert carol.api("POST", "/api/review/assign", {"to": "group:nurses", "count": 0})[0] == 400
    first, second = sorted(i.id for i in (store.queue.item_for_trace("01" * 16), store.queue.item_for_trace("02" * 16)))
    store.review.assign("group:nurses", item_ids=[second])
    assert json.loads(bob.api("POST", "/api/review/claim")[1])["item"] == first
    assert json.loads(alice.api("POST", "/api/review/claim")[1])["item"] == second  # alice is in nurses
    assert a.metric("rag_review_reviewer_assigned_open", {"reviewer": "bob"}) == 1


def test_failed_logins_are_throttled_per_client_and_per_account(start_agent):
    agent = start_agent(review_tokens=TOKENS, trusted_proxies="127.0.0.1")

    def login(token: str, name: str, client: str) -> int:
        c = Client(agent.http_url)
        status, _ = c.call("POST", "/review/login", form={"reviewer": name, "token": token},
                           headers={"X-Forwarded-For": client})
        return status

    assert [login(f"guess-{i}", "alice", "203.0.113.1") for i in range(6)] == [401] * 5 + [429]
    assert login("bob-token", "bob", "203.0.113.1") == 429  # this client waits ...
    assert login("bob-token", "bob", "203.0.113.2") == 200  # ... others behind the same proxy do not
    # many clients guessing one account: the account waits, nobody else
    statuses = [login(f"guess-{i}", "alice", f"198.51.100.{i}") for i in range(6)]
    assert statuses[-1] == 429
    assert login("alice-token", "alice", "203.0.113.3") == 429
    assert login("bob-token", "bob", "203.0.113.3") == 200


def test_forwarded_headers_count_only_from_trusted_proxies(start_agent):
    untrusted = start_agent(review_tokens=TOKENS)  # no trusted_proxies: X-Forwarded-For is ignored
    statuses = []
    for i in range(7):
        c = Client(untrusted.http_url)
        statuses.append(c.call("POST", "/review/login", form={"reviewer": f"x{i}", "token": "guess"},
                               headers={"X-Forwarded-For": f"192.0.2.{i}"})[0])
    assert statuses[:5] == [401] * 5 and statuses[5:] == [429, 429]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _login_headers(agent, headers: dict) -> tuple[int, dict]:
    data = b"reviewer=alice&token=alice-token"
    request = urllib.request.Request(f"{agent.http_url}/review/login", data=data, method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded", **headers})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def test_behind_a_tls_proxy_the_cookie_is_secure_and_the_origin_is_https(start_agent):
    agent = start_agent(review_tokens=TOKENS, trusted_proxies="127.0.0.0/8")
    forwarded = {"X-Forwarded-Proto": "https", "Host": "review.example", "Origin": "https://review.example"}
    status, headers = _login_headers(agent, forwarded)
    assert status == 303
    cookie = headers["set-cookie"]
    assert cookie.startswith("__Host-rag_monitor_review=") and "Secure" in cookie and "HttpOnly" in cookie
    assert _login_headers(agent, {**forwarded, "Origin": "http://review.example"})[0] == 403
    plain = start_agent(review_tokens=TOKENS)  # the same headers from an untrusted peer change nothing
    assert _login_headers(plain, forwarded)[0] == 403
    status, headers = _login_headers(plain, {"X-Forwarded-Proto": "https"})
    assert status == 303 and "Secure" not in headers["set-cookie"]
    configured = start_agent(review_tokens=TOKENS, review_external_url="https://review.example")
    status, headers = _login_headers(configured, {"Origin": "https://review.example"})
    assert status == 303 and "Secure" in headers["set-cookie"]


def test_judged_rates_are_weighted_per_release_and_variant(start_agent):
    agent = start_agent(review_tokens=TOKENS)
    store = agent.store
    # (inclusion probability, correct label, gold delivered?) for release r1 / production
    plan = [(0.5, "yes", True), (0.25, "no", False), (1.0, "yes", True), (0.5, "unsure", None)]
    for n, (p, _, _) in enumerate(plan):
        store.queue.enqueue(sample_record(f"{n + 1:032x}", release="r1", variant="production"), stratum="base", inclusion_prob=p)
    alice = Client(agent.http_url)
    alice.login("alice-token")
    from rag_monitor.review.blind import candidates

    for _ in plan:
        view = json.loads(alice.api("POST", "/api/review/claim")[1])
        item = store.queue.get_item(view["item"])
        _, correct, covered = plan[int(item.trace_id, 16) - 1]
        wanted = {True: "doc-archived", False: "doc-current", None: None}[covered]
        gold = [c.key for c in candidates(item.id, item.query_record)[0] if c.document_id == wanted]
        assert alice.api("POST", f"/api/review/items/{item.id}/relevance", {"gold": gold})[0] == 200
        assert alice.api("POST", f"/api/review/items/{item.id}/labels", {"correct": correct})[0] == 200
    labels = {"measure": "correct", "release": "r1", "variant": "production"}
    # weights 2, 4, 1 (unsure left out): (2 + 1) / 7
    assert agent.metric("rag_review_judged_ratio", labels) == pytest.approx(3 / 7)
    assert agent.metric("rag_review_judged_items", labels) == 3
    assert agent.metric("rag_review_judged_positives", labels) == 2
    low, high = agent.metric("rag_review_judged_ratio_lower", labels), agent.metric("rag_review_judged_ratio_upper", labels)
    assert 0 <= low < 3 / 7 < high <= 1
    coverage = {**labels, "measure": "evidence_coverage"}
    assert agent.metric("rag_review_judged_ratio", coverage) == pytest.approx(3 / 7)
    assert agent.metric("rag_review_judged_ratio", {**labels, "measure": "supported"}) is None
