from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter

import pytest

from rag_monitor.store import ClaimError, NotFound, Store
from tests.store.conftest import make_record


def fill(store: Store, n: int, tenant_of=lambda i: None, start: int = 1) -> None:
    for i in range(start, start + n):
        assert store.queue.enqueue(make_record(i, tenant_of(i)), stratum="base", inclusion_prob=0.01)


def test_enqueue_is_idempotent_per_queue(store):
    record = make_record(1, "acme")
    assert store.queue.enqueue(record, stratum="thumbs_down", inclusion_prob=0.5, now=100.0)
    # An agent crash + OTLP retry enqueues the same trace again: nothing changes.
    assert not store.queue.enqueue(record, stratum="base", inclusion_prob=0.01, now=200.0)
    assert store.queue.depth() == {"queued": 1, "claimed": 0, "reviewed": 0}
    item = store.queue.item_for_trace(record.trace_id)
    assert (item.stratum, item.inclusion_prob, item.weight, item.tenant, item.created_at) == (
        "thumbs_down", 0.5, 2.0, "acme", 100.0)
    assert item.query_record == record
    # Another queue (e.g. pairwise shadow review) holds its own copy.
    assert store.queue.enqueue(record, stratum="shadow", inclusion_prob=1.0, pair_trace_id="f" * 32, queue="pairwise")
    assert store.queue.item_for_trace(record.trace_id, queue="pairwise").pair_trace_id == "f" * 32


def test_enqueue_rejects_bad_input(store):
    with pytest.raises(ValueError, match="inclusion_prob"):
        store.queue.enqueue(make_record(1), stratum="base", inclusion_prob=0)
    with pytest.raises(ValueError, match="stratum"):
        store.queue.enqueue(make_record(1), stratum="", inclusion_prob=0.1)
    with pytest.raises(TypeError, match="QueryRecord"):
        store.queue.enqueue("not a record", stratum="base", inclusion_prob=0.1)
    assert store.queue.depth()["queued"] == 0


def test_claim_submit_and_reviewed(store):
    fill(store, 2)
    first = store.review.claim("rev-a", lease_s=60, now=1000.0)
    assert first.trace_id == make_record(1).trace_id  # oldest first
    assert (first.state, first.claimed_by, first.claim_expires_at) == ("claimed", "rev-a", 1060.0)
    review = store.review.submit_review(first.id, "rev-a", {"faithful": False, "reason": ["wrong"]}, now=1010.0)
    assert review.labels == {"faithful": False, "reason": ["wrong"]}
    assert store.queue.get_item(first.id).state == "reviewed"
    assert store.queue.depth(now=1010.0) == {"queued": 1, "claimed": 0, "reviewed": 1}
    [(item, got)] = store.queue.reviewed()
    assert (item.id, got) == (first.id, review)
    assert store.queue.reviewed(since=1011.0) == []
    with pytest.raises(ClaimError, match="already reviewed"):
        store.review.submit_review(first.id, "rev-a", {"faithful": True}, now=1020.0)


def test_submit_refused_without_a_valid_claim(store):
    fill(store, 1)
    item = store.review.claim("rev-a", lease_s=60, now=1000.0)
    with pytest.raises(ClaimError, match="another reviewer"):
        store.review.submit_review(item.id, "rev-b", {"faithful": True}, now=1001.0)
    with pytest.raises(ClaimError, match="expired"):
        store.review.submit_review(item.id, "rev-a", {"faithful": True}, now=1060.0)
    with pytest.raises(NotFound):
        store.review.submit_review(999_999, "rev-a", {"faithful": True}, now=1001.0)
    with pytest.raises(ValueError, match="JSON"):
        store.review.submit_review(item.id, "rev-a", {"faithful": object()}, now=1001.0)
    assert store.queue.get_item(item.id).state == "claimed"
    assert store.queue.reviewed() == []


def test_expired_claim_returns_to_the_queue(store):
    fill(store, 1)
    item = store.review.claim("rev-a", lease_s=30, now=1000.0)
    assert store.review.claim("rev-b", lease_s=30, now=1010.0) is None
    assert store.queue.depth(now=1010.0)["claimed"] == 1
    assert store.queue.depth(now=1030.0)["queued"] == 1  # lapsed: claimable again
    again = store.review.claim("rev-b", lease_s=30, now=1031.0)
    assert (again.id, again.claimed_by) == (item.id, "rev-b")
    with pytest.raises(ClaimError, match="another reviewer"):
        store.review.submit_review(item.id, "rev-a", {"faithful": True}, now=1032.0)
    store.review.submit_review(item.id, "rev-b", {"faithful": True}, now=1032.0)


def test_release_expired_claims(store):
    fill(store, 3)
    store.review.claim("rev-a", lease_s=10, now=1000.0)
    store.review.claim("rev-a", lease_s=100, now=1000.0)
    assert store.queue.release_expired_claims(now=1050.0) == 1
    assert store.queue.depth(now=1050.0) == {"queued": 2, "claimed": 1, "reviewed": 0}


def test_tenant_scoped_claim(store):
    fill(store, 6, tenant_of=lambda i: ["acme", "globex", None][i % 3])
    got = []
    while (item := store.review.claim("rev", lease_s=60, tenants={"acme"})) is not None:
        got.append(item.tenant)
    assert got == ["acme", "acme"]
    assert store.review.claim("rev", lease_s=60, tenants=set()) is None
    assert store.review.claim("rev", lease_s=60, tenants={"initech"}) is None
    assert store.review.claim("rev", lease_s=60, tenants={"globex", "initech"}).tenant == "globex"
    # Unscoped reviewers also get items without a tenant.
    assert {store.review.claim("rev", lease_s=60).tenant for _ in range(3)} == {"globex", None}


def test_claim_rejects_bad_arguments(store):
    with pytest.raises(ValueError, match="reviewer"):
        store.review.claim("", lease_s=60)
    with pytest.raises(ValueError, match="lease_s"):
        store.review.claim("rev", lease_s=0)


def test_concurrent_claims_from_8_threads_hand_out_each_item_exactly_once(store):
    n_items, n_threads = 48, 8
    fill(store, n_items)
    start = threading.Barrier(n_threads)
    claimed: list[list[int]] = [[] for _ in range(n_threads)]
    errors: list[BaseException] = []

    def reviewer(k: int) -> None:
        try:
            start.wait()
            while (item := store.review.claim(f"rev-{k}", lease_s=600)) is not None:
                claimed[k].append(item.id)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reviewer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = Counter(i for ids in claimed for i in ids)
    assert len(counts) == n_items and set(counts.values()) == {1}
    assert store.queue.depth() == {"queued": 0, "claimed": n_items, "reviewed": 0}


_CLAIMER = """
import json, sys
from rag_monitor.store import Store
store = Store(sys.argv[1])
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # start together
ids = []
while (item := store.review.claim(sys.argv[2], lease_s=600)) is not None:
    ids.append(item.id)
store.close()
print(json.dumps(ids))
"""


@pytest.mark.integration
def test_concurrent_claims_from_two_processes(store, store_url):
    n_items = 60
    fill(store, n_items)
    procs = [
        subprocess.Popen([sys.executable, "-c", _CLAIMER, store_url, f"proc-{k}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(2)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    counts = Counter(i for ids in results for i in ids)
    assert len(counts) == n_items and set(counts.values()) == {1}
