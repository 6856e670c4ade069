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


PRIVATE = "PRIVATE: the Globex contract terms"
"""Content of the document an entitlement filter removed: no reviewer may ever see it."""


def sample_record(trace_id: str = "deadbeef" * 4, tenant: str = "acme", **changes) -> QueryRecord:
    fields = dict(
        trace_id=trace_id, root_span_id="00" * 8, start_ns=1, end_ns=2,
        query="How do I cancel?", answer="Cancel under Settings > Billing.",
        release="rel-2026.11.30", variant="shadow", llm_model="gpt-secret-model", tenant=tenant,
        filters=[
            FilterApplied("entitlement", "tenant = 'acme'", 50, 40, ["doc-private"], [Document("doc-private", PRIVATE)]),
            FilterApplied("relevance", "version = 'v2'", 40, 12, ["doc-current", "doc-blank"],
                          [Document("doc-current", "Cancel online under Settings > Billing (current policy).")]),
        ],
        # retrieval ran before the entitlement filter: the private document is among the retrieved
        retrieved=[Document("doc-archived", "Cancel by calling us (archived policy)."), Document("doc-other", "Refunds take 5 days."),
                   Document("doc-private", PRIVATE)],
        delivered=[Document("doc-archived", "Cancel by calling us (archived policy).")],
    )
    fields.update(changes)
    return QueryRecord(**fields)


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

    def login(self, token: str, reviewer: str | None = None) -> int:
        """Log in as ``reviewer`` (default: the token's first word, as in ``alice-token``)."""
        name = reviewer if reviewer is not None else token.split("-")[0]
        status, page = self.call("POST", "/review/login", form={"reviewer": name, "token": token})
        if status == 200:
            marker = b'name="csrf-token" content="'
            start = page.index(marker) + len(marker)
            self.csrf = page[start:page.index(b'"', start)].decode()
        return status

    def review(self, relevance: dict, labels: dict) -> int:
        """Claim, give step one's and step two's labels; the status of the last call."""
        status, body = self.api("POST", "/api/review/claim")
        if status != 200:
            return status
        item = json.loads(body)["item"]
        status, _ = self.api("POST", f"/api/review/items/{item}/relevance", relevance)
        if status != 200:
            return status
        return self.api("POST", f"/api/review/items/{item}/labels", labels)[0]

    def review_step(self, item: int, labels: dict, relevance: dict | None = None) -> int:
        """Both steps on an item already claimed."""
        status, _ = self.api("POST", f"/api/review/items/{item}/relevance", relevance or {})
        if status != 200:
            return status
        return self.api("POST", f"/api/review/items/{item}/labels", labels)[0]

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
    assert anonymous.login("bob-token", reviewer="alice") == 401  # a valid token under another name
    alice = Client(review_agent.http_url)
    assert alice.login("alice-token") == 200
    assert alice.api("GET", "/api/review/stats")[0] == 403  # reviewers are not admins
    assert alice.api("POST", "/api/review/assign", {"to": "bob"})[0] == 403
    carol = Client(review_agent.http_url)
    carol.login("carol-token")
    assert carol.api("GET", "/api/review/stats")[0] == 200


def test_csrf_token_and_origin_are_required(review_agent):
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    assert alice.api("POST", "/api/review/claim", csrf=False)[0] == 403
    assert alice.call("POST", "/api/review/claim", headers={"X-CSRF-Token": alice.csrf[:-1] + "x"})[0] == 403
    status, _ = alice.call("POST", "/api/review/claim", headers={"X-CSRF-Token": alice.csrf, "Origin": "http://evil.example"})
    assert status == 403
    assert alice.call("POST", "/api/review/claim", headers={"X-CSRF-Token": alice.csrf, "Origin": review_agent.http_url})[0] == 204


def test_two_steps_keep_relevance_blind_and_never_show_excluded_or_unrecorded_documents(review_agent):
    store = review_agent.store
    store.queue.enqueue(sample_record(), stratum="thumbs_down", inclusion_prob=1.0)
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    status, body = alice.api("POST", "/api/review/claim")
    assert status == 200
    text = body.decode()
    for hidden in (*HIDDEN_VALUES, PRIVATE, "Settings > Billing.", "doc-"):
        assert hidden not in text, hidden
    view = json.loads(body)
    # step one: the question and candidates only; each candidate is the same two fields
    assert set(view) == {"item", "step", "question", "candidates", "left_out"} and view["step"] == "relevance"
    assert {tuple(sorted(c)) for c in view["candidates"]} == {("content", "key")}
    assert sorted(c["content"] for c in view["candidates"]) == sorted([
        "Cancel by calling us (archived policy).", "Cancel online under Settings > Billing (current policy).", "Refunds take 5 days."])
    assert view["left_out"] == 1  # doc-blank: its content was not recorded
    assert [c["key"] for c in view["candidates"]] == ["d1", "d2", "d3"]

    item = view["item"]
    assert alice.api("POST", f"/api/review/items/{item}/labels", {"faithful": "yes"})[0] == 409  # step one first
    assert alice.api("POST", f"/api/review/items/{item}/relevance", {"relevant": ["d9"]})[0] == 400
    by_content = {c["content"]: c["key"] for c in view["candidates"]}
    current = by_content["Cancel online under Settings > Billing (current policy)."]
    status, body = alice.api("POST", f"/api/review/items/{item}/relevance", {"relevant": [], "gold": [current]})
    assert status == 200
    step_two = json.loads(body)
    assert step_two["step"] == "answer" and step_two["answer"] == "Cancel under Settings > Billing."
    assert step_two["contexts"] == ["Cancel by calling us (archived policy)."]
    assert PRIVATE not in body.decode()
    assert alice.api("POST", f"/api/review/items/{item}/relevance", {"relevant": []})[0] == 409  # locked in
    assert json.loads(alice.api("POST", "/api/review/claim")[1])["step"] == "answer"  # a reload resumes step two

    bob = Client(review_agent.http_url)
    bob.login("bob-token")
    assert bob.api("POST", "/api/review/claim")[0] == 204  # never the same item
    assert bob.api("POST", f"/api/review/items/{item}/labels", {"faithful": "yes"})[0] == 403
    assert alice.api("POST", f"/api/review/items/{item}/labels", {"faithful": "maybe"})[0] == 400
    labels = {"faithful": "yes", "correct": "no", "reasons": ["wrong"], "note": "archived policy",
              "corrected_answer": "Cancel online under Settings > Billing."}
    assert alice.api("POST", f"/api/review/items/{item}/labels", labels)[0] == 200
    (stored, review), = store.queue.reviewed()
    assert review.labels["relevant_documents"] == review.labels["gold_documents"] == ["doc-current"]
    assert review.labels["corrected_answer"] == "Cancel online under Settings > Billing."
    assert review.reviewer == "alice" and stored.state == "reviewed"


def test_bidirectional_controls_are_made_visible(review_agent):
    review_agent.store.queue.enqueue(sample_record(query="Refund \u202egnp.exe\u202c?", answer="Yes \u2067x\u2069"), stratum="base", inclusion_prob=1.0)
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    status, body = alice.api("POST", "/api/review/claim")
    view = json.loads(body)
    assert view["question"] == "Refund <U+202E>gnp.exe<U+202C>?"
    status, body = alice.api("POST", f"/api/review/items/{view['item']}/relevance", {})
    assert json.loads(body)["answer"] == "Yes <U+2067>x<U+2069>"
    assert not any(ch in body.decode("unicode_escape") for ch in "\u202e\u2067")


def test_false_exclusion_rate_from_reviews(review_agent):
    from rag_monitor.review.blind import candidates

    store = review_agent.store
    labels = {"release": "rel-2026.11.30"}
    assert review_agent.metric("rag_filter_false_exclusion_ratio", labels) is None  # absent, not 0
    # Reviewers mark, per query: the relevance-excluded doc (a false exclusion), the delivered
    # doc (eligible, not excluded), nothing.
    relevant_by_trace = {"aa" * 16: "doc-current", "bb" * 16: "doc-archived", "dd" * 16: None}
    for trace_id in relevant_by_trace:
        store.queue.enqueue(sample_record(trace_id), stratum="base", inclusion_prob=0.5)
    alice = Client(review_agent.http_url)
    alice.login("alice-token")
    for _ in relevant_by_trace:
        view = json.loads(alice.api("POST", "/api/review/claim")[1])
        item = store.queue.get_item(view["item"])
        wanted = relevant_by_trace[item.trace_id]
        keys = [c.key for c in candidates(item.id, item.query_record)[0] if c.document_id == wanted]
        assert alice.api("POST", f"/api/review/items/{item.id}/relevance", {"relevant": keys})[0] == 200
        assert alice.api("POST", f"/api/review/items/{item.id}/labels", {})[0] == 200
    assert review_agent.metric("rag_filter_false_exclusion_eligible", labels) == 2
    assert review_agent.metric("rag_filter_false_exclusions", labels) == 1
    assert review_agent.metric("rag_filter_false_exclusion_ratio", labels) == pytest.approx(0.5)
    # Two equal weights: Wilson's interval for 1 of 2, 0.0945 to 0.9055.
    assert review_agent.metric("rag_filter_false_exclusion_ratio_lower", labels) == pytest.approx(0.0945, abs=1e-4)
    assert review_agent.metric("rag_filter_false_exclusion_ratio_upper", labels) == pytest.approx(0.9055, abs=1e-4)


def test_tenant_scoped_reviewer_sees_only_their_tenants_and_never_another_tenants_pair(review_agent):
    store = review_agent.store
    store.queue.enqueue(sample_record("aa" * 16, tenant="acme"), stratum="base", inclusion_prob=1.0)
    dave = Client(review_agent.http_url)
    dave.login("dave-token")
    assert dave.api("POST", "/api/review/claim")[0] == 204
    # a globex item whose shadow pair is an acme answer: the pair is never shown
    store.recent.put([sample_record("cc" * 16, tenant="acme", answer="ACME-ONLY shadow answer", variant="production")])
    store.queue.enqueue(sample_record("bb" * 16, tenant="globex"), stratum="shadow_pair", inclusion_prob=1.0, pair_trace_id="cc" * 16)
    status, body = dave.api("POST", "/api/review/claim")
    assert status == 200
    item = json.loads(body)["item"]
    status, body = dave.api("POST", f"/api/review/items/{item}/relevance", {})
    assert "ACME-ONLY" not in body.decode() and "answers" not in json.loads(body)
    # documents labelled with another tenant are not offered either
    store.queue.enqueue(sample_record("ee" * 16, tenant="globex", retrieved=[Document("doc-x", "ACME-DOC", metadata={"tenant": "acme"})]),
                  stratum="base", inclusion_prob=1.0)
    assert dave.api("POST", f"/api/review/items/{item}/labels", {})[0] == 200
    status, body = dave.api("POST", "/api/review/claim")
    assert status == 200 and "ACME-DOC" not in body.decode()


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
