"""Review workflow: assignment, step-one drafts, double review, skips, sessions, login throttle.

Revision ID: 0003_review
Revises: 0002_semantics
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_review"
down_revision = "0002_semantics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("review_items") as batch:
        batch.add_column(sa.Column("assigned_to", sa.String(200), nullable=True))
        batch.add_column(sa.Column("draft", sa.Text, nullable=True))
    op.create_index("ix_review_items_assigned_to", "review_items", ["assigned_to"])

    # One review per item becomes one per (item, reviewer): a share is reviewed twice.
    with op.batch_alter_table("reviews") as batch:
        batch.drop_constraint("uq_reviews_item_id", type_="unique")
        batch.create_unique_constraint("uq_reviews_item_id_reviewer", ["item_id", "reviewer"])
    op.create_index("ix_reviews_item_id", "reviews", ["item_id"])

    op.create_table(
        "review_skips",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("item_id", sa.Integer, nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_review_skips"),
        sa.UniqueConstraint("item_id", "reviewer", name="uq_review_skips_item_id_reviewer"),
        sa.ForeignKeyConstraint(
            ["item_id"], ["review_items.id"], name="fk_review_skips_item_id_review_items", ondelete="CASCADE"
        ),
    )
    op.create_table(
        "review_sessions",
        sa.Column("id_sha256", sa.String(64), nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("csrf_token", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id_sha256", name="pk_review_sessions"),
    )
    op.create_index("ix_review_sessions_expires_at", "review_sessions", ["expires_at"])
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(300), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_login_failures"),
    )
    op.create_index("ix_login_failures_at", "login_failures", ["at"])
    op.create_index("ix_login_failures_key_at", "login_failures", ["key", "at"])


def downgrade() -> None:
    op.drop_table("login_failures")
    op.drop_table("review_sessions")
    op.drop_table("review_skips")
    op.drop_index("ix_reviews_item_id", "reviews")
    with op.batch_alter_table("reviews") as batch:
        batch.drop_constraint("uq_reviews_item_id_reviewer", type_="unique")
        batch.create_unique_constraint("uq_reviews_item_id", ["item_id"])
    op.drop_index("ix_review_items_assigned_to", "review_items")
    with op.batch_alter_table("review_items") as batch:
        batch.drop_column("draft")
        batch.drop_column("assigned_to")
