"""Each document's newest searchable version, from index events, shared by every replica."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import sqlalchemy as sa

from .engine import Database
from .schema import index_documents


class IndexedVersion(Protocol):
    document_id: str
    committed_at: float
    indexed_at: float
    source: str | None


class IndexDocuments:
    """``store.index_documents``: the newest committed version of each document that is searchable."""

    def __init__(self, db: Database):
        self._db = db
        t = index_documents
        self._select = sa.select(t.c.document_id, t.c.committed_at).where(t.c.document_id.in_(sa.bindparam("ids", expanding=True)))
        # Two replicas given the same event must not both see it as new. SQLite's BEGIN IMMEDIATE
        # serialises writers; on PostgreSQL a row lock cannot cover a document not yet stored, so
        # writers of index events take the table in a mode that excludes each other (and ingest's
        # readers, ACCESS SHARE, not at all). Index events are few and their transactions short.
        self._lock = None if db.is_sqlite else sa.text("LOCK TABLE index_documents IN SHARE ROW EXCLUSIVE MODE")
        upsert = db.insert(t)
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["document_id"],
            set_={"committed_at": upsert.excluded.committed_at, "indexed_at": upsert.excluded.indexed_at,
                  "source": upsert.excluded.source},
            where=upsert.excluded.committed_at > t.c.committed_at,
        )

    def record(self, events: Sequence[IndexedVersion]) -> list[bool]:
        """Keep each document's newest version; per event, whether it was a version newer than any
        seen before (a re-sent event, a re-index of the same version or an older one is not)."""
        if not events:
            return []
        with self._db.write() as conn:
            if self._lock is not None:
                conn.execute(self._lock)
            newest = {r.document_id: r.committed_at
                      for r in conn.execute(self._select, {"ids": list({e.document_id for e in events})})}
            advanced, latest = [], {}
            for e in events:
                previous = newest.get(e.document_id)
                is_new = previous is None or e.committed_at > previous
                advanced.append(is_new)
                if is_new:
                    newest[e.document_id] = e.committed_at
                    latest[e.document_id] = e
            if latest:
                conn.execute(self._upsert, [
                    {"document_id": e.document_id, "committed_at": e.committed_at, "indexed_at": e.indexed_at, "source": e.source}
                    for e in latest.values()
                ])
        return advanced

    def newest(self, document_ids: Iterable[str]) -> dict[str, tuple[float, float]]:
        """Document id -> (committed_at, indexed_at) of its newest searchable version, for the known ones."""
        ids = list(set(document_ids))
        if not ids:
            return {}
        t = index_documents
        with self._db.read() as conn:
            rows = conn.execute(sa.select(t.c.document_id, t.c.committed_at, t.c.indexed_at).where(t.c.document_id.in_(ids)))
            return {r.document_id: (r.committed_at, r.indexed_at) for r in rows}

    def count(self) -> int:
        with self._db.read() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(index_documents)).scalar_one()
