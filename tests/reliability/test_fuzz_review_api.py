"""Bad input at the review API: property-based fuzzing over real HTTP (issue 8, item 3).

Property: whatever a logged-in reviewer (or anyone) sends, the answer is never a 5xx. The API
answers 200/204 or 400/401/403/404/409/429 with a JSON ``{"error": message}``; the login form
answers 303 (a session) or 401 (the login page again), 403 or 429. After the fuzzing a valid
label submission still works.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_monitor.review.auth import hash_token
from rag_monitor.review.blind import REASONS, TRISTATE
from tests.review.test_review_api import Client, sample_record

SCALE = float(os.environ.get("RAG_MONITOR_FUZZ_SCALE", "1"))
API_ERRORS = {400, 401, 403, 404, 409, 429}


def fuzz_settings(examples: int):
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


TEXT = st.text(max_size=30)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXT)
ANY_JSON = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(TEXT, c, max_size=4)),
                        max_leaves=10)


def candidate_keys():
    # real keys look like d1..d4; also near misses and other types
    return st.one_of(st.sampled_from(["d1", "d2", "d3", "d4"]), st.sampled_from(["d0", "d5", "D1", "d01", "", "d1 "]), TEXT,
                     JSON_SCALARS)


def label_values():
    """Label objects: mostly the right keys with right or wrong values, plus unknown keys."""
    field = {
        "faithful": st.one_of(st.sampled_from([*TRISTATE, None]), ANY_JSON),
        "correct": st.one_of(st.sampled_from([*TRISTATE, None]), ANY_JSON),
        "refusal_appropriate": st.one_of(st.sampled_from([*TRISTATE, None]), ANY_JSON),
        "relevant": st.one_of(st.lists(candidate_keys(), max_size=5), ANY_JSON),
        "reasons": st.one_of(st.lists(st.one_of(st.sampled_from(REASONS), JSON_SCALARS), max_size=4), ANY_JSON),
        "note": st.one_of(TEXT, st.integers(3990, 4010).map(lambda n: "n" * n), st.just("é" * 4001), ANY_JSON),
        "preferred": st.one_of(st.sampled_from(["A", "B", "tie"]), ANY_JSON),
    }
    labels = st.fixed_dictionaries({}, optional=field).flatmap(
        lambda d: st.dictionaries(TEXT, ANY_JSON, max_size=2).map(lambda extra: {**extra, **d}))
    return st.one_of(labels, labels, labels, ANY_JSON)


def _deep(depth: int) -> bytes:
    return b'{"note":' + b"[" * depth + b"]" * depth + b"}"


def raw_bodies():
    """Bodies that are not a JSON object at all."""
    return st.one_of(
        st.binary(max_size=64),
        st.sampled_from([b"", b"null", b"{", b'{"note": "\xff\xfe"}', b"\xef\xbb\xbf{}", b'{"faithful": NaN}',
                         b'{"note": 1e400}', b'{"a": ' + b"1" * 5000 + b"}", _deep(100), _deep(10_000), _deep(200_000),
                         b'{"faithful": "yes"}' * 2, "{\"note\": \"\u2028\"}".encode()]),
        st.builds(lambda body, cut: body[:cut], st.just(b'{"faithful": "yes", "relevant": ["d1"]}'), st.integers(0, 30)),
    )


def check_api_answer(status: int, body: bytes, counts: Counter) -> None:
    counts["cases"] += 1
    counts[status] += 1
    assert status < 500, (status, body[:300])
    if status in (200, 204):
        return
    assert status in API_ERRORS, (status, body[:300])
    message = json.loads(body)["error"]  # every refusal is JSON with a message
    assert isinstance(message, str) and message.strip(), body


def _dumps_deep(value) -> bytes:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        return json.dumps(value, allow_nan=True).encode()
    finally:
        sys.setrecursionlimit(old)


@pytest.fixture
def review_agent(start_agent):
    tokens = ",".join([f"alice:reviewer:{hash_token('alice-token')}", f"carol:admin:{hash_token('carol-token')}"])
    return start_agent(review_tokens=tokens)


class Reviewing:
    """Alice with a claimed item; a 200 consumes it, so claim the next (enqueueing more when empty)."""

    def __init__(self, agent):
        self.agent = agent
        self.client = Client(agent.http_url)
        assert self.client.login("alice-token") == 200
        self.item_id = None
        self.claim()

    def claim(self) -> int:
        status, body = self.client.api("POST", "/api/review/claim")
        if status == 204:
            self.agent.store.queue.enqueue(sample_record(uuid.uuid4().hex), stratum="base", inclusion_prob=1.0)
            status, body = self.client.api("POST", "/api/review/claim")
        assert status == 200, (status, body)
        self.item_id = json.loads(body)["item"]
        # step one (relevance) done, so the labels fuzzed below reach step two
        status, body = self.client.api("POST", f"/api/review/items/{self.item_id}/relevance", {})
        assert status == 200, (status, body)
        return self.item_id

    def post_labels(self, body: bytes, content_type: str = "application/json"):
        headers = {"X-CSRF-Token": self.client.csrf, "Content-Type": content_type}
        return self.client.raw("POST", f"/api/review/items/{self.item_id}/labels", body, headers)

    def submit_valid(self) -> None:
        """A valid submission for the claimed item must still be stored."""
        labels = {"faithful": "yes", "correct": "no", "reasons": ["wrong"], "note": "after the fuzz",
                  "corrected_answer": "fixed"}
        reviews = self.agent.store.review.all_reviews
        before = sum(map(len, reviews().values()))  # an item picked for a second review returns to the queue
        status, body = self.post_labels(json.dumps(labels).encode())
        assert status == 200, (status, body)
        assert sum(map(len, reviews().values())) == before + 1


def test_label_bodies_never_5xx_and_refusals_say_why(review_agent):
    reviewing, counts = Reviewing(review_agent), Counter()
    reviewing.agent.store.queue.enqueue(sample_record(uuid.uuid4().hex), stratum="base", inclusion_prob=1.0)

    def send(body: bytes, content_type: str = "application/json") -> None:
        status, answer = reviewing.post_labels(body, content_type)
        check_api_answer(status, answer, counts)
        assert status in (200, 400), (status, answer)  # our own claimed item: stored, or refused as bad input
        if status == 200:
            reviewing.claim()  # the item is reviewed: take the next one

    @fuzz_settings(400)
    @given(label_values())
    def labels(value):
        send(_dumps_deep(value))

    @fuzz_settings(100)
    @given(raw_bodies(), st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded", ""]))
    def raw(body, content_type):
        send(body, content_type)

    labels()
    raw()
    assert counts[200] and counts[400], counts
    reviewing.submit_valid()
    print(f"\nreview label cases: {dict(counts)}")


@st.composite
def item_paths(draw) -> str:
    """Item ids of every sort: other items, huge, negative, not numbers, encoded slashes."""
    kind = draw(st.sampled_from(["near", "int", "huge", "text", "signed"]))
    if kind == "near":  # the items that exist (mostly not alice's) and their neighbours
        return str(draw(st.integers(0, 10)))
    if kind == "int":
        return str(draw(st.integers(0, 10**6)))
    if kind == "huge":
        return str(draw(st.sampled_from([2**31, 2**63 - 1, 2**63, 2**64, 10**30, 10**400]))) if draw(st.booleans()) else "9" * 5000
    if kind == "signed":
        return urllib.parse.quote(draw(st.sampled_from(["-1", "+1", "1.5", "1e3", "0x10", "01", " 1", "١", "1/../1"])), safe="")
    return urllib.parse.quote(draw(st.text(min_size=1, max_size=20)), safe="")


def test_item_ids_in_the_path_never_5xx(review_agent):
    reviewing, counts = Reviewing(review_agent), Counter()
    for _ in range(5):  # items nobody claimed: alice may not label them (403)
        review_agent.store.queue.enqueue(sample_record(uuid.uuid4().hex), stratum="base", inclusion_prob=1.0)

    @fuzz_settings(200)
    @given(item_paths(), st.sampled_from(["POST"] * 6 + ["GET", "PUT", "DELETE"]))
    def case(item, method):
        path = f"/api/review/items/{item}/labels"
        headers = {"X-CSRF-Token": reviewing.client.csrf, "Content-Type": "application/json"}
        status, answer = reviewing.client.raw(method, path, b'{"faithful": "yes"}', headers)
        counts["cases"] += 1
        counts[status] += 1
        assert status < 500, (status, item[:50], answer[:300])
        if status == 200:  # only ever alice's own claimed item (by another spelling of its id, maybe)
            assert int(item) == reviewing.item_id, item
            reviewing.claim()
            return
        # Not our item (403), no such item or not a route (404), not a method (405).
        assert status in (403, 404, 405), (status, item[:50], answer[:300])
        if answer.startswith(b"{"):  # the API's own refusals: JSON with a message
            assert json.loads(answer)["error"].strip()
        else:  # Starlette's router: the wrong method, or a path that no longer matches (an encoded "/")
            assert status in (404, 405) and answer in (b"Not Found", b"Method Not Allowed"), answer[:200]

    case()
    assert counts[404] and counts[403], counts
    reviewing.submit_valid()
    print(f"\nreview item-id cases: {dict(counts)}")


def login_from(agent, source_ip: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    """POST the login form from a given loopback address (the limiter counts failures per address)."""
    import http.client

    url = urllib.parse.urlsplit(agent.http_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10, source_address=(source_ip, 0))
    try:
        conn.request("POST", "/review/login", body=body, headers={"Content-Type": content_type})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_login_form_never_5xx(review_agent):
    reviewing = Reviewing(review_agent)  # logged in before the limiter locks the address out
    counts = Counter()
    forms = st.dictionaries(st.one_of(st.just("token"), st.just("reviewer"), TEXT),
                            st.one_of(TEXT, st.just("alice-token"), st.just("alice"), st.just("x" * 10_000)),
                            max_size=3)

    @fuzz_settings(150)
    @given(st.one_of(forms.map(lambda f: (urllib.parse.urlencode(f).encode(), "application/x-www-form-urlencoded")),
                     st.tuples(st.binary(max_size=80), st.sampled_from([
                         "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz", "multipart/form-data",
                         "application/json", "text/plain", ""]))),
           st.booleans())
    def case(wire, fresh_address):
        body, content_type = wire
        # Mostly a fresh 127.1.x.y, so the form parser (not the limiter) sees the body; else
        # 127.0.0.1, which the fuzz's failed logins soon lock out (429).
        n = counts["cases"]
        source = f"127.1.{n // 250}.{n % 250 + 1}" if fresh_address else "127.0.0.1"
        status, answer = login_from(review_agent, source, body, content_type)
        counts["cases"] += 1
        counts[status] += 1
        assert status < 500, (status, body[:200], answer[:300])
        # 303: a session; 401/429: the login page again, saying why; 400/403: JSON with a message.
        assert status in (303, 400, 401, 403, 429), (status, answer[:300])
        if status == 401:
            assert b"Unknown reviewer or token" in answer
        elif status == 429:
            assert b"Too many failed logins" in answer
        elif status != 303:
            assert json.loads(answer)["error"].strip()

    case()
    assert counts[429] and counts[401] and counts[400], counts  # the limiter held; bad forms were parsed and refused
    reviewing.submit_valid()  # an existing session is unaffected
    print(f"\nreview login cases: {dict(counts)}")


def test_no_session_or_csrf_is_refused_for_any_body(review_agent):
    """Without a session, or without the CSRF token, the body is never looked at: 401/403, JSON."""
    reviewing, counts = Reviewing(review_agent), Counter()
    anonymous = Client(review_agent.http_url)

    @fuzz_settings(100)
    @given(st.one_of(label_values().map(_dumps_deep), raw_bodies()), st.booleans())
    def case(body, logged_in):
        client = reviewing.client if logged_in else anonymous
        headers = {"Content-Type": "application/json"}  # no X-CSRF-Token
        status, answer = client.raw("POST", f"/api/review/items/{reviewing.item_id}/labels", body, headers)
        check_api_answer(status, answer, counts)
        assert status == (403 if logged_in else 401), (status, answer)

    case()
    reviewing.submit_valid()
    print(f"\nreview no-session cases: {dict(counts)}")
