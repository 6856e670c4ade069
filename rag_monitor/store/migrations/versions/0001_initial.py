"""Initial schema: recent records, review queue, reviews, feedback, scores, drift, locks, releases.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TRACE_ID = sa.String(32)


def upgrade() -> None:
    op.create_table(
        "recent_records",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_recent_records"),
    )
    op.create_index("ix_recent_records_added_at", "recent_records", ["added_at"])

    op.create_table(
        "review_items",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("stratum", sa.String(64), nullable=False),
        sa.Column("inclusion_prob", sa.Double, nullable=False),
        sa.Column("weight", sa.Double, nullable=False),
        sa.Column("tenant", sa.String(200), nullable=True),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("pair_trace_id", TRACE_ID, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("claimed_by", sa.String(200), nullable=True),
        sa.Column("claim_expires_at", sa.Double, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("reviewed_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_review_items"),
        sa.UniqueConstraint("queue", "trace_id", name="uq_review_items_queue_trace_id"),
        sa.CheckConstraint("state IN ('queued', 'claimed', 'reviewed')", name="ck_review_items_state"),
        sa.CheckConstraint("inclusion_prob > 0 AND inclusion_prob <= 1", name="ck_review_items_inclusion_prob"),
    )
    op.create_index("ix_review_items_state_id", "review_items", ["state", "id"])
    op.create_index("ix_review_items_trace_id", "review_items", ["trace_id"])
    op.create_index("ix_review_items_tenant", "review_items", ["tenant"])

    op.create_table(
        "reviews",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("item_id", sa.Integer, nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reviews"),
        sa.UniqueConstraint("item_id", name="uq_reviews_item_id"),
        sa.ForeignKeyConstraint(
            ["item_id"], ["review_items.id"], name="fk_reviews_item_id_review_items", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_reviews_created_at", "reviews", ["created_at"])

    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("value", sa.Text, nullable=True),
        sa.Column("time", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feedback"),
    )
    op.create_index("ix_feedback_trace_id", "feedback", ["trace_id"])
    op.create_index("ix_feedback_time", "feedback", ["time"])

    op.create_table(
        "scores",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("scorer", sa.String(100), nullable=False),
        sa.Column("score", sa.Double, nullable=True),
        sa.Column("label", sa.String(64), nullable=True),
        sa.Column("scorer_version", sa.String(100), nullable=False),
        sa.Column("computed_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "scorer", name="pk_scores"),
    )

    op.create_table(
        "reservoirs",
        sa.Column("signal", sa.String(100), nullable=False),
        sa.Column("window_name", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("source", sa.Text, nullable=True),
        sa.Column("kind", sa.String(16), nullable=True),
        sa.Column("dim", sa.Integer, nullable=True),
        sa.Column("seen", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("signal", "window_name", name="pk_reservoirs"),
        sa.CheckConstraint("window_name IN ('reference', 'current')", name="ck_reservoirs_window"),
    )

    op.create_table(
        "reservoir_items",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("signal", sa.String(100), nullable=False),
        sa.Column("window_name", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("slot", sa.Integer, nullable=True),
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=True),
        sa.Column("value", sa.Text, nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reservoir_items"),
        sa.UniqueConstraint(
            "signal", "window_name", "version", "slot", name="uq_reservoir_items_signal_window_name_version_slot"
        ),
    )
    op.create_index(
        "ix_reservoir_items_signal_window_name_added_at", "reservoir_items", ["signal", "window_name", "added_at"]
    )

    op.create_table(
        "drift_runs",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
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
        sa.PrimaryKeyConstraint("id", name="pk_drift_runs"),
        sa.UniqueConstraint("profile", "scheduled_for", name="uq_drift_runs_profile_scheduled_for"),
        sa.CheckConstraint("status IN ('running', 'ok', 'failed')", name="ck_drift_runs_status"),
    )

    op.create_table(
        "locks",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_locks"),
    )

    op.create_table(
        "releases",
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("release", sa.String(200), nullable=False),
        sa.Column("first_seen", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("service", "release", name="pk_releases"),
    )


def downgrade() -> None:
    for table in (
        "releases", "locks", "drift_runs", "reservoir_items", "reservoirs",
        "scores", "feedback", "reviews", "review_items", "recent_records",
    ):
        op.drop_table(table)
