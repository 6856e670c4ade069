"""Session windows: each session's last query, shared by replicas for the regeneration detector.

Revision ID: 0005_runtime
Revises: 0004_faithfulness
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_runtime"
down_revision = "0004_faithfulness"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_windows",
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("start_ns", sa.BigInteger, nullable=False),
        sa.Column("words", sa.Text, nullable=False),
        sa.Column("seen_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_session_windows"),
    )
    op.create_index("ix_session_windows_seen_at", "session_windows", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_session_windows_seen_at", table_name="session_windows")
    op.drop_table("session_windows")
