"""Cross-replica coordination: lease locks, the releases each service has shipped, session windows."""

from __future__ import annotations

import json

import sqlalchemy as sa

from .engine import Database
from .models import Release, now_s
from .schema import locks, releases, session_windows


class Locks:
    """Named lease locks: held until unlocked or ``ttl_s`` passes, renewable by the holder."""

    def __init__(self, db: Database):
        self._db = db

    def try_lock(self, name: str, holder: str, ttl_s: float, *, now: float | None = None) -> bool:
        if not name or not holder:
            raise ValueError("lock name and holder must be non-empty")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
        now = now_s() if now is None else now
        with self._db.write() as conn:
            if conn.execute(
                self._db.insert(locks).values(name=name, holder=holder, expires_at=now + ttl_s)
                .on_conflict_do_nothing(index_elements=["name"])
                .returning(locks.c.name)
            ).first() is not None:
                return True
            # Held already: renew our own lease, or take over a lapsed one.
            return conn.execute(
                sa.update(locks)
                .where(locks.c.name == name, sa.or_(locks.c.holder == holder, locks.c.expires_at <= now))
                .values(holder=holder, expires_at=now + ttl_s)
            ).rowcount == 1

    def unlock(self, name: str, holder: str) -> bool:
        """Release the lock if ``holder`` holds it; False otherwise."""
        with self._db.write() as conn:
            return conn.execute(
                sa.delete(locks).where(locks.c.name == name, locks.c.holder == holder)
            ).rowcount == 1


class Releases:
    def __init__(self, db: Database):
        self._db = db

    def note(self, service: str, release: str, t: float | None = None) -> float:
        """Record that ``service`` runs ``release`` as of ``t``; returns its first-seen time.

        Replicas may see a release in any order: the earliest sighting wins.
        """
        t = now_s() if t is None else t
        stmt = self._db.insert(releases).values(service=service, release=release, first_seen=t)
        stmt = stmt.on_conflict_do_update(
            index_elements=["service", "release"],
            set_={"first_seen": sa.case((stmt.excluded.first_seen < releases.c.first_seen, stmt.excluded.first_seen),
                                        else_=releases.c.first_seen)},
        ).returning(releases.c.first_seen)
        with self._db.write() as conn:
            return conn.execute(stmt).scalar_one()

    def all(self) -> list[Release]:
        with self._db.read() as conn:
            rows = conn.execute(sa.select(releases).order_by(releases.c.first_seen, releases.c.service)).all()
        return [Release(r.service, r.release, r.first_seen) for r in rows]


class SessionWindows:
    """The last query (start time and words) of each session, so a re-ask routed to another
    replica is still seen as a regeneration."""

    def __init__(self, db: Database):
        self._db = db
        t = session_windows
        # Built once: SQLAlchemy caches their compiled form (the batch size varies per request).
        select = sa.select(t.c.session_id, t.c.start_ns, t.c.words).where(
            t.c.session_id.in_(sa.bindparam("ids", expanding=True)))
        # SQLite's BEGIN IMMEDIATE already serialises writers; PostgreSQL locks the rows it reads.
        self._select = select if db.is_sqlite else select.with_for_update()
        upsert = db.insert(t)
        # A replica that saw the session's later query first keeps it.
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["session_id"],
            set_={"start_ns": upsert.excluded.start_ns, "words": upsert.excluded.words, "seen_at": upsert.excluded.seen_at},
            where=upsert.excluded.start_ns >= t.c.start_ns,
        )

    def swap(self, latest: dict[str, tuple[int, list[str]]], *, now: float | None = None) -> dict[str, tuple[int, list[str]]]:
        """Store ``session -> (start_ns, words)`` where newer; returns what each session had before."""
        if not latest:
            return {}
        now = now_s() if now is None else now
        rows = [{"session_id": sid, "start_ns": start, "words": json.dumps(words), "seen_at": now}
                for sid, (start, words) in latest.items()]
        with self._db.write() as conn:
            previous = {r.session_id: (r.start_ns, json.loads(r.words))
                        for r in conn.execute(self._select, {"ids": list(latest)})}
            conn.execute(self._upsert, rows)  # executemany of one cached statement
        return previous

    def prune(self, before: float) -> int:
        """Forget sessions last seen before ``before`` (they can no longer regenerate)."""
        with self._db.write() as conn:
            return conn.execute(sa.delete(session_windows).where(session_windows.c.seen_at < before)).rowcount
