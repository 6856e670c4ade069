"""The login throttle's counters on both backends: exact under concurrency, all or none."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from rag_monitor.store import open_store

WINDOW = 60.0


def test_a_counter_stops_at_its_limit_and_lapses_with_its_window(store):
    taken = [store.login_throttle.take({"a": 3}, WINDOW, now=100.0) for _ in range(5)]
    assert [t is not None for t in taken] == [True, True, True, False, False]
    assert store.login_throttle.take({"a": 3}, WINDOW, now=159.0) is None
    assert store.login_throttle.take({"a": 3}, WINDOW, now=160.0) == {"a": 160.0}  # a new window


def test_an_attempt_takes_every_counter_or_none(store):
    assert store.login_throttle.take({"full": 1}, WINDOW, now=100.0) is not None
    for _ in range(3):  # "full" refuses: "other" is not counted either
        assert store.login_throttle.take({"other": 2, "full": 1}, WINDOW, now=101.0) is None
    assert store.login_throttle.take({"other": 2}, WINDOW, now=102.0) is not None
    assert store.login_throttle.take({"other": 2}, WINDOW, now=102.0) is not None
    assert store.login_throttle.take({"other": 2}, WINDOW, now=102.0) is None


def test_giving_back_frees_the_attempt_only_in_its_own_window(store):
    first = store.login_throttle.take({"a": 1}, WINDOW, now=100.0)
    store.login_throttle.give_back(first)
    second = store.login_throttle.take({"a": 1}, WINDOW, now=101.0)
    assert second == {"a": 100.0}
    later = store.login_throttle.take({"a": 1}, WINDOW, now=170.0)  # a new window began
    store.login_throttle.give_back(second)  # from the old window: changes nothing
    assert later == {"a": 170.0} and store.login_throttle.take({"a": 1}, WINDOW, now=171.0) is None


def test_markers_and_pruning(store):
    store.login_throttle.mark("known", now=100.0)
    assert store.login_throttle.marked_since("known", 50.0) and not store.login_throttle.marked_since("known", 150.0)
    assert not store.login_throttle.marked_since("never", 0.0)
    store.login_throttle.take({"counter": 5}, WINDOW, now=100.0)
    assert store.login_throttle.prune(WINDOW, 1000.0, now=150.0) == 0
    assert store.login_throttle.prune(WINDOW, 1000.0, now=200.0) == 1  # the lapsed counter
    assert store.login_throttle.marked_since("known", 50.0)
    assert store.login_throttle.prune(WINDOW, 1000.0, now=1200.0) == 1
    assert not store.login_throttle.marked_since("known", 0.0)


def test_concurrent_attempts_from_two_replicas_take_exactly_the_limit(store_url):
    """40 threads over two stores (two replicas' connection pools) on one database."""
    replicas = [open_store(store_url), open_store(store_url)]
    start = threading.Barrier(40)

    def attempt(i: int) -> bool:
        start.wait()
        return replicas[i % 2].login_throttle.take({"client": 5, "account": 10}, WINDOW) is not None

    try:
        with ThreadPoolExecutor(40) as pool:
            admitted = sum(pool.map(attempt, range(40)))
    finally:
        for replica in replicas:
            replica.close()
    assert admitted == 5
