"""Which older rag-monitor can run against this schema: one row per revision a rag-monitor
migrated the store to, naming the oldest revision whose code still runs against it.

A replica one version behind reads this during a rolling upgrade (``store/versions.py``): the
store is newer than it, and it keeps running when every revision in between is additive.

Revision ID: 0013_schema_compat
Revises: 0010_regenerations
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_schema_compat"
down_revision = "0012_scale_queues"
branch_labels = None
depends_on = None
additive = True  # a new table only


def upgrade() -> None:
    op.create_table(
        "schema_compat",
        sa.Column("revision", sa.String(32), nullable=False),
        sa.Column("readable_from", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("revision", name="pk_schema_compat"),
    )


def downgrade() -> None:
    op.drop_table("schema_compat")
