"""The store's tables (SQLAlchemy Core). The Alembic migrations create exactly these.

Timestamps are UTC seconds since the epoch as double-precision floats everywhere; JSON
payloads are text the store serialises itself (same bytes on SQLite and PostgreSQL).
A test compares this metadata with the migrated database, so change both together:
add a new revision under ``migrations/versions/`` for every change here.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TRACE_ID = sa.String(32)
"""32 lowercase hex digits (``QueryRecord.trace_id``)."""

REVIEW_STATES = ("queued", "claimed", "reviewed")
WINDOWS = ("reference", "current")

recent_records = sa.Table(
    "recent_records",
    metadata,
    # Insert-once on (trace_id, slot): the row's first writer counts the query (``store/records.py``).
    # ``slot`` is the start of the time slot the trace's own start time falls in, so every replica
    # that assembles the trace picks the same slot; slots are dropped whole by the pruning job.
    sa.Column("trace_id", TRACE_ID, primary_key=True),
    sa.Column("slot", sa.BigInteger, primary_key=True),
    # Document contents by reference to ``recent_documents``, the rest zstd-compressed JSON (``store/hot.py``).
    sa.Column("record", sa.LargeBinary, nullable=False),
    sa.Column("added_at", sa.Double, nullable=False),
    sa.Index(None, "slot"),
    # One partition per slot on PostgreSQL, dropped whole when it expires (``store/partitions.py``).
    postgresql_partition_by="RANGE (slot)",
)

recent_documents = sa.Table(
    "recent_documents",
    metadata,
    # A document's content once per slot, shared by every record of the slot that retrieved it;
    # dropped with the slot's records.
    sa.Column("content_hash", sa.String(32), primary_key=True),
    sa.Column("slot", sa.BigInteger, primary_key=True),
    sa.Column("content", sa.Text, nullable=False),
    sa.Index(None, "slot"),
    postgresql_partition_by="RANGE (slot)",
)

OPEN_REVIEW_WORK = "state <> 'reviewed' AND queue <> 'score'"
SCORED_ONLY = "queue = 'score'"
"""Partial-index predicates of ``review_items`` (``store.queue.SCORE_QUEUE`` is the scored-only queue)."""

review_items = sa.Table(
    "review_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("trace_id", TRACE_ID, nullable=False),
    sa.Column("stratum", sa.String(64), nullable=False),
    sa.Column("inclusion_prob", sa.Double, nullable=False),
    sa.Column("weight", sa.Double, nullable=False),
    sa.Column("tenant", sa.String(200), nullable=True, index=True),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("pair_trace_id", TRACE_ID, nullable=True, index=True),
    # A sampled shadow pair is kept whole: the production half's record, whatever the recent cache holds.
    sa.Column("pair_record", sa.Text, nullable=True),
    # The weight the agent's weighted counters used (the design at first inclusion; 0 when a later
    # complaint pulled the item in): counters cannot be corrected when ``weight`` changes later.
    sa.Column("counted_weight", sa.Double, nullable=False, server_default="0"),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("claimed_by", sa.String(200), nullable=True),
    sa.Column("claim_expires_at", sa.Double, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("reviewed_at", sa.Double, nullable=True),
    # A reviewer's name or ``group:<name>``; NULL: anyone may claim it (0003_review).
    sa.Column("assigned_to", sa.String(200), nullable=True, index=True),
    # The claim holder's relevance labels (step one of the blind flow), until they submit.
    sa.Column("draft", sa.Text, nullable=True),
    # The probability the trace entered the scored sample (``score_rate``), of which the review
    # sample is a subsample; NULL before 0009 (scored exactly when sampled for review).
    sa.Column("score_prob", sa.Double, nullable=True),
    # Enqueueing the same trace twice (agent crash + OTLP retry) must be a no-op.
    sa.UniqueConstraint("queue", "trace_id"),
    sa.CheckConstraint("state IN ('queued', 'claimed', 'reviewed')", name="state"),
    sa.CheckConstraint("inclusion_prob > 0 AND inclusion_prob <= 1", name="inclusion_prob"),
    sa.Index(None, "state", "id"),
    sa.Index(None, "trace_id"),
    # The open review work only (queued or claimed, not the scored-only queue, whose items stay
    # queued for good): queue depth and unreviewed-item retention read this small index, never the
    # reviewed history. The scored-only items have their own, for retention; the scorer reads
    # them above its low-water mark (``scorer_progress``).
    sa.Index("ix_review_items_open", "state", "claim_expires_at", "created_at",
             postgresql_where=sa.text(OPEN_REVIEW_WORK), sqlite_where=sa.text(OPEN_REVIEW_WORK)),
    sa.Index("ix_review_items_scored_only", "created_at",
             postgresql_where=sa.text(SCORED_ONLY), sqlite_where=sa.text(SCORED_ONLY)),
    sa.Index(None, "reviewed_at"),  # retention of reviewed items (when one is set)
)

reviews = sa.Table(
    "reviews",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("item_id", sa.Integer, sa.ForeignKey("review_items.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("reviewer", sa.String(200), nullable=False),
    sa.Column("labels", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False, index=True),
    # A share of items is reviewed twice, never twice by the same reviewer.
    sa.UniqueConstraint("item_id", "reviewer"),
)

review_skips = sa.Table(
    "review_skips",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("item_id", sa.Integer, sa.ForeignKey("review_items.id", ondelete="CASCADE"), nullable=False),
    sa.Column("reviewer", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.UniqueConstraint("item_id", "reviewer"),
)

review_sessions = sa.Table(
    "review_sessions",
    metadata,
    # Only the SHA-256 of the cookie's session id: a database dump opens no session.
    sa.Column("id_sha256", sa.String(64), primary_key=True),
    sa.Column("reviewer", sa.String(200), nullable=False),
    sa.Column("csrf_token", sa.String(128), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False, index=True),
)

login_failures = sa.Table(
    "login_failures",
    metadata,
    # Written by versions before 0008_login_throttle only: kept for a replica one version behind
    # during a rollout.
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(300), nullable=False),
    sa.Column("at", sa.Double, nullable=False, index=True),
    sa.Index(None, "key", "at"),
)

login_throttle = sa.Table(
    "login_throttle",
    metadata,
    # The SHA-256 of what is counted (an address, an account, a pair): a name typed into the login
    # form may be a token pasted by mistake, and never lands in the database.
    sa.Column("key", sa.String(64), primary_key=True),
    # A counter's fixed window began here; a known pair's last successful login.
    sa.Column("window_start", sa.Double, nullable=False, index=True),
    sa.Column("count", sa.Integer, nullable=False),
)

feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("trace_id", TRACE_ID, nullable=False, index=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    # JSON text: a number or a string, type preserved.
    sa.Column("value", sa.Text, nullable=True),
    sa.Column("time", sa.Double, nullable=False, index=True),
    # Deterministic per event (the feedback span's id): an exporter's retry is a no-op.
    sa.Column("key", sa.String(64), nullable=True),
    sa.UniqueConstraint("trace_id", "key"),
)

scores = sa.Table(
    "scores",
    metadata,
    sa.Column("trace_id", TRACE_ID, primary_key=True),
    sa.Column("scorer", sa.String(100), primary_key=True),
    sa.Column("score", sa.Double, nullable=True),
    sa.Column("label", sa.String(64), nullable=True),
    sa.Column("scorer_version", sa.String(100), nullable=False),
    sa.Column("computed_at", sa.Double, nullable=False),
    # The threshold the label was taken at, and the per-claim verdicts (JSON) where the scorer gives them.
    sa.Column("threshold", sa.Double, nullable=True),
    sa.Column("claims", sa.Text, nullable=True),
    sa.Index(None, "computed_at"),  # retention
)

scorer_progress = sa.Table(
    "scorer_progress",
    metadata,
    sa.Column("scorer", sa.String(100), primary_key=True),
    # Every review item with an id at or below this was scored by ``scorer`` (or is older than the
    # scorer's first batch reached): "what to score next" reads only the items above it.
    sa.Column("low_water_id", sa.BigInteger, nullable=False),
)
"""Each scorer's low-water mark in ``review_items.id``: the backlog costs O(work), not O(history)."""

review_counts = sa.Table(
    "review_counts",
    metadata,
    sa.Column("queue", sa.String(64), primary_key=True),
    # Incremented by the transaction that makes an item ``reviewed``, decremented by retention.
    sa.Column("reviewed", sa.BigInteger, nullable=False),
)
"""Reviewed items per queue, maintained incrementally: the queue depth never counts history."""

pending_spans = sa.Table(
    "pending_spans",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("trace_id", TRACE_ID, nullable=False, index=True),
    # The redacted spans of one request for one trace still waiting for its root (OTLP protobuf).
    sa.Column("spans", sa.LargeBinary, nullable=False),
    sa.Column("added_at", sa.Double, nullable=False, index=True),
)
"""Spans acknowledged while their trace waits for its root: durable, and visible to every replica."""

reservoirs = sa.Table(
    "reservoirs",
    metadata,
    sa.Column("signal", sa.String(100), primary_key=True),
    sa.Column("window_name", sa.String(16), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("model", sa.String(200), nullable=True),
    sa.Column("source", sa.Text, nullable=True),
    sa.Column("kind", sa.String(16), nullable=True),
    sa.Column("dim", sa.Integer, nullable=True),
    # Algorithm R needs how many items the reservoir has been offered, across restarts.
    sa.Column("seen", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.CheckConstraint("window_name IN ('reference', 'current')", name="window"),
)

reservoir_items = sa.Table(
    "reservoir_items",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("signal", sa.String(100), nullable=False),
    sa.Column("window_name", sa.String(16), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("slot", sa.Integer, nullable=True),
    sa.Column("trace_id", TRACE_ID, nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=True),
    sa.Column("value", sa.Text, nullable=True),
    sa.Column("model", sa.String(200), nullable=True),
    sa.Column("added_at", sa.Double, nullable=False),
    # Reference reservoirs replace by slot (Algorithm R); the current window has no slots.
    sa.UniqueConstraint("signal", "window_name", "version", "slot"),
    sa.Index(None, "signal", "window_name", "added_at"),
)

drift_runs = sa.Table(
    "drift_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("profile", sa.String(200), nullable=False),
    sa.Column("scheduled_for", sa.Double, nullable=False),
    sa.Column("signal", sa.String(100), nullable=True),
    sa.Column("detector", sa.String(100), nullable=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("lease_expires_at", sa.Double, nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("result", sa.Text, nullable=True),
    # Exactly one replica wins each scheduled run.
    sa.UniqueConstraint("profile", "scheduled_for"),
    sa.CheckConstraint("status IN ('running', 'ok', 'failed')", name="status"),
    sa.Index(None, "scheduled_for"),  # retention
)

probe_baselines = sa.Table(
    "probe_baselines",
    metadata,
    # The probe's identity: a hash of its query and k (``agent/probes.py``), so editing a
    # probe's query or k makes a new probe with its own baseline.
    sa.Column("probe_id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("k", sa.Integer, nullable=False),
    sa.Column("baseline_ids", sa.Text, nullable=False),  # JSON list, rank order
    sa.Column("pinned_at", sa.Double, nullable=False),
    sa.Column("pinned_by", sa.String(200), nullable=False),
    # The latest successful comparison (a failed probe leaves these as they were).
    sa.Column("latest_ids", sa.Text, nullable=True),
    sa.Column("run_id", sa.Integer, nullable=True, index=True),
    sa.Column("jaccard", sa.Double, nullable=True),
    sa.Column("rbo", sa.Double, nullable=True),
)
"""Each probe's pinned top-k and its latest comparison with it (shared by replicas)."""

probe_runs = sa.Table(
    "probe_runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("finished_at", sa.Double, nullable=True, index=True),
    sa.Column("probes", sa.Integer, nullable=False, server_default="0"),
    sa.Column("compared", sa.Integer, nullable=False, server_default="0"),
    sa.Column("errors", sa.Integer, nullable=False, server_default="0"),
)

index_changes = sa.Table(
    "index_changes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("announced_at", sa.Double, nullable=False),
    sa.Column("until", sa.Double, nullable=False, index=True),
    sa.Column("note", sa.Text, nullable=False),
)
"""Announced index changes (rebuild, re-chunking, model migration): probe alerts hold off until ``until``."""

locks = sa.Table(
    "locks",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    # Fencing token: incremented on every acquisition; writes under the lease check it.
    sa.Column("token", sa.BigInteger, nullable=False, server_default="0"),
)

releases = sa.Table(
    "releases",
    metadata,
    sa.Column("service", sa.String(200), primary_key=True),
    sa.Column("release", sa.String(200), primary_key=True),
    sa.Column("first_seen", sa.Double, nullable=False),
)

session_windows = sa.Table(
    "session_windows",
    metadata,
    sa.Column("session_id", sa.String(200), primary_key=True),
    sa.Column("start_ns", sa.BigInteger, nullable=False),
    sa.Column("words", sa.Text, nullable=False),
    sa.Column("seen_at", sa.Double, nullable=False, index=True),
    sa.Column("trace_id", TRACE_ID, nullable=False),
    sa.Column("labels", sa.Text, nullable=False),
)
"""The last query of each active session, for the regeneration detector (shared by replicas): its
trace id and metric labels name the query a re-ask regenerates."""

regenerated_queries = sa.Table(
    "regenerated_queries",
    metadata,
    sa.Column("trace_id", TRACE_ID, primary_key=True),
    sa.Column("claimed_at", sa.Double, nullable=False, index=True),
)
"""Queries counted as regenerated: the first of an explicit regenerate and the re-ask it triggers
claims the query (whichever replica sees it), so the two are one regeneration."""

index_documents = sa.Table(
    "index_documents",
    metadata,
    sa.Column("document_id", sa.String(500), primary_key=True),
    sa.Column("committed_at", sa.Double, nullable=False),
    sa.Column("indexed_at", sa.Double, nullable=False),
    sa.Column("source", sa.String(200), nullable=True),
)
"""Each document's newest searchable version (from index events), shared by replicas: a query
served an older version is stale whichever replica assembles it."""

score_sums = sa.Table(
    "score_sums",
    metadata,
    sa.Column("scorer", sa.String(100), primary_key=True),
    sa.Column("release", sa.String(200), primary_key=True),
    sa.Column("variant", sa.String(64), primary_key=True),
    sa.Column("items", sa.BigInteger, nullable=False),
    sa.Column("w", sa.Double, nullable=False),
    sa.Column("wf", sa.Double, nullable=False),
    sa.Column("w2", sa.Double, nullable=False),
    sa.Column("w2f", sa.Double, nullable=False),
    sa.Column("w2f2", sa.Double, nullable=False),
)
"""The scored sample's running sums per scorer, release and variant (``estimators.ScoredSums``):
weights and the scorer's probability of an unsupported answer, added in the fenced score write,
so the prediction-powered rate reads five numbers instead of the sample."""

schema_compat = sa.Table(
    "schema_compat",
    metadata,
    sa.Column("revision", sa.String(32), primary_key=True),
    sa.Column("readable_from", sa.String(32), nullable=False),
)
"""Per schema revision a rag-monitor migrated the store to, the oldest revision whose code runs
against it (every revision after that one is additive): what a replica one version behind checks
during a rolling upgrade (``store/versions.py``)."""
