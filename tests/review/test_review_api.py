"""The review API over real HTTP: authentication, roles, CSRF, blindness, false exclusions."""

from __future__ import annotations

import http.cookiejar
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from rag_monitor.record import Document, FilterApplied, QueryRecord
from rag_monitor.review.auth import hash_token

HIDDEN_VALUES = ("rel-2026.11.30", "gpt-secret-model", "shadow", "thumbs_down", "deadbeef" * 4)


def sample_record(trace_id: str = "deadbeef" * 4, tenant: str = "acme") -> QueryRecord:
    return QueryRecord(
        trace_id=trace_id, root_span_id="00" * 8, start_ns=1, end_ns=2,
        query="How do I cancel?", answer="Cancel under Settings > Billing.",
        release="rel-2026.11.30", variant="shadow", llm_model="gpt-secret-model", tenant=tenant,
        filters=[
            FilterApplied("entitlement", "tenant = 'acme'", 50, 40, ["doc-private"]),
            FilterApplied("relevance", "version = 'v2'", 40, 12, ["doc-current"]),
        ],
        retrieved=[Document("doc-archived", "Cancel by calling us (archived policy)."), Document("doc-other", "Refunds take 5 days.")],
        delivered=[Document("doc-archived", "Cancel by calling us (archived policy).")],
    )


class Client:
    def __init__(self, base: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.csrf = ""

    def call(self, method: str, path: str, body=None, headers=None, form=None):
        data = None
        hdrs = dict(headers or {})
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        return self.raw(method, path, data, hdrs)

    def raw(self, method: str, path: str, data: bytes | None, headers: dict) -> tuple[int, bytes]:
        """A request with these exact bytes, in this client's session; HTTP errors are answers."""
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def login(self, token: str) -> int:
        status, page = self.call("POST", "/review/login", form={"token": token})
        if status == 200:
            marker = b'name="csrf-token" content="'
            start = page.index(marker) + len(marker)
            self.csrf = page[start:page.index(b'"', start)].decode()
        return status

    def api(self, method: str, path: str, body=None, csrf: bool = True):
        return self.call(method, path, body=body, headers={"X-CSRF-Token": self.csrf} if csrf else {})


@pytest.fixture
def review_agent(start_agent):
    tokens = ",".join([
        f"alice:reviewer:{hash_token('alice-token')}",
        f"bob:reviewer:{hash_token('bob-token')}",
        f"carol:admin:{hash_token('carol-token')}",
        f"dave:reviewer:{hash_token('dave-token')}:globex",
    ])
    return start_agent(review_tokens=tokens)


def test_api_refuses_without_a_session_and_wrong_role(review_agent):
    anonymous = Client(review_agent.http_url)
    assert anonymous.api("POST", "/api/review/claim")[0] == 401
    assert anonymous.login("wrong-token") == 401
    alice = Client(review_agent.http_url)
    assert alice.login("alice-token") == 200
    assert alice.api("GET", "/api/review/stats")[0] == 403  # reviewers are not admins
    carol = Client(review_agent.http_url)
    carol.login("carol-token")
    assert carol.api("GET", "/api/review/stats")[0] == 200


def test_csrf_token_and_origin_are_required(review_agent):
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    assert alice.api("POST", "/api/review/claim", csrf=False)[0] == 403
    status, _ = alice.call("POST", "/api/review/claim", headers={"X-CSRF-Token": alice.csrf, "Origin": "http://evil.example"})
    assert status == 403
    assert alice.api("POST", "/api/review/claim")[0] == 204  # empty queue, but allowed


def test_login_attempts_are_rate_limited(review_agent):
    client = Client(review_agent.http_url)
    statuses = [client.login(f"guess-{i}") for i in range(7)]
    assert statuses[:5] == [401] * 5 and statuses[-1] == 429
    assert client.login("alice-token") == 429  # even the right token waits out the window


def test_blind_view_hides_pipeline_fields_and_labels_map_back(review_agent):
    store = review_agent.store
    store.enqueue(sample_record(), stratum="thumbs_down", inclusion_prob=1.0)
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    status, body = alice.api("POST", "/api/review/claim")
    assert status == 200
    for hidden in HIDDEN_VALUES:
        assert hidden not in body.decode(), hidden
    view = json.loads(body)
    assert view["question"] == "How do I cancel?" and view["answer"].startswith("Cancel")
    contents = {c["key"]: c["content"] for c in view["candidates"]}
    # delivered, retrieved-but-dropped and filtered-out candidates are all offered, under opaque keys
    assert len(contents) == 4 and all(k.startswith("d") for k in contents)

    # a second reviewer never gets the same item
    bob = Client(review_agent.http_url)
    bob.login("bob-token")
    assert bob.api("POST", "/api/review/claim")[0] == 204
    assert bob.api("POST", f"/api/review/items/{view['item']}/labels", {"faithful": "yes"})[0] == 403

    from rag_monitor.review.blind import candidates

    item = store.get_item(view["item"])
    current_key = next(c.key for c in candidates(item.id, item.query_record) if c.document_id == "doc-current")
    status, body = alice.api("POST", f"/api/review/items/{view['item']}/labels", {"faithful": "maybe"})
    assert status == 400 and b"faithful" in body
    labels = {"faithful": "yes", "correct": "no", "relevant": [current_key], "reasons": ["wrong"], "note": "archived policy"}
    assert alice.api("POST", f"/api/review/items/{view['item']}/labels", labels)[0] == 200
    assert store.queue_depth().get("reviewed") == 1
    (item, review), = store.reviewed()
    assert review.labels["relevant_documents"] == ["doc-current"]
    assert review.reviewer == "alice"


def test_false_exclusion_rate_from_reviews(review_agent):
    from rag_monitor.review.blind import candidates

    store = review_agent.store
    labels = {"release": "rel-2026.11.30"}
    assert review_agent.metric("rag_filter_false_exclusion_ratio", labels) is None  # absent, not 0
    # Reviewers mark, per query: the relevance-excluded doc (a false exclusion), the delivered
    # doc (eligible, not excluded), the entitlement-excluded doc (never counts), nothing.
    relevant_by_trace = {"aa" * 16: "doc-current", "bb" * 16: "doc-archived", "cc" * 16: "doc-private", "dd" * 16: None}
    for trace_id in relevant_by_trace:
        store.enqueue(sample_record(trace_id), stratum="base", inclusion_prob=0.5)
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    for _ in relevant_by_trace:
        view = json.loads(alice.api("POST", "/api/review/claim")[1])
        item = store.get_item(view["item"])
        wanted = relevant_by_trace[item.trace_id]
        keys = [c.key for c in candidates(item.id, item.query_record) if c.document_id == wanted]
        assert alice.api("POST", f"/api/review/items/{item.id}/labels", {"relevant": keys})[0] == 200
    assert review_agent.metric("rag_filter_false_exclusion_eligible", labels) == 2
    assert review_agent.metric("rag_filter_false_exclusions", labels) == 1
    assert review_agent.metric("rag_filter_false_exclusion_ratio", labels) == pytest.approx(0.5)


def test_tenant_scoped_reviewer_sees_only_their_tenants(review_agent):
    review_agent.store.enqueue(sample_record("aa" * 16, tenant="acme"), stratum="base", inclusion_prob=1.0)
    dave = Client(review_agent.http_url)
    dave.login("dave-token")
    assert dave.api("POST", "/api/review/claim")[0] == 204
    review_agent.store.enqueue(sample_record("bb" * 16, tenant="globex"), stratum="base", inclusion_prob=1.0)
    status, body = dave.api("POST", "/api/review/claim")
    assert status == 200


def test_tokens_never_reach_the_logs(review_agent, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    client = Client(review_agent.http_url)
    assert client.login("a-wrong-secret-token") == 401
    assert client.login("alice-token") == 200
    assert client.api("POST", "/api/review/claim")[0] == 204
    assert "failed review login" in caplog.text  # the failure is logged ...
    assert "a-wrong-secret-token" not in caplog.text and "alice-token" not in caplog.text  # ... never the token
    assert client.csrf not in caplog.text
