"""``Store``: owns the database (engine, schema, close) and hands out one repository per workload."""

from __future__ import annotations

import random
from typing import Any

import sqlalchemy as sa

from .coordination import Locks, RegeneratedQueries, Releases, SessionWindows
from .documents import IndexDocuments
from .drift import Reservoirs
from .engine import Database
from .ingest import IngestState
from .probes import ProbeStates
from .queue import ReviewQueue
from .records import FeedbackLog, RecentRecords, Scores
from .retention import DAY_S, Retention
from .runs import DriftRuns
from .sessions import Sessions
from .throttle import LoginCounters
from .versions import SchemaState, SchemaVersions
from .workflow import ReviewWorkflow


class Store:
    """Persistence for rag-monitor on SQLite (embedded) or PostgreSQL (several replicas).

    Usage::

        store = Store("sqlite:////var/lib/rag-monitor/store.db")  # or postgresql+psycopg://...
        store.migrate()
        store.queue.enqueue(record, stratum="thumbs_down", inclusion_prob=0.5)  # False if queued already
        item = store.review.claim("reviewer-7", lease_s=600)                  # None when nothing is claimable
        store.review.submit_review(item.id, "reviewer-7", {"faithful": True})
        store.close()

    The store itself only opens, migrates, checks and closes the database; the work is done
    through its repositories, one per workload, so a component is given (or reads) only the one
    it needs:

    ================= ======================================================================
    ``ingest``        the request path's one transaction; pending spans (``ingest.py``)
    ``recent``        the recent-records cache: the late-thumbs-down index, counted once
    ``queue``         what was sampled for review and scoring; its depth; what was reviewed
    ``review``        the reviewer's side: claims, reviews, drafts, skips, assignment
    ``scores``        scorer results, the scorer's work queue and running sums
    ``feedback``      user feedback events
    ``reservoirs``    drift reference and current windows (``drift.py``)
    ``drift_runs``    scheduled drift runs, once across replicas (``runs.py``)
    ``probes``        neighbour-stability probes (``probes.py``)
    ``index_documents`` each document's newest searchable version (``documents.py``)
    ``locks``         lease locks with fencing tokens (``coordination.py``)
    ``releases``      releases per service by first sighting (``coordination.py``)
    ``session_windows`` each session's last query; regenerated-query claims (``coordination.py``)
    ``review_sessions`` the review page's login sessions (``sessions.py``)
    ``login_throttle`` the login throttle's counters (``throttle.py``)
    ``retention``     history pruned past its retention (``retention.py``)
    ================= ======================================================================

    Every method raises ``StoreUnavailable`` when the database is unreachable or stays
    locked beyond ``busy_timeout_s``. Times are UTC seconds since the epoch; methods that
    depend on the clock take ``now=`` for tests and replays.
    """

    def __init__(
        self,
        url: str,
        *,
        recent_ttl_s: float = 3600.0,
        busy_timeout_s: float = 5.0,
        connect_timeout_s: float = 5.0,
        reference_capacity: int = 2000,
        current_capacity: int = 2000,
        current_max_age_s: float | None = None,
        seed: int | None = None,
        history_retention_s: float | None = 90 * DAY_S,
        review_retention_s: float | None = None,
        prune_batch_rows: int = 5000,
    ):
        db = self._db = Database(url, busy_timeout_s=busy_timeout_s, connect_timeout_s=connect_timeout_s)
        self._versions = SchemaVersions(db)
        self.retention = Retention(db, history_s=history_retention_s, reviews_s=review_retention_s,
                                   batch_rows=prune_batch_rows)
        self.recent = RecentRecords(db, recent_ttl_s)
        self.feedback = FeedbackLog(db)
        self.locks = Locks(db)
        self.scores = Scores(db, self.locks)
        self.queue = ReviewQueue(db)
        self.review = ReviewWorkflow(db)
        self.review_sessions = Sessions(db)
        self.login_throttle = LoginCounters(db)
        self.reservoirs = Reservoirs(
            db,
            reference_capacity=reference_capacity,
            current_capacity=current_capacity,
            current_max_age_s=current_max_age_s,
            rng=random.Random(seed),
        )
        self.drift_runs = DriftRuns(db)
        self.releases = Releases(db)
        regenerated = RegeneratedQueries(db)
        self.session_windows = SessionWindows(db, regenerated)
        self.ingest = IngestState(db, recent=self.recent, feedback=self.feedback, regenerated=regenerated,
                                  releases=self.releases, queue=self.queue)
        self.index_documents = IndexDocuments(db)
        self.probes = ProbeStates(db)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def url(self) -> str:
        """The database URL with any password hidden."""
        return self._db.display_url

    def migrate(self) -> str:
        """Upgrade the schema to the packaged head revision; returns the store's revision afterwards.

        A store newer than this package only by additive revisions is left as it is (a replica behind
        during a rolling upgrade); any other newer store raises ``SchemaMismatch`` (one line: what to run).
        """
        return self._versions.upgrade()

    def schema_state(self) -> SchemaState:
        """The store's schema revision against this package's (``store/versions.py``)."""
        return self._versions.state()

    def require_schema(self) -> None:
        """Raise ``SchemaMismatch`` unless this package runs against the schema (its head, or newer only by
        additive revisions); never migrates."""
        self._versions.require_head()

    def downgrade(self, to: str | None = None) -> tuple[str, ...]:
        """Back one revision (or to ``to``); returns the revisions stamped afterwards."""
        return self._versions.downgrade(to)

    def ping(self) -> None:
        """Raise ``StoreUnavailable`` unless the database answers."""
        with self._db.read() as conn:
            conn.execute(sa.text("SELECT 1"))

    def checkpoint(self) -> tuple[int, int]:
        """SQLite: the write-ahead log into the database (the ``store_checkpoint`` job); see ``Database.checkpoint``."""
        return self._db.checkpoint()

    def close(self) -> None:
        self._db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(url: str, *, migrate: bool = True, **options: Any) -> Store:
    """A ``Store`` with its schema upgraded; ``migrate=False``: checked instead (``SchemaMismatch``).

    Only the agent's start and ``rag-monitor store migrate`` upgrade: commands check.
    """
    store = Store(url, **options)
    try:
        store.migrate() if migrate else store.require_schema()
    except BaseException:
        store.close()
        raise
    return store
