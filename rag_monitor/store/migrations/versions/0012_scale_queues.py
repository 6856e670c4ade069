"""Production rate: work queues with indexed state, and indexes for history retention.

The scorer's backlog reads only the items above its low-water mark (``scorer_progress``); the
queue depth counts open items through a partial index and reviewed items from an incrementally
maintained count (``review_counts``); the pruning job deletes history by indexed time columns.

Revision ID: 0012_scale_queues
Revises: 0011_scale_counted_once
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_scale_queues"
down_revision = "0011_scale_counted_once"
branch_labels = None
depends_on = None
# Not additive: the review counts are maintained by the writer; an older replica would not keep
# them.
additive = False

# The review queues' open items (the scored-only queue's stay queued for good: not review work),
# and the scored-only items apart (their retention).
OPEN = sa.text("state <> 'reviewed' AND queue <> 'score'")
SCORED_ONLY = sa.text("queue = 'score'")


def upgrade() -> None:
    op.create_table(
        "scorer_progress",
        sa.Column("scorer", sa.String(100), nullable=False),
        sa.Column("low_water_id", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("scorer", name="pk_scorer_progress"),
    )
    op.create_table(
        "review_counts",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("reviewed", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_review_counts"),
    )
    op.execute("INSERT INTO review_counts (queue, reviewed) "
               "SELECT queue, COUNT(*) FROM review_items WHERE state = 'reviewed' GROUP BY queue")
    op.create_index("ix_review_items_open", "review_items", ["state", "claim_expires_at", "created_at"],
                    postgresql_where=OPEN, sqlite_where=OPEN)
    op.create_index("ix_review_items_scored_only", "review_items", ["created_at"],
                    postgresql_where=SCORED_ONLY, sqlite_where=SCORED_ONLY)
    if op.get_bind().dialect.name == "postgresql":
        # state and queue are correlated (scored-only items are all 'queued'): without joint
        # statistics the planner guesses a quarter of the table for the open review work.
        op.execute("CREATE STATISTICS IF NOT EXISTS st_review_items_state_queue (mcv) ON state, queue FROM review_items")
    op.create_index("ix_review_items_reviewed_at", "review_items", ["reviewed_at"])
    op.create_index("ix_scores_computed_at", "scores", ["computed_at"])
    op.create_index("ix_drift_runs_scheduled_for", "drift_runs", ["scheduled_for"])


def downgrade() -> None:
    op.drop_index("ix_drift_runs_scheduled_for", "drift_runs")
    op.drop_index("ix_scores_computed_at", "scores")
    op.drop_index("ix_review_items_reviewed_at", "review_items")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP STATISTICS IF EXISTS st_review_items_state_queue")
    op.drop_index("ix_review_items_scored_only", "review_items")
    op.drop_index("ix_review_items_open", "review_items")
    op.drop_table("review_counts")
    op.drop_table("scorer_progress")
