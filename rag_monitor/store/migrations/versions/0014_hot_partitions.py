"""Production rate: the recent-records cache in time partitions (PostgreSQL).

``recent_records`` and ``recent_documents`` become tables partitioned by ``RANGE (slot)``, with a
``DEFAULT`` partition; the pruning job creates each slot's partition ahead and drops it whole
once expired (``store/partitions.py``), instead of deleting hundreds of thousands of rows at a
time. The cached rows move to the default partition and expire from there. SQLite keeps its
tables (no partitions; expiry stays an indexed ``DELETE``).

Revision ID: 0014_hot_partitions
Revises: 0013_schema_compat
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_hot_partitions"
down_revision = "0013_schema_compat"
branch_labels = None
depends_on = None
# Additive: the columns, keys and indexes are the ones an older replica reads and writes (its
# inserts go to the slot partitions or the default one, its expiry DELETE still works).
additive = True

TABLES = {
    "recent_records": [
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("slot", sa.BigInteger, nullable=False),
        sa.Column("record", sa.LargeBinary, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
    ],
    "recent_documents": [
        sa.Column("content_hash", sa.String(32), nullable=False),
        sa.Column("slot", sa.BigInteger, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
    ],
}
KEYS = {"recent_records": ["trace_id", "slot"], "recent_documents": ["content_hash", "slot"]}


def _rebuild(partitioned: bool) -> None:
    for table, columns in TABLES.items():
        old = f"{table}_0013"
        # PostgreSQL names indexes per schema: the old ones are renamed before the new take theirs.
        op.rename_table(table, old)
        op.execute(f"ALTER INDEX pk_{table} RENAME TO pk_{old}")
        op.execute(f"ALTER INDEX ix_{table}_slot RENAME TO ix_{old}_slot")
        options = {"postgresql_partition_by": "RANGE (slot)"} if partitioned else {}
        op.create_table(table, *[c.copy() for c in columns],
                        sa.PrimaryKeyConstraint(*KEYS[table], name=f"pk_{table}"), **options)
        op.create_index(f"ix_{table}_slot", table, ["slot"])
        if partitioned:
            op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        names = ", ".join(c.name for c in columns)
        op.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {old}")
        op.drop_table(old)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(partitioned=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(partitioned=False)  # the slot partitions go with the partitioned tables
