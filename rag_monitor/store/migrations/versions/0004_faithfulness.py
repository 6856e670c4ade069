"""Scores keep the threshold their verdict was taken at and the per-claim verdicts.

Revision ID: 0004_faithfulness
Revises: 0002_semantics
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_faithfulness"
down_revision = "0003_review"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scores") as batch:
        batch.add_column(sa.Column("threshold", sa.Double, nullable=True))
        batch.add_column(sa.Column("claims", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scores") as batch:
        batch.drop_column("claims")
        batch.drop_column("threshold")
