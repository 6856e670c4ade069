from __future__ import annotations

import pytest

from rag_monitor.store import SessionQuery


def test_lease_lock(store):
    assert store.locks.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=100.0)
    assert not store.locks.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=110.0)
    assert store.locks.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=120.0)  # renewal
    assert not store.locks.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=149.0)
    assert store.locks.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=150.0)  # a-lease lapsed
    assert not store.locks.unlock("drift-scheduler", "replica-a")
    assert store.locks.unlock("drift-scheduler", "replica-b")
    assert store.locks.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=151.0)
    assert store.locks.try_lock("other-lock", "replica-b", ttl_s=30, now=151.0)


def test_lock_rejects_bad_arguments(store):
    with pytest.raises(ValueError):
        store.locks.try_lock("", "a", ttl_s=1)
    with pytest.raises(ValueError, match="ttl_s"):
        store.locks.try_lock("x", "a", ttl_s=0)


def test_session_windows_return_the_previous_query_and_keep_the_newest(store):
    q = SessionQuery
    first, newer = q(100, ["cancel", "plan"], "a" * 32, ("r1", "production", "billing")), q(200, ["cancel", "my", "plan"], "b" * 32, ("r1", "production", "billing"))
    assert store.session_windows.swap({"s1": first, "s2": q(50, ["hi"], "c" * 32, ("r1", "production", "other"))}, now=10.0) == {}
    previous = store.session_windows.swap({"s1": newer}, now=11.0)
    assert previous == {"s1": first}
    # A replica that saw an older query of s1 late does not overwrite the newer one.
    assert store.session_windows.swap({"s1": q(150, ["old"], "d" * 32, ("r1", "production", "x"))}, now=12.0) == {"s1": newer}
    assert store.session_windows.swap({"s1": q(300, ["x"], "e" * 32, ("r1", "production", "x"))}, now=13.0) == {"s1": newer}
    assert store.session_windows.prune(before=11.0) == 1  # s2, last seen at 10
    assert store.session_windows.swap({"s2": q(60, ["hi"], "f" * 32, ("r1", "production", "x"))}, now=14.0) == {}


def test_a_regenerated_query_is_claimed_once_by_a_click_or_a_reask(store):
    """The explicit regenerate (stored with the ingest) and the re-ask found in the session window
    name the same query: whichever comes first claims it, the other finds it claimed."""
    from rag_monitor.store import FeedbackEvent, IngestBatch

    asked = SessionQuery(100, ["reset", "password"], "a" * 32, ("r1", "production", "account"))
    store.session_windows.swap({"s": asked}, now=10.0)
    click = FeedbackEvent("a" * 32, "regenerate", 11.0, None, None, "span-1")
    known = {"a" * 32}
    # A click on a query no longer known (past the recent-records cache) claims nothing.
    assert store.ingest.persist(IngestBatch(feedback=[click]), now=11.0).regenerated == set()
    click = FeedbackEvent("a" * 32, "regenerate", 11.0, None, None, "span-0")
    assert store.ingest.persist(IngestBatch(feedback=[click], known_queries=known), now=11.0).regenerated == known
    second_click = FeedbackEvent("a" * 32, "regenerate", 12.0, None, None, "span-2")
    assert store.ingest.persist(IngestBatch(feedback=[second_click, click], known_queries=known), now=12.0).regenerated == set()
    reask = SessionQuery(105, ["reset", "password"], "b" * 32, ("r1", "production", "account"))
    previous, claimed = store.session_windows.check({"s": reask}, lambda stored: [stored["s"].trace_id], now=13.0)
    assert previous == {"s": asked} and claimed == set()
    # A re-ask without a click claims its query; claims are forgotten after their time.
    _, claimed = store.session_windows.check({"s": SessionQuery(110, ["x"], "c" * 32, ())}, lambda stored: [stored["s"].trace_id], now=14.0)
    assert claimed == {"b" * 32}
    assert store.session_windows.prune_regenerated(before=12.0) == 1
