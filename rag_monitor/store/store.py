"""``Store``: the one object the agent, the review page and the drift jobs talk to."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from rag_monitor.estimators import ScoredSums
from rag_monitor.record import QueryRecord
from rag_monitor.semconv import FEEDBACK_REGENERATE

from .coordination import CoordinationMethods, Locks, RegeneratedQueries, Releases, SessionWindows
from .documents import IndexDocuments
from .drift import DriftRuns, Reservoirs
from .engine import Database
from .ingest import IngestBatch, IngestOutcome, PendingSpans
from .models import (
    DriftRun, FeedbackEvent, ReservoirInfo, ReservoirItem, ReservoirWindow, Review, ReviewItem, Score, now_s,
)
from .probes import ProbeStates
from .queue import DEFAULT_QUEUE, QUEUED, UPGRADED, ReviewQueue
from .records import FeedbackLog, RecentRecords, Scores
from .retention import DAY_S, Retention
from .sessions import SessionMethods, Sessions
from .throttle import LoginCounters
from .versions import SchemaState, SchemaVersions
from .workflow import ReviewWorkflow



class Store(CoordinationMethods, SessionMethods):
    """Persistence for rag-monitor on SQLite (embedded) or PostgreSQL (several replicas).

    Usage::

        store = Store("sqlite:////var/lib/rag-monitor/store.db")  # or postgresql+psycopg://...
        store.migrate()
        store.enqueue(record, stratum="thumbs_down", inclusion_prob=0.5)    # True; False if queued already
        item = store.claim("reviewer-7", lease_s=600)                     # None when nothing is claimable
        store.submit_review(item.id, "reviewer-7", {"faithful": True})
        store.close()

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
        self._db = Database(url, busy_timeout_s=busy_timeout_s, connect_timeout_s=connect_timeout_s)
        self._retention = Retention(self._db, history_s=history_retention_s, reviews_s=review_retention_s,
                                    batch_rows=prune_batch_rows)
        self._recent = RecentRecords(self._db, recent_ttl_s)
        self._feedback = FeedbackLog(self._db)
        self._scores = Scores(self._db)
        self._queue = ReviewQueue(self._db)
        self._workflow = ReviewWorkflow(self._db)
        self._sessions = Sessions(self._db)
        self._login_counters = LoginCounters(self._db)
        self._reservoirs = Reservoirs(
            self._db,
            reference_capacity=reference_capacity,
            current_capacity=current_capacity,
            current_max_age_s=current_max_age_s,
            rng=random.Random(seed),
        )
        self._runs = DriftRuns(self._db)
        self._locks = Locks(self._db)
        self._releases = Releases(self._db)
        self._regenerated = RegeneratedQueries(self._db)
        self._session_windows = SessionWindows(self._db, self._regenerated)
        self._pending = PendingSpans(self._db)
        self.index_documents = IndexDocuments(self._db)
        """Each document's newest searchable version (index events; the stale-index share)."""
        self._versions = SchemaVersions(self._db)
        self.probes = ProbeStates(self._db)
        """Neighbour-stability probes: baselines, runs, announced index changes (``store/probes.py``)."""

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def url(self) -> str:
        """The database URL with any password hidden."""
        return self._db.display_url

    # --- lifecycle ------------------------------------------------------------------------

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

    # --- recent records ----------------------------------------------------------------------

    def put_recent(self, records: Iterable[QueryRecord | dict[str, Any]], *, now: float | None = None) -> int:
        """Cache a batch of redacted records in one transaction; returns how many were new."""
        return self._recent.put(records, now)

    def get_recent(self, trace_id: str, *, live: bool = False, now: float | None = None) -> QueryRecord | None:
        """A cached record; ``live``: only while within ``recent_ttl_s`` (expired but unpruned: None)."""
        return self._recent.get(trace_id, live=live, now=now)

    def recent_count(self) -> int:
        return self._recent.count()

    def prepare_recent(self, *, now: float | None = None) -> None:
        """Create the coming time slots' partitions of the recent-records cache (PostgreSQL; the
        pruning job does it too): a replica's first writes land in their own slot's partition."""
        self._recent.prepare(now)

    def prune_recent(self, *, now: float | None = None) -> int:
        """Drop cached records older than ``recent_ttl_s``; returns how many."""
        return self._recent.prune(now)

    def prune_history(self, *, now: float | None = None) -> dict[str, int]:
        """Delete history past its retention in bounded batches; rows deleted per table."""
        return self._retention.prune(now_s() if now is None else now)

    # --- one OTLP request, one transaction ---------------------------------------------------

    def persist_ingest(self, batch: IngestBatch, *, now: float | None = None) -> IngestOutcome:
        """Write everything ``batch`` holds in one transaction (see ``store.ingest``)."""
        now = now_s() if now is None else now
        out = IngestOutcome()
        with self._db.write() as conn:
            claimed = self._pending.claim_in(conn, batch.completed)
            out.skipped = batch.claim_required - claimed
            kept = [r for r in batch.records if r.trace_id not in out.skipped]
            self._pending.add_in(conn, batch.pending, now)
            stored = self._recent.put_in(conn, kept, now)
            out.duplicates = {r.trace_id for r in kept} - stored
            out.feedback_added = self._feedback.add_in(conn, [f for f in batch.feedback if f.trace_id not in out.skipped])
            out.regenerated = self._regenerated.claim_in(
                conn, (f.trace_id for f in out.feedback_added if f.kind == FEEDBACK_REGENERATE and f.trace_id in batch.known_queries), now)
            for service, release in sorted(set(batch.releases)):
                out.first_seen[(service, release)] = self._releases.note_in(conn, service, release, now)
            for item in batch.items:
                if item.record.trace_id in out.skipped:
                    continue
                result = self._queue.enqueue_in(
                    conn, item.record, stratum=item.stratum, inclusion_prob=item.inclusion_prob,
                    counted_weight=item.counted_weight, pair_trace_id=item.pair_trace_id,
                    pair_record=item.pair_record, score_prob=item.score_prob, queue=item.queue, now=now,
                )
                (out.queued if result == QUEUED else out.upgraded if result == UPGRADED else []).append(item)
            self._queue.attach_pairs_in(conn, batch.pair_halves)
        return out

    def pending_spans(self, trace_ids: Iterable[str]) -> dict[str, list[bytes]]:
        """Stored spans of traces waiting for their root (any replica's), per trace, oldest first."""
        return self._pending.load(trace_ids)

    def pending_span_rows(self) -> int:
        return self._pending.count()

    def prune_pending(self, older_than: float) -> int:
        """Drop pending spans stored before ``older_than`` (a dead replica's orphans); how many rows."""
        return self._pending.prune(older_than)

    # --- review queue --------------------------------------------------------------------------

    def enqueue(
        self,
        record: QueryRecord | dict[str, Any],
        *,
        stratum: str,
        inclusion_prob: float,
        tenant: str | None = None,
        pair_trace_id: str | None = None,
        pair_record: QueryRecord | dict[str, Any] | None = None,
        counted_weight: float | None = None,
        queue: str = DEFAULT_QUEUE,
        now: float | None = None,
        score_prob: float | None = None,
    ) -> bool:
        """Queue a sampled record (weight ``1 / inclusion_prob``); False if already queued.

        A higher ``inclusion_prob`` for a queued trace updates the item in place (a complaint
        arrived later); see ``ReviewQueue.enqueue``. ``tenant`` defaults to the record's tenant.
        """
        return self._queue.enqueue(
            record, stratum=stratum, inclusion_prob=inclusion_prob, tenant=tenant,
            pair_trace_id=pair_trace_id, pair_record=pair_record, counted_weight=counted_weight,
            queue=queue, now=now, score_prob=score_prob,
        )

    def claim(
        self,
        reviewer: str,
        lease_s: float,
        tenants: Iterable[str] | None = None,
        *,
        groups: Iterable[str] = (),
        queue: str = DEFAULT_QUEUE,
        now: float | None = None,
    ) -> ReviewItem | None:
        """Lease the oldest claimable item (queued, or a lapsed claim) to ``reviewer``.

        Not offered: items assigned to others, items this reviewer reviewed or skipped.
        """
        return self._queue.claim(reviewer, lease_s, tenants, groups=groups, queue=queue, now=now)

    def submit_review(
        self, item_id: int, reviewer: str, labels: dict[str, Any], *, reviews_needed: int = 1,
        now: float | None = None,
    ) -> Review:
        """Store labels; raises ``ClaimError`` unless ``reviewer`` holds a valid claim, ``NotFound``.

        With ``reviews_needed=2`` the item returns to the queue for a second reviewer.
        """
        return self._queue.submit_review(item_id, reviewer, labels, reviews_needed=reviews_needed, now=now)

    def current_claim(self, reviewer: str, *, now: float | None = None) -> ReviewItem | None:
        """The item ``reviewer`` holds a valid claim on, if any."""
        return self._workflow.current_claim(reviewer, now=now)

    def claimable_count(self, reviewer: str, *, tenants: Iterable[str] | None = None, groups: Iterable[str] = (),
                        now: float | None = None) -> int:
        return self._workflow.claimable_count(reviewer, tenants=tenants, groups=groups, now=now)

    def save_draft(self, item_id: int, reviewer: str, draft: dict[str, Any], *, now: float | None = None) -> None:
        """The claim holder's step-one labels (once); ``ClaimError`` otherwise."""
        self._workflow.save_draft(item_id, reviewer, draft, now=now)

    def skip_item(self, item_id: int, reviewer: str, reason: str, *, now: float | None = None) -> None:
        """Pass on a claimed item with a reason; it is not offered to this reviewer again."""
        self._workflow.skip(item_id, reviewer, reason, now=now)

    def assign(self, assignee: str | None, *, count: int | None = None, tenant: str | None = None,
               item_ids: Iterable[int] | None = None) -> int:
        """Assign unreviewed items to a reviewer or ``group:<name>``; returns how many."""
        return self._workflow.assign(assignee, count=count, tenant=tenant, item_ids=item_ids)

    def unassigned_waiting(self, *, limit: int = 500) -> list[ReviewItem]:
        """Queued items nobody is assigned to or has reviewed, oldest first."""
        return self._workflow.unassigned_waiting(limit=limit)

    def all_reviews(self, item_ids: Iterable[int] | None = None) -> dict[int, list[Review]]:
        """Every review (first and second) by item id."""
        return self._workflow.all_reviews(item_ids)

    def reviewer_progress(self, *, now: float | None = None, recent_s: float = 3600.0) -> dict[str, dict[str, int]]:
        return self._workflow.reviewer_progress(now=now, recent_s=recent_s)

    def release_expired_claims(self, now: float | None = None) -> int:
        return self._queue.release_expired_claims(now)

    def get_item(self, item_id: int) -> ReviewItem:
        """The item; ``NotFound`` if there is none."""
        return self._queue.get_item(item_id)

    def item_for_trace(self, trace_id: str, *, queue: str = DEFAULT_QUEUE) -> ReviewItem | None:
        return self._queue.item_for_trace(trace_id, queue=queue)

    def queue_depth(self, *, queue: str | None = None, now: float | None = None) -> dict[str, int]:
        """``{"queued": n, "claimed": n, "reviewed": n}``; lapsed claims count as queued."""
        return self._queue.queue_depth(queue=queue, now=now)

    def reviewed(
        self, since: float | None = None, *, queue: str | None = None, limit: int | None = None
    ) -> list[tuple[ReviewItem, Review]]:
        return self._queue.reviewed(since, queue=queue, limit=limit)

    def reviewed_changed(self, feedback_id: int | None) -> tuple[list[tuple[ReviewItem, Review]], int]:
        """The reviewed items late feedback may have changed after ``feedback_id``, and the newest
        feedback id (None: only that id); see ``ReviewQueue.reviewed_changed``."""
        return self._queue.reviewed_changed(feedback_id)

    def paired_items(self, since: float | None = None) -> list[ReviewItem]:
        return self._queue.paired_items(since)

    # --- feedback and scores -------------------------------------------------------------------

    def add_feedback(self, events: Iterable[FeedbackEvent]) -> int:
        return self._feedback.add(events)

    def feedback_for(self, trace_id: str) -> list[FeedbackEvent]:
        return self._feedback.for_trace(trace_id)

    def feedback_for_traces(self, trace_ids: Iterable[str]) -> dict[str, list[FeedbackEvent]]:
        """Every stored event of each trace (traces without any are absent), oldest first."""
        return self._feedback.for_traces(trace_ids)

    def feedback_since(self, since: float) -> list[FeedbackEvent]:
        return self._feedback.since(since)

    def upsert_scores(self, scores: Iterable[Score], *, now: float | None = None,
                      fence: tuple[str, str, int] | None = None,
                      sums: tuple[str, dict[tuple[str, str], ScoredSums]] | None = None) -> int:
        """Insert or replace (trace, scorer) results: re-scoring never doubles a row.

        ``fence=(lock, holder, token)`` writes only while ``holder`` still holds ``lock`` with that
        fencing token (checked in the write's transaction); returns -1, writing nothing, otherwise.
        ``sums=(scorer, {(release, variant): ScoredSums})`` adds to the scored sample's running
        sums in the same transaction (the scoring loop passes the newly scored items).
        """
        if fence is None and sums is None:
            return self._scores.upsert(scores, now)
        with self._db.write() as conn:
            if fence is not None and not self._locks.fence_in(conn, *fence):
                return -1
            written = self._scores.upsert_in(conn, scores, now)
            if sums is not None:
                self._scores.add_sums_in(conn, *sums)
            return written

    def score_sums(self, scorer: str) -> dict[tuple[str, str], ScoredSums]:
        """(release, variant) -> the scored sample's running sums for ``scorer`` (``estimators.ScoredSums``)."""
        return self._scores.sums(scorer)

    def scores_for(self, trace_id: str) -> dict[str, Score]:
        return self._scores.for_trace(trace_id)

    def scores_for_traces(self, trace_ids: Iterable[str]) -> dict[str, dict[str, Score]]:
        return self._scores.for_traces(trace_ids)

    def scores(self, scorer: str, since: float | None = None) -> list[Score]:
        return self._scores.by_scorer(scorer, since)

    def unscored_items(self, scorer: str, limit: int = 100) -> list[ReviewItem]:
        """The scorer worker's next batch: review items without a score from ``scorer``."""
        return self._scores.unscored_items(scorer, limit)

    def scorer_backlog(self, scorer: str | None = None) -> int:
        """How many review items ``scorer`` (None: every scorer) has not scored yet."""
        return self._scores.backlog(scorer)

    # --- drift ---------------------------------------------------------------------------------

    def reservoir_add(self, signal: str, window: str, items: Iterable[ReservoirItem], *,
                      capacity: int | None = None, max_age_s: float | None = None,
                      now: float | None = None) -> int:
        """Offer items to ``window`` (``reference``: Algorithm R; ``current``: newest N)."""
        return self._reservoirs.add(signal, window, items, capacity=capacity, max_age_s=max_age_s, now=now)

    def reservoir_get(self, signal: str, window: str, *, since: float | None = None) -> tuple[Any, list[str]]:
        """``(np.ndarray (n, dim) | list of values, trace_ids)`` of the window's current version."""
        return self._reservoirs.get(signal, window, since=since)

    def reservoir_window(self, signal: str, window: str, *, since: float | None = None,
                         after: float | None = None) -> ReservoirWindow:
        """The window's values, trace ids, times and version (items at/after ``since``, strictly after ``after``)."""
        return self._reservoirs.window(signal, window, since=since, after=after)

    def reservoir_info(self, signal: str, window: str) -> ReservoirInfo | None:
        return self._reservoirs.info(signal, window)

    def reference_spec(self, signal: str) -> dict[str, Any] | None:
        """The reference definition set from the CLI for ``signal``; None: the profile's default."""
        return self._reservoirs.reference_spec(signal)

    def reset_reference(self, signal: str, model: str | None, source: str | None = None, *,
                        now: float | None = None, keep_current: bool = False) -> int:
        """New reference version for ``signal`` (embedding model changed, or a new reference
        definition when ``keep_current``); returns it."""
        return self._reservoirs.reset_reference(signal, model, source, now=now, keep_current=keep_current)

    def claim_run(self, profile: str, scheduled_for: float, holder: str, *, lease_s: float = 900.0,
                  signal: str | None = None, detector: str | None = None, now: float | None = None) -> bool:
        """True for exactly one replica per (profile, scheduled_for), again once a lease lapses unfinished."""
        return self._runs.claim(profile, scheduled_for, holder, lease_s=lease_s, signal=signal,
                                detector=detector, now=now)

    def finish_run(self, profile: str, scheduled_for: float, holder: str, *, status: str = "ok",
                   result: dict[str, Any] | None = None, now: float | None = None) -> bool:
        """Record a run's outcome; False if ``holder`` lost the run to another replica."""
        return self._runs.finish(profile, scheduled_for, holder, status=status, result=result, now=now)

    def get_run(self, profile: str, scheduled_for: float) -> DriftRun | None:
        return self._runs.get(profile, scheduled_for)

    def drift_runs(self, profile: str | None = None, *, limit: int = 100, tested: bool = False) -> list[DriftRun]:
        """Most recent first; ``tested`` keeps only runs that tested a window."""
        return self._runs.list(profile, limit=limit, tested=tested)


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
