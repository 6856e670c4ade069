"""Reviewer authentication: hashed tokens, store-backed sessions, CSRF and login throttling.

Reviewers are configured as ``name:role:sha256hex[:tenant|tenant[:group|group]]`` entries
(``review_tokens`` setting, comma-separated, or a file with one entry per line). The agent
never stores or logs a token: only its SHA-256. Roles: ``reviewer`` labels items; ``admin``
also reads queue stats, assigns and exports. A tenant list scopes what a reviewer may see;
groups receive items assigned to ``group:<name>``.

Sessions and failed logins live in the store, so every replica behind a load balancer
knows them. Failed logins are throttled per account and per client address (the real one,
see ``proxy.py``): a guesser from one address, or many guessers at one account, wait; the
other reviewers behind the same ingress do not.

Usage::

    reviewers = Reviewers.parse("alice:reviewer:" + hash_token("s3cret"))
    reviewers.authenticate("alice", "s3cret")     # Reviewer(name='alice', ...) or None
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
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
    groups: frozenset[str] = frozenset()

    def can(self, role: str) -> bool:
        return self.role == "admin" or self.role == role

    def sees_tenant(self, tenant: str | None) -> bool:
        return self.tenants is None or tenant in self.tenants


class Reviewers:
    def __init__(self, reviewers: list[Reviewer]):
        self._by_name = {r.name: r for r in reviewers}

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self):
        return iter(self._by_name.values())

    def get(self, name: str) -> Reviewer | None:
        return self._by_name.get(name)

    @classmethod
    def parse(cls, spec: str) -> Reviewers:
        """From ``review_tokens``: entries separated by commas or newlines, or a file path."""
        if spec and "\n" not in spec and ":" not in spec and Path(spec).is_file():
            spec = Path(spec).read_text()
        reviewers: list[Reviewer] = []
        for n, entry in enumerate(e.strip() for e in spec.replace("\n", ",").split(",")):
            if not entry or entry.startswith("#"):
                continue
            parts = entry.split(":")
            # The digest is never quoted back: the entry may hold a token pasted by mistake.
            if len(parts) not in (3, 4, 5):
                raise ValueError(f"review token entry {n + 1}: expected name:role:sha256[:tenants[:groups]], got {len(parts)} fields")
            name, role, digest = parts[:3]
            if not name:
                raise ValueError(f"review token entry {n + 1}: the name is empty")
            if role not in ROLES:
                raise ValueError(f"review token entry {n + 1} ({name}): role must be one of {ROLES}, got {role!r}")
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise ValueError(f"review token entry {n + 1} ({name}): the token must be given as its SHA-256 hex digest")
            if any(r.name == name for r in reviewers):
                raise ValueError(f"review token entry {n + 1}: the name {name!r} is configured twice")
            tenants = frozenset(t for t in parts[3].split("|") if t) if len(parts) >= 4 and parts[3] else None
            groups = frozenset(g for g in parts[4].split("|") if g) if len(parts) == 5 else frozenset()
            reviewers.append(Reviewer(name, role, digest.lower(), tenants, groups))
        return cls(reviewers)

    def authenticate(self, name: str, token: str) -> Reviewer | None:
        """The reviewer whose name and token both match; constant time in the token."""
        reviewer = self._by_name.get(name)
        expected = reviewer.token_sha256 if reviewer else "0" * 64
        matches = hmac.compare_digest(expected, hash_token(token))
        return reviewer if reviewer is not None and matches else None


def new_session_id() -> tuple[str, str]:
    """``(cookie value, its SHA-256)``: the store keeps only the digest."""
    session_id = secrets.token_urlsafe(32)
    return session_id, hash_token(session_id)


def csrf_matches(sent: str | None, expected: str) -> bool:
    return hmac.compare_digest((sent or "").encode(), expected.encode())


@dataclass(frozen=True)
class LoginThrottle:
    """At most ``per_client`` failed logins per client address and ``per_account`` per account
    within ``window_s``; counted in the store, so every replica agrees."""

    store: object
    per_client: int = 5
    per_account: int = 10
    window_s: float = 60.0

    @staticmethod
    def keys(account: str, client: str) -> tuple[str, str]:
        return f"account:{account}", f"client:{client}"

    def blocked(self, account: str, client: str) -> bool:
        account_key, client_key = self.keys(account, client)
        counts = self.store.login_failures([account_key, client_key], self.window_s)
        return counts[client_key] >= self.per_client or counts[account_key[:300]] >= self.per_account

    def failed(self, account: str, client: str) -> None:
        self.store.record_login_failure(self.keys(account, client), self.window_s)
