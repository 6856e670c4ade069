"""Review sessions and the login throttle, in the store so every replica shares them.

A session row is keyed by the SHA-256 of the cookie's random id (a database dump opens no
session). The throttle's counters are in ``throttle.py``; the ``store_pruning`` job deletes
lapsed ones, so the table stays bounded by the rate of failures.
"""

from __future__ import annotations

import sqlalchemy as sa

from .engine import Database
from .models import ReviewSession, now_s
from .schema import review_sessions


class Sessions:
    """``store.review_sessions``: the review page's login sessions (``store.login_throttle``:
    its throttle, ``throttle.py``)."""

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
