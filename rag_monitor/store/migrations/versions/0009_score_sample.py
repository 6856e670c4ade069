"""Nested samples for prediction-powered rates: each sampled trace's scoring probability, and the
scored sample's running sums per scorer, release and variant.

Revision ID: 0009_score_sample
Revises: 0008_login_throttle
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_score_sample"
down_revision = "0008_login_throttle"
branch_labels = None
depends_on = None
additive = True  # a nullable column and a new table


def upgrade() -> None:
    with op.batch_alter_table("review_items") as batch:
        batch.add_column(sa.Column("score_prob", sa.Double, nullable=True))
    op.create_table(
        "score_sums",
        sa.Column("scorer", sa.String(100), nullable=False),
        sa.Column("release", sa.String(200), nullable=False),
        sa.Column("variant", sa.String(64), nullable=False),
        sa.Column("items", sa.BigInteger, nullable=False),
        sa.Column("w", sa.Double, nullable=False),
        sa.Column("wf", sa.Double, nullable=False),
        sa.Column("w2", sa.Double, nullable=False),
        sa.Column("w2f", sa.Double, nullable=False),
        sa.Column("w2f2", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("scorer", "release", "variant", name="pk_score_sums"),
    )


def downgrade() -> None:
    op.drop_table("score_sums")
    # Not batch mode: rebuilding review_items on SQLite would drop it, and ON DELETE CASCADE would
    # take every review with it. SQLite >= 3.35 drops a plain column in place.
    op.drop_column("review_items", "score_prob")
