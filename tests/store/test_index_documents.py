"""Each document's newest searchable version: a version counts as new once, whatever the order."""

from __future__ import annotations

import threading

from rag_monitor.collectors.freshness import IndexEvent


def test_only_a_newer_version_is_new_and_kept(store):
    docs = store.index_documents
    assert docs.record([]) == [] and docs.newest([]) == {}
    assert docs.record([IndexEvent("a", 100.0, 130.0, "wiki"), IndexEvent("a", 50.0, 140.0), IndexEvent("b", 10.0, 11.0),
                        IndexEvent("a", 200.0, 260.0), IndexEvent("a", 200.0, 290.0)]) == [True, False, True, True, False]
    assert docs.newest(["a", "b", "c"]) == {"a": (200.0, 260.0), "b": (10.0, 11.0)}
    assert docs.record([IndexEvent("a", 150.0, 400.0), IndexEvent("b", 20.0, 25.0)]) == [False, True]
    assert docs.newest(["a", "b"]) == {"a": (200.0, 260.0), "b": (20.0, 25.0)}
    assert docs.count() == 2


def test_concurrent_writers_count_a_version_once(store):
    """Two replicas given the same events: each version is new for exactly one of them."""
    events = [IndexEvent(f"d{i % 20}", float(i), float(i) + 1) for i in range(200)]
    results: list[list[bool]] = []

    def write():
        out = []
        for i in range(0, len(events), 10):
            out += store.index_documents.record(events[i:i + 10])
        results.append(out)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(sum(r) for r in results) == 200  # increasing versions: each new exactly once
    assert store.index_documents.newest(["d0", "d19"]) == {"d0": (180.0, 181.0), "d19": (199.0, 200.0)}
