"""Reviewer authentication: hashed tokens, sessions, CSRF tokens and login rate limiting.

Reviewers are configured as ``name:role:sha256hex[:tenant|tenant]`` entries (``review_tokens``
setting, comma-separated, or a file with one entry per line). The agent never stores or logs a
token: only its SHA-256. Roles: ``reviewer`` labels items; ``admin`` also reads queue stats and
exports. A tenant list scopes what a reviewer may claim.

Usage::

    reviewers = Reviewers.parse("alice:reviewer:" + hash_token("s3cret"))
    reviewer = reviewers.authenticate("s3cret")     # Reviewer(name='alice', ...) or None
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

ROLES = ("reviewer", "admin")


def hash_token(token: str) -> str:
    """The SHA-256 hex digest configured for a token (`rag-monitor review hash-token`)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Reviewer:
    name: str
    """A pseudonym: it goes into reviews and the golden-set export."""
    role: str
    token_sha256: str
    tenants: frozenset[str] | None = None
    """None: every tenant."""

    def can(self, role: str) -> bool:
        return self.role == "admin" or self.role == role


class Reviewers:
    def __init__(self, reviewers: list[Reviewer]):
        self._by_hash = {r.token_sha256: r for r in reviewers}

    def __len__(self) -> int:
        return len(self._by_hash)

    @classmethod
    def parse(cls, spec: str) -> Reviewers:
        """From ``review_tokens``: entries separated by commas or newlines, or a file path."""
        if spec and "\n" not in spec and ":" not in spec and Path(spec).is_file():
            spec = Path(spec).read_text()
        reviewers = []
        for n, entry in enumerate(e.strip() for e in spec.replace("\n", ",").split(",")):
            if not entry or entry.startswith("#"):
                continue
            parts = entry.split(":")
            if len(parts) not in (3, 4):
                raise ValueError(f"review token entry {n + 1}: expected name:role:sha256[:tenants], got {len(parts)} fields")
            name, role, digest = parts[:3]
            if role not in ROLES:
                raise ValueError(f"review token entry {n + 1} ({name}): role must be one of {ROLES}, got {role!r}")
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError(f"review token entry {n + 1} ({name}): the token must be given as its SHA-256 hex digest")
            tenants = frozenset(t for t in parts[3].split("|") if t) if len(parts) == 4 else None
            reviewers.append(Reviewer(name, role, digest.lower(), tenants))
        return cls(reviewers)

    def authenticate(self, token: str) -> Reviewer | None:
        digest = hash_token(token)
        for known, reviewer in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return reviewer
        return None


@dataclass
class Session:
    reviewer: Reviewer
    csrf_token: str
    expires_at: float


class Sessions:
    """Server-side sessions keyed by a random id in an HttpOnly, SameSite=Strict cookie."""

    def __init__(self, ttl_s: float = 8 * 3600, clock=time.time):
        self.ttl_s = ttl_s
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, reviewer: Reviewer) -> tuple[str, Session]:
        session_id = secrets.token_urlsafe(32)
        session = Session(reviewer, secrets.token_urlsafe(32), self.clock() + self.ttl_s)
        with self._lock:
            now = self.clock()
            for key in [k for k, s in self._sessions.items() if s.expires_at < now]:
                del self._sessions[key]
            self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None or session.expires_at < self.clock():
            return None
        return session

    def drop(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)


class LoginRateLimiter:
    """At most ``attempts`` failed logins per client per ``window_s``."""

    def __init__(self, attempts: int = 5, window_s: float = 60.0, clock=time.monotonic):
        self.attempts = attempts
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def blocked(self, client: str) -> bool:
        with self._lock:
            failures = self._failures[client]
            cutoff = self.clock() - self.window_s
            while failures and failures[0] < cutoff:
                failures.popleft()
            return len(failures) >= self.attempts

    def failed(self, client: str) -> None:
        with self._lock:
            self._failures[client].append(self.clock())
