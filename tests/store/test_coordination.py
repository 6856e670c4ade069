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
