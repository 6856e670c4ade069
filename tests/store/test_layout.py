"""The store by concern: ``Store`` opens, migrates and closes the database, and every workload's
reads and writes live on a small repository of their own, in a module of their own size."""

from __future__ import annotations

import inspect
from pathlib import Path

from rag_monitor.store import Store

LIFECYCLE = {"dialect", "url", "migrate", "schema_state", "require_schema", "downgrade", "ping", "checkpoint", "close"}
REPOSITORIES = {
    "ingest", "recent", "queue", "review", "scores", "feedback", "reservoirs", "drift_runs", "probes",
    "index_documents", "locks", "releases", "session_windows", "review_sessions", "login_throttle", "retention",
}
MAX_METHODS = 12
"""A repository's public methods: a workload's interface, not a facade's."""
MAX_LINES = 400


def public(obj: object) -> set[str]:
    return {name for name in vars(obj) if not name.startswith("_")}


def test_the_store_holds_only_the_lifecycle_and_repositories(tmp_path):
    assert Store.__mro__ == (Store, object)  # no mixins of workload methods
    assert public(Store) == LIFECYCLE
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        repositories = {name: value for name, value in vars(store).items() if not name.startswith("_")}
        assert set(repositories) == REPOSITORIES
        for name, repository in repositories.items():
            cls = type(repository)
            assert cls.__module__.startswith("rag_monitor.store."), name
            methods = {m for m in public(cls) if callable(getattr(cls, m))}
            assert 1 <= len(methods) <= MAX_METHODS, (name, sorted(methods))
            # A repository does not hand out the whole store: a component given one reaches no other.
            assert not any(isinstance(v, Store) for v in vars(repository).values()), name
    finally:
        store.close()


def test_each_store_module_stays_small():
    package = Path(inspect.getfile(Store)).parent
    sizes = {path.name: len(path.read_text().splitlines()) for path in package.glob("*.py")}
    assert "store.py" in sizes and len(sizes) > 10
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
