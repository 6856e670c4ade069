"""Review sessions and the login throttle, in the store so every replica shares them.

A session row is keyed by the SHA-256 of the cookie's random id (a database dump opens no
session). The throttle's counters are in ``throttle.py``; the ``store_pruning`` job deletes
lapsed ones, so the table stays bounded by the rate of failures.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from .engine import Database
from .models import ReviewSession, now_s
from .schema import review_sessions
from .throttle import LoginCounters


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


class SessionMethods:
    """``Store``'s review-session and login-throttle methods (its ``_sessions``)."""

    _sessions: Sessions
    _login_counters: LoginCounters

    def create_session(self, id_sha256: str, reviewer: str, csrf_token: str, ttl_s: float, *,
                       now: float | None = None) -> None:
        self._sessions.create(id_sha256, reviewer, csrf_token, ttl_s, now=now)

    def get_session(self, id_sha256: str, *, now: float | None = None) -> ReviewSession | None:
        return self._sessions.get(id_sha256, now=now)

    def drop_session(self, id_sha256: str) -> None:
        self._sessions.drop(id_sha256)

    def take_login_attempt(self, limits: Mapping[str, int], window_s: float, *,
                           now: float | None = None) -> dict[str, float] | None:
        """One attempt on each counter (key -> limit per window), atomically; None when any is at its limit."""
        return self._login_counters.take(limits, window_s, now=now)

    def give_back_login_attempt(self, taken: Mapping[str, float]) -> None:
        self._login_counters.give_back(taken)

    def mark_login(self, key: str, *, now: float | None = None) -> None:
        self._login_counters.mark(key, now=now)

    def login_marked_since(self, key: str, since: float) -> bool:
        return self._login_counters.marked_since(key, since)

    def prune_login_throttle(self, window_s: float, marker_s: float, *, now: float | None = None) -> int:
        return self._login_counters.prune(window_s, marker_s, now=now)
