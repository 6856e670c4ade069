"""Reviewer authentication: hashed tokens, store-backed sessions, CSRF and login throttling.

Reviewers are configured as ``name:role:sha256hex[:tenant|tenant[:group|group]]`` entries
(``review_tokens`` setting, comma-separated, or a file with one entry per line). The agent
never stores or logs a token: only its SHA-256. Roles: ``reviewer`` labels items; ``admin``
also reads queue stats, assigns and exports. A tenant list scopes what a reviewer may see;
groups receive items assigned to ``group:<name>``.

Sessions and the login throttle live in the store, so every replica behind a load balancer
knows them. Token checks are throttled per client address (the real one, see ``proxy.py``)
and per account over the addresses its owner has not used (``LoginThrottle``): a guesser
from one address, or many guessers at one account, wait; the account's owner from an address
she logged in from, and the other reviewers behind the same ingress, do not.

Usage::

    reviewers = Reviewers.parse("alice:reviewer:" + hash_token("s3cret"))
    reviewers.authenticate("alice", "s3cret")     # Reviewer(name='alice', ...) or None
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
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
class Attempt:
    """A login attempt the throttle let through: the counters it took, given back on success."""

    account: str
    client: str
    taken: dict


@dataclass(frozen=True)
class LoginThrottle:
    """Token checks per window, decided in the store (every replica agrees, exactly).

    - ``per_client`` failed checks per client address, whatever the accounts;
    - ``per_account`` per account, counted over the addresses its owner has not logged in from
      within ``known_s``: from those, a correct token keeps working while strangers guess it,
      subject only to the address's own limit.

    An attempt takes its counters before the token is checked (``admit``) and gives them back
    when the token was right (``succeeded``): concurrent logins never check more tokens than
    the limits. Keys are SHA-256 digests (the name typed may be a token pasted by mistake).
    """

    store: object
    per_client: int = 5
    per_account: int = 10
    window_s: float = 60.0
    known_s: float = 30 * 86400.0

    @staticmethod
    def key(*parts: str) -> str:
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def admit(self, account: str, client: str, *, now: float | None = None) -> Attempt | None:
        """The attempt, or None: refuse without checking the token."""
        now = time.time() if now is None else now
        limits = {self.key("client", client): self.per_client}
        if not self.store.login_throttle.marked_since(self.key("known", account, client), now - self.known_s):
            limits[self.key("account", account)] = self.per_account
        taken = self.store.login_throttle.take(limits, self.window_s, now=now)
        return None if taken is None else Attempt(account, client, taken)

    def succeeded(self, attempt: Attempt, *, now: float | None = None) -> None:
        self.store.login_throttle.give_back(attempt.taken)
        self.store.login_throttle.mark(self.key("known", attempt.account, attempt.client), now=now)

    def prune(self) -> int:
        """Lapsed counters and old known pairs out of the store (the ``store_pruning`` job)."""
        return self.store.login_throttle.prune(self.window_s, self.known_s)
