"""The drift references of ``benchmarks/scale.py``'s steady state: full, and their capture period
over, as in a deployment past its first week (written before the agents start, not measured)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def prefill_references(url: str, model: str, now: float) -> dict[str, int]:
    """Steady state: every drift reference full and its capture period over, as in a deployment
    past its first ``reference_days`` (written before the agents start; not measured). The
    vectors are random unit vectors of the embedder's model and dimension: no test runs on them
    within the benchmark (runs wait for a full current window)."""
    import numpy as np

    from rag_monitor.agent.drift.profiles import load_profiles
    from rag_monitor.store import ReservoirItem, open_store

    profiles = load_profiles(ROOT / "rag_monitor" / "defaults" / "detectors" / "profiles.yaml")
    sizes: dict[str, int] = {}
    for p in profiles:
        sizes[p.signal] = max(sizes.get(p.signal, 0), p.reference_size)
    started = now - 2 * max(p.reference_days or 0 for p in profiles) * 86400
    rng = np.random.default_rng(7)
    store = open_store(url)
    try:
        for signal, size in sizes.items():
            if signal.endswith("_embedding"):
                vectors = rng.standard_normal((size, EMBEDDING_DIM)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                items = [ReservoirItem(f"{i:032x}", vector=v, model=model, added_at=started) for i, v in enumerate(vectors)]
            else:
                items = [ReservoirItem(f"{i:032x}", value=f"intent-{i % 8}", added_at=started) for i in range(size)]
            store.reservoirs.add(signal, "reference", items, capacity=size, now=started)
    finally:
        store.close()
    # What autovacuum has long done in a deployment past its reference period (visibility map set:
    # the feed's count of a reference is an index-only scan, not a read of its 60 MB of vectors).
    import psycopg

    with psycopg.connect(sa_url_to_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE reservoir_items")
        conn.execute("VACUUM ANALYZE reservoirs")
    return sizes


EMBEDDING_DIM = 384
"""all-MiniLM-L6-v2's (the shipped embedder)."""


def sa_url_to_dsn(url: str) -> str:
    import sqlalchemy as sa

    u = sa.make_url(url)
    return f"host={u.host} port={u.port} user={u.username} dbname={u.database}"
