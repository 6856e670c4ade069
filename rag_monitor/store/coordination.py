"""Cross-replica coordination: lease locks, the releases each service has shipped, session windows
and the regenerated queries they claim."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from .engine import Database, UnnestInsert
from .models import Release, now_s
from .schema import locks, regenerated_queries, releases, session_windows


class Locks:
    """``store.locks``: named lease locks: held until unlocked or ``ttl_s`` passes, renewable by the holder.

    Every acquisition (not a renewal) takes a new fencing token, one more than the lock's last:
    a holder whose lease lapsed and was taken over carries a stale token, and ``fence_in``
    refuses its writes, whatever it believes about its lease.
    """

    def __init__(self, db: Database):
        self._db = db

    def try_lock(self, name: str, holder: str, ttl_s: float, *, now: float | None = None) -> bool:
        """Take or renew the lease; False while another holder's lease is valid."""
        return self.acquire(name, holder, ttl_s, now=now) is not None

    def acquire(self, name: str, holder: str, ttl_s: float, *, now: float | None = None) -> int | None:
        """Take or renew the lease; its fencing token, or None while another holder's lease is valid."""
        if not name or not holder:
            raise ValueError("lock name and holder must be non-empty")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
        now = now_s() if now is None else now
        with self._db.write() as conn:
            row = conn.execute(
                self._db.insert(locks).values(name=name, holder=holder, expires_at=now + ttl_s, token=1)
                .on_conflict_do_nothing(index_elements=["name"])
                .returning(locks.c.token)
            ).first()
            if row is None:  # held already: renew our own valid lease (same token) ...
                row = conn.execute(
                    sa.update(locks)
                    .where(locks.c.name == name, locks.c.holder == holder, locks.c.expires_at > now)
                    .values(expires_at=now + ttl_s).returning(locks.c.token)
                ).first()
            if row is None:  # ... or take over a lapsed one (a new token)
                row = conn.execute(
                    sa.update(locks)
                    .where(locks.c.name == name, locks.c.expires_at <= now)
                    .values(holder=holder, expires_at=now + ttl_s, token=locks.c.token + 1)
                    .returning(locks.c.token)
                ).first()
        return None if row is None else int(row[0])

    def fence_in(self, conn: Connection, name: str, holder: str, token: int) -> bool:
        """Inside a write: True while ``holder`` still holds ``token`` (no newer acquisition).

        The row is locked (``FOR UPDATE`` on PostgreSQL; SQLite serialises writers) so a takeover
        waits for this transaction to commit.
        """
        row = conn.execute(
            sa.select(locks.c.holder, locks.c.token).where(locks.c.name == name).with_for_update()
        ).first()
        return row is not None and row.holder == holder and int(row.token) == token

    def unlock(self, name: str, holder: str) -> bool:
        """Release the lock if ``holder`` holds it; False otherwise. The row (and its token) stays."""
        with self._db.write() as conn:
            return conn.execute(
                sa.update(locks).where(locks.c.name == name, locks.c.holder == holder, locks.c.expires_at > 0)
                .values(expires_at=0.0)
            ).rowcount == 1


class Releases:
    """``store.releases``: the releases each service has shipped, by first sighting on any replica."""

    def __init__(self, db: Database):
        self._db = db

    def note(self, service: str, release: str, t: float | None = None) -> float:
        """Record that ``service`` runs ``release`` as of ``t``; returns its first-seen time.

        Replicas may see a release in any order: the earliest sighting wins.
        """
        with self._db.write() as conn:
            return self.note_in(conn, service, release, t)

    def note_in(self, conn: Connection, service: str, release: str, t: float | None = None) -> float:
        """``note`` inside the caller's transaction."""
        t = now_s() if t is None else t
        stmt = self._db.insert(releases).values(service=service, release=release, first_seen=t)
        stmt = stmt.on_conflict_do_update(
            index_elements=["service", "release"],
            set_={"first_seen": sa.case((stmt.excluded.first_seen < releases.c.first_seen, stmt.excluded.first_seen),
                                        else_=releases.c.first_seen)},
        ).returning(releases.c.first_seen)
        return conn.execute(stmt).scalar_one()

    def latest(self, keep: int) -> list[Release]:
        """Each service's ``keep`` most recently first-seen releases, newest first: the label set
        every replica agrees on."""
        r = releases
        rank = sa.func.row_number().over(
            partition_by=r.c.service, order_by=(r.c.first_seen.desc(), r.c.release.desc())
        ).label("rank")
        ranked = sa.select(r.c.service, r.c.release, r.c.first_seen, rank).subquery()
        stmt = (sa.select(ranked.c.service, ranked.c.release, ranked.c.first_seen)
                .where(ranked.c.rank <= keep).order_by(ranked.c.service, ranked.c.first_seen.desc()))
        with self._db.read() as conn:
            return [Release(*row) for row in conn.execute(stmt)]

    def all(self) -> list[Release]:
        with self._db.read() as conn:
            rows = conn.execute(sa.select(releases).order_by(releases.c.first_seen, releases.c.service)).all()
        return [Release(r.service, r.release, r.first_seen) for r in rows]


class SessionQuery(NamedTuple):
    """A session's last query as the regeneration detector keeps it."""

    start_ns: int
    words: list[str]
    trace_id: str = ""
    labels: tuple[str, ...] = ()
    """The query's metric labels (release, variant, intent): a regeneration counts under them."""


SESSION_LABELS = 3
"""How many of a stored session query's labels this version reads: a newer version appends its
own after them (and reads these), so a replica behind still counts under the ones it knows."""


class SessionWindows:
    """``store.session_windows``: the last query (start time, words, trace id, labels) of each
    session, so a re-ask routed to another replica is still seen as a regeneration; and the
    queries claimed as regenerated.

    Usage::

        previous, claimed = store.session_windows.check(latest, regenerated)
    """

    def __init__(self, db: Database, claims: RegeneratedQueries):
        self._db = db
        self._claims = claims
        t = session_windows
        # Built once: SQLAlchemy caches their compiled form (the batch size varies per request).
        ids = (t.c.session_id.in_(sa.bindparam("ids", expanding=True)) if db.is_sqlite else
               t.c.session_id == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(t.c.session_id.type))))
        select = sa.select(t.c.session_id, t.c.start_ns, t.c.words, t.c.trace_id, t.c.labels).where(ids)
        # SQLite's BEGIN IMMEDIATE already serialises writers; PostgreSQL locks the rows it reads.
        self._select = select if db.is_sqlite else select.with_for_update()
        upsert = db.insert(t)
        # A replica that saw the session's later query first keeps it.
        self._upsert = upsert.on_conflict_do_update(
            index_elements=["session_id"],
            set_={c: getattr(upsert.excluded, c) for c in ("start_ns", "words", "seen_at", "trace_id", "labels")},
            where=upsert.excluded.start_ns >= t.c.start_ns,
        )
        columns = ["session_id", "start_ns", "words", "seen_at", "trace_id", "labels"]
        # PostgreSQL: every session of a batch in one prepared statement, not one per session.
        self._upsert_rows = None if db.is_sqlite else UnnestInsert(
            t, columns, "ON CONFLICT (session_id) DO UPDATE SET "
            + ", ".join(f"{c} = excluded.{c}" for c in columns[1:])
            + " WHERE excluded.start_ns >= session_windows.start_ns")

    def swap(self, latest: dict[str, SessionQuery], *, now: float | None = None) -> dict[str, SessionQuery]:
        """Each session's last query (``SessionQuery``), replaced where newer; returns the previous ones."""
        return self.check(latest, None, now=now)[0]

    def check(self, latest: dict[str, SessionQuery],
              regenerated: Callable[[dict[str, SessionQuery]], Iterable[str]] | None, *,
              now: float | None = None) -> tuple[dict[str, SessionQuery], set[str]]:
        """``swap``, and in the same transaction claim the queries ``regenerated(previous)`` names
        (trace ids; see ``RegeneratedQueries``): returns the previous windows and the newly claimed ids."""
        if not latest:
            return {}, set()
        now = now_s() if now is None else now
        latest = {sid: SessionQuery(*q) for sid, q in latest.items()}
        rows = [{"session_id": sid, "start_ns": q.start_ns, "words": json.dumps(list(q.words)), "seen_at": now,
                 "trace_id": q.trace_id, "labels": json.dumps(list(q.labels))} for sid, q in latest.items()]
        with self._db.write() as conn:
            previous = {r.session_id: SessionQuery(r.start_ns, json.loads(r.words), r.trace_id,
                                                   tuple(json.loads(r.labels)[:SESSION_LABELS]))
                        for r in conn.execute(self._select, {"ids": list(latest)})}
            if self._upsert_rows is not None:
                self._upsert_rows.execute(conn, rows)
            else:
                conn.execute(self._upsert, rows)  # executemany of one cached statement
            claimed = self._claims.claim_in(conn, regenerated(previous), now) if regenerated is not None else set()
        return previous, claimed

    def prune(self, before: float) -> int:
        """Forget sessions last seen before ``before`` (they can no longer regenerate)."""
        with self._db.write() as conn:
            return conn.execute(sa.delete(session_windows).where(session_windows.c.seen_at < before)).rowcount

    def prune_regenerated(self, before: float) -> int:
        """Forget regenerated-query claims made before ``before``."""
        return self._claims.prune(before)


class RegeneratedQueries:
    """Queries counted as regenerated, each once: an explicit ``regenerate`` (claimed in the ingest
    transaction that stores the feedback) and the re-ask it triggers (claimed by the regeneration
    check that finds it) name the same query, and only the first claim counts, on any replica."""

    def __init__(self, db: Database):
        self._db = db
        self._insert = db.insert(regenerated_queries).on_conflict_do_nothing(
            index_elements=["trace_id"]).returning(regenerated_queries.c.trace_id)

    def claim_in(self, conn: Connection, trace_ids: Iterable[str], now: float) -> set[str]:
        """Claim ``trace_ids`` inside the caller's transaction; the ones no one had claimed."""
        claimed = set()
        for trace_id in sorted(set(trace_ids) - {""}):  # one statement per row: RETURNING tells which were new
            if conn.execute(self._insert, {"trace_id": trace_id, "claimed_at": now}).first() is not None:
                claimed.add(trace_id)
        return claimed

    def prune(self, before: float) -> int:
        """Forget claims made before ``before`` (no signal of those queries is expected any more)."""
        with self._db.write() as conn:
            return conn.execute(sa.delete(regenerated_queries).where(regenerated_queries.c.claimed_at < before)).rowcount
