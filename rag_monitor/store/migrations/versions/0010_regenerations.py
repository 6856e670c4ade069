"""Regenerations counted once: session windows name their query (trace id, labels); claimed regenerated queries.

Revision ID: 0010_regenerations
Revises: 0009_score_sample
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_regenerations"
down_revision = "0009_score_sample"
branch_labels = None
depends_on = None
# Not additive: session_windows.trace_id is NOT NULL with no default, so an older replica's
# session-window insert fails against this schema.
additive = False


def upgrade() -> None:
    # Rows written before this revision keep an empty trace id: their regenerations still count
    # (as re-asks), they are just never claimed by trace (``claim_in`` skips empty ids).
    with op.batch_alter_table("session_windows") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32), nullable=False, server_default=""))
        batch.add_column(sa.Column("labels", sa.Text, nullable=False, server_default="[]"))
    with op.batch_alter_table("session_windows") as batch:
        batch.alter_column("trace_id", server_default=None)
        batch.alter_column("labels", server_default=None)
    op.create_table(
        "regenerated_queries",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("claimed_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_regenerated_queries"),
    )
    op.create_index("ix_regenerated_queries_claimed_at", "regenerated_queries", ["claimed_at"])


def downgrade() -> None:
    op.drop_index("ix_regenerated_queries_claimed_at", table_name="regenerated_queries")
    op.drop_table("regenerated_queries")
    with op.batch_alter_table("session_windows") as batch:
        batch.drop_column("labels")
        batch.drop_column("trace_id")
