"""Time partitions of the hot tables on PostgreSQL: created ahead, dropped whole.

``recent_records`` and ``recent_documents`` are partitioned by ``RANGE (slot)`` (migration
``0014_hot_partitions``), one partition per time slot, named ``<table>_p<from>_<to>``. The
pruning job creates the partitions of the coming slots ahead of the writes and drops a slot's
partitions once the slot has expired: a ``DROP TABLE`` frees its pages at once, where a
``DELETE`` of a slot (hundreds of thousands of rows at production rate) leaves as many dead
tuples for autovacuum and bloats the WAL. A ``DEFAULT`` partition catches a row whose slot has
no partition yet (the job has not run since start, a clock far ahead); the pruning job deletes
its expired rows, and a slot whose rows sit in it gets no partition of its own.

DDL runs with a short ``lock_timeout``: ``CREATE ... PARTITION OF`` and ``DROP`` take a brief
exclusive lock on the parent, and waiting behind a long transaction would queue every insert
behind the DDL. A statement that times out (or loses a race with another replica) is skipped;
the next run tries again. SQLite has no partitions: there, expiry is the indexed ``DELETE``.

Autovacuum is off on the slot partitions (``autovacuum_enabled = false``, their TOAST tables
too): they are insert-only (a row is never updated, and a slot is dropped, not deleted from), so
a vacuum finds no dead tuple to reclaim, and the insert-triggered vacuums and analyses
(``autovacuum_vacuum_insert_threshold``) of a partition that fills at thousands of rows a second
were CPU spent on tables that live ``ttl + 2`` slots. Their statistics are not needed either: a
read is a primary-key lookup. Wraparound stays covered: PostgreSQL runs its anti-wraparound
vacuum on any table whose oldest transaction id is ``autovacuum_freeze_max_age`` (200 million)
old, autovacuum off or not, and a slot partition is dropped after at most a few million
transactions (an hour and a bit at a hundred group commits a second). The ``DEFAULT`` partitions
keep autovacuum: they are the ones rows are deleted from.

Rows stay inline up to a page (``toast_tuple_target = 8160``): a record is zstd-compressed JSON
already (about 2.8 KB with its embeddings, ``benchmarks/results/hot_state.json``), above the
default 2 KB target, where PostgreSQL would try to compress it again (in vain) and then move it
into the TOAST table in chunks, each with its own index entry: three or four tuples written for one.

    partitions = SlotPartitions(db, slot_s=600)
    partitions.ensure(first_slot=now - 1800, last_slot=now + 1200)
    partitions.drop_through(cutoff)   # {"recent_records": rows, "recent_documents": rows}
"""

from __future__ import annotations

import logging
import re

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .engine import Database

log = logging.getLogger(__name__)

HOT_TABLES = ("recent_records", "recent_documents")
_NAME = re.compile(r"^(%s)_p(\d+)_(\d+)$" % "|".join(HOT_TABLES))
LOCK_TIMEOUT = "2s"
SLOT_STORAGE = "autovacuum_enabled = false, toast.autovacuum_enabled = false, toast_tuple_target = 8160"
"""A slot partition is never vacuumed nor analysed by autovacuum, and keeps its rows inline (see
the module docstring)."""


def default_partition(table: str) -> str:
    return f"{table}_default"


def partitions_of(conn: Connection) -> set[str]:
    """Every partition of a hot table (the default ones included): tables the schema does not declare."""
    rows = conn.execute(sa.text(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = ANY(:tables)"), {"tables": list(HOT_TABLES)})
    return {row[0] for row in rows}


class SlotPartitions:
    def __init__(self, db: Database, slot_s: int):
        if db.is_sqlite:
            raise ValueError("SQLite has no table partitions")
        self._db = db
        self.slot_s = slot_s

    def _slot_partitions(self) -> list[tuple[str, str, int, int]]:
        """(name, table, from, to) of each slot partition."""
        with self._db.read() as conn:
            names = partitions_of(conn)
        found = [(name, m.group(1), int(m.group(2)), int(m.group(3))) for name in names if (m := _NAME.match(name))]
        return sorted(found, key=lambda p: (p[2], p[1]))

    def _ddl(self, statement: str) -> bool:
        """Run one DDL statement in its own transaction; False when it lost a race or timed out."""
        try:
            with self._db.write() as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                conn.exec_driver_sql(statement)
            return True
        except Exception as exc:  # noqa: BLE001 - already there, overlapping, or locked: the next run retries
            log.debug("partition DDL skipped (%s): %s", statement, str(exc).splitlines()[0])
            return False

    def ensure(self, first_slot: int, last_slot: int) -> int:
        """Create the missing partitions of the slots ``first_slot..last_slot``; returns how many."""
        existing = {(table, start) for _, table, start, _ in self._slot_partitions()}
        created = 0
        start = first_slot // self.slot_s * self.slot_s
        while start <= last_slot:
            end = start + self.slot_s
            for table in HOT_TABLES:
                if (table, start) not in existing and self._ddl(
                        f"CREATE TABLE IF NOT EXISTS {table}_p{start}_{end} PARTITION OF {table} "
                        f"FOR VALUES FROM ({start}) TO ({end}) WITH ({SLOT_STORAGE})"):
                    created += 1
            start = end
        return created

    def drop_through(self, cutoff: int) -> dict[str, int]:
        """Drop every slot partition whose slots are all at or before ``cutoff``; rows dropped per table.

        A partition is counted just before it goes (an index-only count of one slot, once per
        slot), so the pruning job can say how many records expired."""
        dropped = dict.fromkeys(HOT_TABLES, 0)
        for name, table, start, end in self._slot_partitions():
            # A slot's rows all carry its start (a multiple of slot_s); a wider partition (made
            # under another ttl) goes once its last possible slot has expired.
            if start > cutoff or end > cutoff + self.slot_s:
                continue
            with self._db.read() as conn:
                rows = conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one()
            if self._ddl(f"DROP TABLE IF EXISTS {name}"):
                dropped[table] += rows
        return dropped
