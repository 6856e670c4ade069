"""Production rate: recent records keyed by (trace_id, slot), the insert-once key that counts a
trace once whichever replica stores it first, in time slots the pruning job drops whole; their
document contents stored once per slot by hash (``recent_documents``), the rest compressed.

Revision ID: 0011_scale_counted_once
Revises: 0010_regenerations
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import zlib

import sqlalchemy as sa
import zstandard
from alembic import op

revision = "0011_scale_counted_once"
down_revision = "0010_regenerations"
branch_labels = None
depends_on = None
# Not additive: the recent records move to a new keyed, compressed layout that an older replica
# neither reads nor writes.
additive = False

SLOT_S = 600  # the cached rows move to the 10-minute slot of their arrival


def upgrade() -> None:
    # A copy without constraints: PostgreSQL index names are per schema, so the old table (and its
    # pk_recent_records) must be gone before the new one takes the names.
    op.execute("CREATE TABLE recent_records_0010 AS SELECT trace_id, record, added_at FROM recent_records")
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
        f"SELECT trace_id, CAST(added_at / {SLOT_S} AS BIGINT) * {SLOT_S}, {blob}, added_at FROM recent_records_0010"
    )
    op.drop_table("recent_records_0010")


def downgrade() -> None:
    # Every cached record goes back to its JSON text (documents restored, decompressed), one row
    # per trace as before: where a trace sits in two slots, the later write (the old upsert's).
    bind = op.get_bind()
    old = sa.table("recent_records", sa.column("trace_id"), sa.column("slot"), sa.column("record"), sa.column("added_at"))
    docs = sa.table("recent_documents", sa.column("content_hash"), sa.column("slot"), sa.column("content"))
    contents = {(r.content_hash, r.slot): r.content for r in bind.execute(sa.select(docs))}
    latest: dict[str, tuple[float, str]] = {}
    for row in bind.execute(sa.select(old).order_by(old.c.added_at, old.c.slot)):
        latest[row.trace_id] = (row.added_at, _json_text(bytes(row.record), row.slot, contents))
    op.drop_table("recent_documents")
    op.drop_table("recent_records")
    table = op.create_table(
        "recent_records",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("added_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_recent_records"),
    )
    op.create_index("ix_recent_records_added_at", "recent_records", ["added_at"])
    if latest:
        op.bulk_insert(table, [{"trace_id": t, "record": text, "added_at": at} for t, (at, text) in latest.items()])


def _json_text(blob: bytes, slot: int, contents: dict[tuple[str, int], str]) -> str:
    """A blob of ``store/hot.py`` back to the record's JSON: as this revision wrote it (zlib), or as
    later ones do (zstd: a downgrade runs with the later package installed)."""
    kind = blob[:1]
    if kind not in (b"z", b"s"):  # "j" + the JSON as it was
        return blob[1:].decode()
    text = zlib.decompress(blob[1:]) if kind == b"z" else zstandard.ZstdDecompressor().decompress(blob[1:])
    payload = json.loads(text)
    _restore(payload, slot, contents)
    return json.dumps(payload, separators=(",", ":"))


def _restore(node, slot: int, contents: dict[tuple[str, int], str]) -> None:
    if isinstance(node, dict):
        key = node.pop("content_ref", None)
        if key is not None:
            node["content"] = contents.get((key, slot), "")
        for value in node.values():
            _restore(value, slot, contents)
    elif isinstance(node, list):
        for value in node:
            _restore(value, slot, contents)
