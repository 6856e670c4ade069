"""Review sessions and the login throttle, in the store so every replica shares them.

A session row is keyed by the SHA-256 of the cookie's random id (a database dump opens no
session). Failed logins are rows keyed ``account:<name>`` or ``client:<address>``; rows older
than the throttle window are deleted as new ones arrive, so the table stays bounded by the
rate of failures, whatever the number of distinct clients.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from .engine import Database
from .models import ReviewSession, now_s
from .schema import login_failures, review_sessions


class Sessions:
    def __init__(self, db: Database):
        self._db = db

    def create(self, id_sha256: str, reviewer: str, csrf_token: str, ttl_s: float, *, now: float | None = None) -> None:
        now = now_s() if now is None else now
        s = review_sessions
        with self._db.write() as conn:
            conn.execute(sa.delete(s).where(s.c.expires_at < now))
            conn.execute(sa.insert(s).values(id_sha256=id_sha256, reviewer=reviewer, csrf_token=csrf_token,
                                             created_at=now, expires_at=now + ttl_s))

    def get(self, id_sha256: str, *, now: float | None = None) -> ReviewSession | None:
        now = now_s() if now is None else now
        s = review_sessions
        with self._db.read() as conn:
            row = conn.execute(sa.select(s).where(s.c.id_sha256 == id_sha256, s.c.expires_at > now)).first()
        return ReviewSession(row.reviewer, row.csrf_token, row.expires_at) if row is not None else None

    def drop(self, id_sha256: str) -> None:
        with self._db.write() as conn:
            conn.execute(sa.delete(review_sessions).where(review_sessions.c.id_sha256 == id_sha256))

    def record_failure(self, keys: Iterable[str], window_s: float, *, now: float | None = None) -> None:
        now = now_s() if now is None else now
        f = login_failures
        rows = [{"key": key[:300], "at": now} for key in keys]
        with self._db.write() as conn:
            conn.execute(sa.delete(f).where(f.c.at < now - window_s))
            if rows:
                conn.execute(sa.insert(f), rows)

    def failures(self, keys: Iterable[str], window_s: float, *, now: float | None = None) -> dict[str, int]:
        """Failed logins per key within the window."""
        now = now_s() if now is None else now
        f = login_failures
        wanted = [key[:300] for key in keys]
        counts = dict.fromkeys(wanted, 0)
        with self._db.read() as conn:
            stmt = sa.select(f.c.key, sa.func.count()).where(f.c.key.in_(wanted), f.c.at >= now - window_s).group_by(f.c.key)
            counts.update({key: int(n) for key, n in conn.execute(stmt)})
        return counts


class SessionMethods:
    """``Store``'s review-session and login-throttle methods (its ``_sessions``)."""

    _sessions: Sessions

    def create_session(self, id_sha256: str, reviewer: str, csrf_token: str, ttl_s: float, *,
                       now: float | None = None) -> None:
        self._sessions.create(id_sha256, reviewer, csrf_token, ttl_s, now=now)

    def get_session(self, id_sha256: str, *, now: float | None = None) -> ReviewSession | None:
        return self._sessions.get(id_sha256, now=now)

    def drop_session(self, id_sha256: str) -> None:
        self._sessions.drop(id_sha256)

    def record_login_failure(self, keys: Iterable[str], window_s: float, *, now: float | None = None) -> None:
        self._sessions.record_failure(keys, window_s, now=now)

    def login_failures(self, keys: Iterable[str], window_s: float, *, now: float | None = None) -> dict[str, int]:
        return self._sessions.failures(keys, window_s, now=now)
