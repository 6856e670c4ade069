from __future__ import annotations

import pytest


def test_lease_lock(store):
    assert store.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=100.0)
    assert not store.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=110.0)
    assert store.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=120.0)  # renewal
    assert not store.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=149.0)
    assert store.try_lock("drift-scheduler", "replica-b", ttl_s=30, now=150.0)  # a-lease lapsed
    assert not store.unlock("drift-scheduler", "replica-a")
    assert store.unlock("drift-scheduler", "replica-b")
    assert store.try_lock("drift-scheduler", "replica-a", ttl_s=30, now=151.0)
    assert store.try_lock("other-lock", "replica-b", ttl_s=30, now=151.0)


def test_lock_rejects_bad_arguments(store):
    with pytest.raises(ValueError):
        store.try_lock("", "a", ttl_s=1)
    with pytest.raises(ValueError, match="ttl_s"):
        store.try_lock("x", "a", ttl_s=0)


def test_session_windows_return_the_previous_query_and_keep_the_newest(store):
    assert store.swap_session_windows({"s1": (100, ["cancel", "plan"]), "s2": (50, ["hi"])}, now=10.0) == {}
    previous = store.swap_session_windows({"s1": (200, ["cancel", "my", "plan"])}, now=11.0)
    assert previous == {"s1": (100, ["cancel", "plan"])}
    # A replica that saw an older query of s1 late does not overwrite the newer one.
    assert store.swap_session_windows({"s1": (150, ["old"])}, now=12.0) == {"s1": (200, ["cancel", "my", "plan"])}
    assert store.swap_session_windows({"s1": (300, ["x"])}, now=13.0) == {"s1": (200, ["cancel", "my", "plan"])}
    assert store.prune_session_windows(before=11.0) == 1  # s2, last seen at 10
    assert store.swap_session_windows({"s2": (60, ["hi"])}, now=14.0) == {}
