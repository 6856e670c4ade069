"""Numbers you can trust: durable pending spans, idempotent feedback, fenced leases, whole shadow pairs.

Revision ID: 0002_semantics
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_semantics"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_spans",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("spans", sa.LargeBinary, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_pending_spans"),
    )
    op.create_index("ix_pending_spans_trace_id", "pending_spans", ["trace_id"])
    op.create_index("ix_pending_spans_added_at", "pending_spans", ["added_at"])

    with op.batch_alter_table("review_items") as batch:
        batch.add_column(sa.Column("pair_record", sa.Text, nullable=True))
        batch.add_column(sa.Column("counted_weight", sa.Double, nullable=False, server_default="0"))
    op.execute("UPDATE review_items SET counted_weight = weight")
    op.create_index("ix_review_items_pair_trace_id", "review_items", ["pair_trace_id"])

    with op.batch_alter_table("feedback") as batch:
        batch.add_column(sa.Column("key", sa.String(64), nullable=True))
        batch.create_unique_constraint("uq_feedback_trace_id_key", ["trace_id", "key"])

    with op.batch_alter_table("locks") as batch:
        batch.add_column(sa.Column("token", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("locks") as batch:
        batch.drop_column("token")
    with op.batch_alter_table("feedback") as batch:
        batch.drop_constraint("uq_feedback_trace_id_key", type_="unique")
        batch.drop_column("key")
    op.drop_index("ix_review_items_pair_trace_id", "review_items")
    with op.batch_alter_table("review_items") as batch:
        batch.drop_column("counted_weight")
        batch.drop_column("pair_record")
    op.drop_table("pending_spans")
