"""The recent-records cache on PostgreSQL: one partition per time slot, created ahead of the
writes and dropped whole when it expires (``store/partitions.py``), never deleted row by row."""

from __future__ import annotations

import sqlalchemy as sa

from rag_monitor.store import open_store
from rag_monitor.store.partitions import partitions_of
from tests.store.conftest import make_record

NOW = 1_800_000_000.0  # slots of 600 s (ttl one hour)


def _rows_by_partition(store) -> dict[str, int]:
    with store._db.read() as conn:
        names = sorted(partitions_of(conn))
        return {name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar_one() for name in names}


def _at(i: int, seconds: float):
    record = make_record(i)
    record.start_ns = int(seconds * 1e9)
    return record


def test_slots_are_partitions_created_ahead_and_dropped_whole(postgres_url):
    store = open_store(postgres_url)
    try:
        store.recent.prepare(now=NOW)
        before = _rows_by_partition(store)
        # The current slot and the ones ahead exist before anything is written, for both tables.
        slot = int(NOW) // 600 * 600
        for table in ("recent_records", "recent_documents"):
            assert f"{table}_p{slot}_{slot + 600}" in before
            assert f"{table}_p{slot + 1200}_{slot + 1800}" in before
        assert store.recent.put([_at(i, NOW + i) for i in range(1, 6)], now=NOW + 10) == 5
        assert store.recent.put([_at(i, NOW + 900) for i in range(6, 9)], now=NOW + 900) == 3
        rows = _rows_by_partition(store)
        assert rows[f"recent_records_p{slot}_{slot + 600}"] == 5
        assert rows[f"recent_records_p{slot + 600}_{slot + 1200}"] == 3
        assert rows["recent_records_default"] == 0  # nothing fell outside the prepared slots
        # Insert-only and dropped whole: no autovacuum on a slot partition (nor its TOAST table),
        # and rows inline up to a page; the default partition, deleted from, keeps autovacuum.
        with store._db.read() as conn:
            options = dict(conn.execute(sa.text(
                "SELECT c.relname, coalesce(c.reloptions, '{}') || coalesce(t.reloptions, '{}') FROM pg_class c "
                "LEFT JOIN pg_class t ON t.oid = c.reltoastrelid WHERE c.relname IN (:slot, :default)"),
                {"slot": f"recent_records_p{slot}_{slot + 600}", "default": "recent_records_default"}).all())
        assert sorted(options[f"recent_records_p{slot}_{slot + 600}"]) == [
            "autovacuum_enabled=false", "autovacuum_enabled=false", "toast_tuple_target=8160"]
        assert options["recent_records_default"] == []

        # An hour and a slot later the first slot has expired: its partitions go, the second stays.
        later = NOW + 3600 + 600 + 1
        assert store.recent.prune(now=later) == 5
        after = _rows_by_partition(store)
        assert f"recent_records_p{slot}_{slot + 600}" not in after
        assert f"recent_documents_p{slot}_{slot + 600}" not in after
        assert after[f"recent_records_p{slot + 600}_{slot + 1200}"] == 3
        assert store.recent.get(_at(6, 0).trace_id) is not None
        # The pruning run prepared the slots ahead of its own time too.
        ahead = int(later) // 600 * 600 + 1200
        assert f"recent_records_p{ahead}_{ahead + 600}" in after
    finally:
        store.close()


def test_rows_without_a_slot_partition_wait_in_the_default_one_and_expire_from_it(postgres_url):
    store = open_store(postgres_url)
    try:
        # No partition prepared for this time (the job has not run yet): the default partition holds it.
        assert store.recent.put([_at(1, NOW)], now=NOW) == 1
        assert _rows_by_partition(store)["recent_records_default"] == 1
        # Insert-once still holds across the default partition.
        assert store.recent.put([_at(1, NOW)], now=NOW + 5) == 0
        # The slot's own partition cannot be made while the default holds its rows: skipped, no error.
        store.recent.prepare(now=NOW)
        assert store.recent.get(_at(1, 0).trace_id) is not None
        assert store.recent.prune(now=NOW + 3600 + 1200) == 1
        assert _rows_by_partition(store)["recent_records_default"] == 0
        assert store.recent.count() == 0
    finally:
        store.close()


def test_two_replicas_prepare_the_same_slots_without_error(postgres_url):
    replicas = [open_store(postgres_url), open_store(postgres_url, migrate=False)]
    try:
        for store in replicas:
            store.recent.prepare(now=NOW)
        names = _rows_by_partition(replicas[0])
        slot = int(NOW) // 600 * 600
        assert sum(name.startswith(f"recent_records_p{slot}_") for name in names) == 1
    finally:
        for store in replicas:
            store.close()
