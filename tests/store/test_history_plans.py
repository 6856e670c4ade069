"""No statement on a timer or a scrape scans history: every statement the scheduler's jobs
(scoring, store pruning, claim expiry) and the scrape collectors (queue depth, latest drift run,
the reviewed items' incremental refresh) send is captured on a real PostgreSQL holding a million
rows in each history table (and a million scored-only items of the nested score sample, which
stay queued for good), and its plan must neither Seq Scan a history table nor read a share of one
in proportion to its size (no plan node expects more rows of it than five times the 2,000 items
of work waiting)."""

from __future__ import annotations

import re
import time

import pytest
import sqlalchemy as sa

from rag_monitor.review.reviewed_cache import OVERLAP_S
from rag_monitor.store import open_store

pytestmark = pytest.mark.integration

ROWS = 1_000_000
OPEN = 1_500  # items still waiting for review: the work, against a million of history
SCORE_OPEN = 500  # scored-only items (nested score sample) still to score, after a million scored
WORK = OPEN + SCORE_OPEN  # the scorer's backlog: 2,000 items
HISTORY = ("review_items", "reviews", "scores", "feedback", "drift_runs")
SCORER = "lexical-v1"


def fill(conn, now: float) -> None:
    """A million rows per history table, all within retention (nothing to prune: the plans are
    what every run of the jobs costs)."""
    p = {"n": ROWS, "open": OPEN, "score_open": SCORE_OPEN, "now": now}
    # The scored-only queue first (ids 1..n, older, all scored; they stay 'queued' for good),
    # then the review queue (ids n+1..2n, the last OPEN waiting), then SCORE_OPEN scored-only
    # items still to score: the order the scorer meets them in.
    scored_only = (
        "INSERT INTO review_items (queue, trace_id, stratum, inclusion_prob, weight, record, counted_weight, state,"
        " created_at, score_prob) SELECT 'score', 's' || lpad(to_hex(g), 31, '0'), 'base', 0.1, 10, '{{}}', 0,"
        " 'queued', {created}, 0.1 FROM generate_series({first}, {last}) g")
    conn.execute(sa.text(scored_only.format(created=":now - 2 * :n + g", first=1, last=":n")), p)
    conn.execute(sa.text(
        "INSERT INTO review_items (queue, trace_id, stratum, inclusion_prob, weight, record, counted_weight, state,"
        " created_at, reviewed_at) SELECT 'default', lpad(to_hex(g), 32, '0'), 'base', 0.5, 2, '{}', 2,"
        " CASE WHEN g > :n - :open THEN 'queued' ELSE 'reviewed' END, :now - (:n - g),"
        " CASE WHEN g > :n - :open THEN NULL ELSE :now - (:n - g) + 1 END FROM generate_series(1, :n) g"), p)
    conn.execute(sa.text(scored_only.format(created=":now", first=":n + 1", last=":n + :score_open")), p)
    conn.execute(sa.text("INSERT INTO reviews (item_id, reviewer, labels, created_at)"
                         " SELECT :n + g, 'r', '{}', :now - (:n - g) + 1 FROM generate_series(1, :n - :open) g"), p)
    conn.execute(sa.text("INSERT INTO review_counts (queue, reviewed) VALUES ('default', :n - :open)"), p)
    conn.execute(sa.text("INSERT INTO scores (trace_id, scorer, score, scorer_version, computed_at)"
                         f" SELECT lpad(to_hex(g), 32, '0'), '{SCORER}', 0.9, '1', :now - (:n - g)"
                         " FROM generate_series(1, :n - :open) g"), p)
    conn.execute(sa.text("INSERT INTO scores (trace_id, scorer, score, scorer_version, computed_at)"
                         f" SELECT 's' || lpad(to_hex(g), 31, '0'), '{SCORER}', 0.9, '1', :now - 2 * :n + g"
                         " FROM generate_series(1, :n) g"), p)
    conn.execute(sa.text("INSERT INTO feedback (trace_id, kind, time, key) SELECT lpad(to_hex(g), 32, '0'),"
                         " 'thumbs_up', :now - (:n - g), to_hex(g) FROM generate_series(1, :n) g"), p)
    conn.execute(sa.text(
        "INSERT INTO drift_runs (profile, scheduled_for, holder, attempts, lease_expires_at, started_at, finished_at,"
        " status, result) SELECT 'p' || (g % 10), :now - g, 'h', 1, :now, :now - g, :now - g, 'ok',"
        " CASE WHEN g % 100 = 0 THEN '{\"status\": \"done\", \"log_evidence\": 1}' ELSE '{\"status\": \"waiting\"}' END"
        " FROM generate_series(1, :n) g"), p)
    for table in HISTORY:
        conn.execute(sa.text(f"ANALYZE {table}"))


@pytest.mark.timeout(1200)  # loads a million history rows per table: minutes on a busy machine
def test_no_job_or_scrape_statement_scans_history(postgres_url):
    from rag_monitor.agent.drift.export import latest_tested

    store = open_store(postgres_url)
    now = time.time()
    engine = store._db.engine
    try:
        with engine.begin() as conn:
            fill(conn, now)
            # Late feedback on a hundred reviewed items, after the million (what the review cache reads).
            conn.execute(sa.text("INSERT INTO feedback (trace_id, kind, time, key) SELECT lpad(to_hex(g), 32, '0'),"
                                 " 'thumbs_down', :now, 'late' || g FROM generate_series(1, 100) g"), {"now": now})
        # The scorer's first batch after an upgrade walks the history once to place its mark.
        assert len(store.scores.unscored_items(SCORER, limit=10)) == 10

        statements: list[tuple[str, object]] = []

        def capture(conn, cursor, statement, parameters, context, executemany):
            statements.append((statement, parameters))

        sa.event.listen(engine, "before_cursor_execute", capture)
        try:
            # The scoring job, the scrape collectors, the store_pruning and expiry jobs.
            batch = store.scores.unscored_items(SCORER, limit=100)
            assert store.scores.backlog(SCORER) == WORK
            # Once a batch is scored, the backlog is what was queued after it (the scoring job's gauge).
            assert store.scores.queued_after(max(item.id for item in batch)) == WORK - len(batch)
            depth = store.queue.depth()
            assert depth == {"queued": OPEN, "claimed": 0, "reviewed": ROWS - OPEN}
            store.queue.release_expired_claims()

            class Profile:
                name = "p0"

            assert latest_tested(store, Profile()) is not None
            assert store.retention.prune(now=now) == {"review_items": 0, "scores": 0, "feedback": 0, "drift_runs": 0}
            store.recent.prune(now=now)
            store.ingest.prune_pending(now - 3600)
            # The review collectors' incremental refresh (``ReviewedCache``): the reviews stored
            # since the newest one less the overlap, the reviewed items of the latest feedback.
            newest_review = now - OPEN + 1
            assert len(store.queue.reviewed(since=newest_review - OVERLAP_S)) == OVERLAP_S + 1
            changed, newest = store.queue.reviewed_changed(ROWS)  # the late feedback on 100 reviewed items
            assert newest == ROWS + 100 and len(changed) == 100
        finally:
            sa.event.remove(engine, "before_cursor_execute", capture)

        full_scan = {}
        with engine.connect() as conn:
            for table in HISTORY:
                full_scan[table] = _top_cost(conn.exec_driver_sql(f"EXPLAIN SELECT * FROM {table}").scalars().all())
            checked = 0
            for statement, parameters in statements:
                if not re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT|WITH)\b", statement, re.I) or "pg_" in statement:
                    continue
                plan = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).scalars().all()
                text = "\n".join(plan)
                scanned = [t for t in HISTORY if re.search(rf"Seq Scan on {t}\b", text)]
                assert not scanned, f"{statement}\n{text}"
                # Nor an index read of a large share of one: no node on a history table may expect
                # more rows than five times the work waiting (1% of the history here).
                for line in plan:
                    if any(re.search(rf" on {t}\b", line) for t in HISTORY):
                        rows = int(re.search(r"rows=(\d+)", line).group(1))
                        assert rows <= 5 * WORK, f"{statement}\n{text}"
                # And cheaper than a full scan of any history table it reads (the scorer's anti-join
                # probes 2,000 items against two million scores: dearer than a scan of the
                # narrow reviews table it never reads, far below a scan of its own tables).
                read = [t for t in HISTORY if re.search(rf" on {t}\b", text)] or list(HISTORY)
                assert _top_cost(plan) < min(full_scan[t] for t in read), f"{statement}\n{text}"
                checked += 1
        assert checked >= 10, statements
    finally:
        store.close()


def _top_cost(plan: list[str]) -> float:
    return float(re.search(r"cost=[\d.]+\.\.([\d.]+)", plan[0]).group(1))
