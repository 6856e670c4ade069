"""Index documents: each document's newest searchable version, from index events (freshness).

Revision ID: 0006_signals
Revises: 0005_runtime
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_signals"
down_revision = "0005_runtime"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "index_documents",
        sa.Column("document_id", sa.String(500), nullable=False),
        sa.Column("committed_at", sa.Double, nullable=False),
        sa.Column("indexed_at", sa.Double, nullable=False),
        sa.Column("source", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("document_id", name="pk_index_documents"),
    )


def downgrade() -> None:
    op.drop_table("index_documents")
