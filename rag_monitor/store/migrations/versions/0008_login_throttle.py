"""Login throttle counters: one row per key, incremented and read in one statement.

The ``login_failures`` log (one row per failure, counted in a separate read) let concurrent
logins all read a count under the limit before any of them wrote; it stays for a replica one
version behind during a rollout and is no longer written by this one.

Revision ID: 0008_login_throttle
Revises: 0007_signals
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_login_throttle"
down_revision = "0007_signals"
branch_labels = None
depends_on = None
additive = True  # a new table; the login_failures log an older replica writes stays


def upgrade() -> None:
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("window_start", sa.Double, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_login_throttle"),
    )
    op.create_index("ix_login_throttle_window_start", "login_throttle", ["window_start"])


def downgrade() -> None:
    op.drop_index("ix_login_throttle_window_start", table_name="login_throttle")
    op.drop_table("login_throttle")
