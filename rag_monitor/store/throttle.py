"""Login throttle counters, shared by every replica and exact under any concurrency.

A counter is one row (``key``, ``window_start``, ``count``). Taking an attempt is one
``INSERT ... ON CONFLICT DO UPDATE ... WHERE count < limit RETURNING`` per key: the database
increments and answers in the same statement, so two logins can never both read a count under
the limit and both go on (the count was read, compared and written in separate steps before).
An attempt takes every counter it is subject to in one transaction, in key order (no deadlock
on PostgreSQL), or none of them. A marker (``count = -1``) records that something happened at
``window_start`` (a successful login from a pair).
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from .engine import Database
from .models import now_s
from .schema import login_throttle

MARKER = -1


class _Refused(Exception):
    """A counter is at its limit: roll back the ones already taken."""


class LoginCounters:
    """``store.login_throttle``: see the module's docstring."""

    def __init__(self, db: Database):
        self._db = db
        t = login_throttle
        now = sa.bindparam("now", type_=sa.Double)
        upsert = db.insert(t).values(key=sa.bindparam("key", type_=sa.String), window_start=now, count=1)
        lapsed = t.c.window_start <= now - sa.bindparam("window_s", type_=sa.Double)
        self._take = upsert.on_conflict_do_update(
            index_elements=["key"],
            set_={"count": sa.case((lapsed, 1), else_=t.c.count + 1),
                  "window_start": sa.case((lapsed, upsert.excluded.window_start), else_=t.c.window_start)},
            where=sa.or_(lapsed, sa.and_(t.c.count >= 0, t.c.count < sa.bindparam("limit", type_=sa.Integer))),
        ).returning(t.c.window_start)

    def take(self, limits: Mapping[str, int], window_s: float, *, now: float | None = None) -> dict[str, float] | None:
        """One attempt on every counter in ``limits`` (key -> at most this many per window), or on
        none when any is at its limit (None). Returns each counter's window start (for ``give_back``)."""
        now = now_s() if now is None else now
        taken: dict[str, float] = {}
        try:
            with self._db.write() as conn:
                for key in sorted(limits):
                    row = conn.execute(self._take, {"key": key, "now": now, "window_s": window_s,
                                                    "limit": limits[key]}).first()
                    if row is None:
                        raise _Refused
                    taken[key] = float(row[0])
        except _Refused:
            return None
        return taken

    def give_back(self, taken: Mapping[str, float]) -> None:
        """Undo ``take`` (the attempt succeeded), in the windows it was taken in."""
        t = login_throttle
        with self._db.write() as conn:
            for key in sorted(taken):
                conn.execute(sa.update(t).where(t.c.key == key, t.c.window_start == taken[key], t.c.count > 0)
                             .values(count=t.c.count - 1))

    def mark(self, key: str, *, now: float | None = None) -> None:
        now = now_s() if now is None else now
        stmt = self._db.insert(login_throttle).values(key=key, window_start=now, count=MARKER)
        with self._db.write() as conn:
            conn.execute(stmt.on_conflict_do_update(index_elements=["key"],
                                                    set_={"window_start": now, "count": MARKER}))

    def marked_since(self, key: str, since: float) -> bool:
        t = login_throttle
        with self._db.read() as conn:
            return conn.execute(sa.select(t.c.key).where(t.c.key == key, t.c.count == MARKER,
                                                         t.c.window_start >= since)).first() is not None

    def prune(self, window_s: float, marker_s: float, *, now: float | None = None) -> int:
        """Delete lapsed counters and markers older than ``marker_s``; never waits for a row a login
        holds (PostgreSQL ``SKIP LOCKED``), so it cannot deadlock with one."""
        now = now_s() if now is None else now
        t = login_throttle
        old = sa.or_(sa.and_(t.c.count >= 0, t.c.window_start < now - window_s),
                     sa.and_(t.c.count == MARKER, t.c.window_start < now - marker_s))
        keys = sa.select(t.c.key).where(old)
        if not self._db.is_sqlite:
            keys = keys.with_for_update(skip_locked=True)
        with self._db.write() as conn:
            return conn.execute(sa.delete(t).where(t.c.key.in_(keys))).rowcount
