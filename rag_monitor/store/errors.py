"""Exceptions the store raises. The agent maps ``StoreUnavailable`` to 503 + Retry-After."""

from __future__ import annotations


class StoreError(Exception):
    """Base class for every error the store raises on purpose."""


class StoreUnavailable(StoreError):
    """The database cannot be reached, or stayed locked beyond the busy timeout.

    Transient by nature: the caller should retry later (the receiver answers 503).
    """


class NotFound(StoreError, LookupError):
    """No row with that key."""


class ClaimError(StoreError):
    """A review was submitted without holding a valid claim on the item."""


class ReservoirMismatch(StoreError, ValueError):
    """Items do not fit the reservoir (other embedding model, dimension or kind)."""


class SchemaMismatch(StoreError):
    """The store's schema revision is not this package's: the message says which is newer and what to run."""
