"""Persistence: recent records, the review queue, scores, drift reservoirs and runs, locks.

SQLite (WAL) by default, PostgreSQL by URL; the schema ships as Alembic migrations inside
the package::

    from rag_monitor.store import open_store, default_sqlite_url
    store = open_store(default_sqlite_url("./data"))
"""

from .coordination import SessionQuery
from .engine import default_sqlite_url
from .errors import ClaimError, NotFound, ReservoirMismatch, SchemaMismatch, StoreError, StoreUnavailable
from .ingest import IngestBatch, IngestOutcome, QueueWrite
from .models import (
    DriftRun, FeedbackEvent, Release, ReservoirInfo, ReservoirItem, ReservoirWindow, Review, ReviewItem, ReviewSession, Score,
)
from .probes import Comparison, ProbeBaseline, ProbeRun
from .store import Store, open_store

__all__ = [
    "ClaimError",
    "Comparison",
    "DriftRun",
    "FeedbackEvent",
    "IngestBatch",
    "IngestOutcome",
    "NotFound",
    "ProbeBaseline",
    "ProbeRun",
    "QueueWrite",
    "Release",
    "ReservoirInfo",
    "ReservoirItem",
    "ReservoirWindow",
    "ReservoirMismatch",
    "Review",
    "ReviewItem",
    "ReviewSession",
    "SchemaMismatch",
    "Score",
    "SessionQuery",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "default_sqlite_url",
    "open_store",
]
