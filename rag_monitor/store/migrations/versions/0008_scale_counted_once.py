"""Production rate: recent records keyed by (trace_id, slot), the insert-once key that counts a
trace once whichever replica stores it first, in time slots the pruning job drops whole; their
document contents stored once per slot by hash (``recent_documents``), the rest compressed.

Revision ID: 0008_scale_counted_once
Revises: 0007_signals
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_scale_counted_once"
down_revision = "0007_signals"
branch_labels = None
depends_on = None

SLOT_S = 600  # the cached rows move to the 10-minute slot of their arrival


def upgrade() -> None:
    # A copy without constraints: PostgreSQL index names are per schema, so the old table (and its
    # pk_recent_records) must be gone before the new one takes the names.
    op.execute("CREATE TABLE recent_records_0007 AS SELECT trace_id, record, added_at FROM recent_records")
    op.drop_table("recent_records")
    op.create_table(
        "recent_records",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("slot", sa.BigInteger, nullable=False),
        sa.Column("record", sa.LargeBinary, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "slot", name="pk_recent_records"),
    )
    op.create_index("ix_recent_records_slot", "recent_records", ["slot"])
    op.create_table(
        "recent_documents",
        sa.Column("content_hash", sa.String(32), nullable=False),
        sa.Column("slot", sa.BigInteger, nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("content_hash", "slot", name="pk_recent_documents"),
    )
    op.create_index("ix_recent_documents_slot", "recent_documents", ["slot"])
    # The JSON rows carry over as uncompressed blobs ("j" + JSON: store/hot.py reads both).
    blob = "convert_to('j' || record, 'UTF8')" if op.get_bind().dialect.name == "postgresql" else "CAST('j' || record AS BLOB)"
    op.execute(
        "INSERT INTO recent_records (trace_id, slot, record, added_at) "
        f"SELECT trace_id, CAST(added_at / {SLOT_S} AS BIGINT) * {SLOT_S}, {blob}, added_at FROM recent_records_0007"
    )
    op.drop_table("recent_records_0007")


def downgrade() -> None:
    # The cache is an hour of late-complaint lookups: the encoded rows are not converted back.
    op.drop_table("recent_documents")
    op.drop_table("recent_records")
    op.create_table(
        "recent_records",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_recent_records"),
    )
    op.create_index("ix_recent_records_added_at", "recent_records", ["added_at"])
