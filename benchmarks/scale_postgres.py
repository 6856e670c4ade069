"""The PostgreSQL side of ``benchmarks/scale.py``: the server's CPU (in all, and by backend type),
its statements (``pg_stat_statements``), write counters, transactions and autovacuum runs.

The benchmark's own backend (the one these reads use) is left out of every figure.
"""

from __future__ import annotations

TOP_STATEMENTS = 20
BACKEND_SAMPLE_S = 0.25


def backend_type(cmdline: list[str]) -> str:
    """A server process's backend type from its title (``postgres: walwriter``, ``postgres:
    autovacuum worker db``, ``postgres: user db 127.0.0.1(port) idle``: a client backend)."""
    title = " ".join(cmdline).removeprefix("postgres: ").strip()
    for kind in ("autovacuum launcher", "autovacuum worker", "background writer", "checkpointer", "walwriter",
                 "logical replication launcher", "archiver", "startup", "walsender", "parallel worker"):
        if title.startswith(kind):
            return kind
    return "client backend"


class Postgres:
    """The cluster's CPU (every server process, exited backends included) and its write counters."""

    def __init__(self, server, database: str):
        import psutil
        import psycopg

        pid = int((server.datadir / "postmaster.pid").read_text().split()[0])
        self.postmaster = psutil.Process(pid)
        self.conn = psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname={database}", autocommit=True)
        self.own_backend = self.conn.info.backend_pid
        """The backend serving ``counters``: its CPU is the benchmark's, not the agents' (sizing the
        hot tables' partition trees every few seconds costs the server more than a few queries)."""

    def cpu_s(self) -> float:
        import psutil

        total = sum(self.postmaster.cpu_times()[:4])  # its own and its reaped children's
        for child in self.postmaster.children(recursive=True):
            if child.pid == self.own_backend:
                continue
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total

    def start_backend_sampling(self) -> None:
        """Sample every server process's CPU by its backend type (what ``pg_stat_activity.backend_type``
        names, read from the process title every ``BACKEND_SAMPLE_S``: short-lived autovacuum
        workers are caught too) until ``backend_cpu`` is called."""
        import threading

        self._seen: dict[int, list] = {}  # pid -> [backend type, cpu at first sight, cpu at last sight]
        self._postmaster0 = self.postmaster.cpu_times()
        self._stop = threading.Event()
        self._sample_backends(first=True)
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)
        self._sampler.start()

    def _sample_loop(self) -> None:
        while not self._stop.wait(BACKEND_SAMPLE_S):
            self._sample_backends()

    def _sample_backends(self, first: bool = False) -> None:
        import psutil

        for child in self.postmaster.children(recursive=True):
            if child.pid == self.own_backend:
                continue
            try:
                cpu = sum(child.cpu_times()[:2])
                seen = self._seen.get(child.pid)
                if seen is None:
                    self._seen[child.pid] = [backend_type(child.cmdline()), cpu if first else 0.0, cpu]
                else:
                    seen[2] = cpu
            except psutil.NoSuchProcess:
                pass

    def backend_cpu(self, queries: int) -> dict[str, float]:
        """Server CPU per query (us) by backend type since ``start_backend_sampling``. A process
        that exited between two samples spent its last moments unseen: the postmaster's reaped
        children's CPU less what the samples saw of them is ``exited (unsampled)``."""
        self._stop.set()
        self._sampler.join()
        self._sample_backends()
        by_type: dict[str, float] = {}
        for kind, cpu0, cpu in self._seen.values():
            by_type[kind] = by_type.get(kind, 0.0) + cpu - cpu0
        live = {c.pid for c in self.postmaster.children(recursive=True)}
        exited_seen = sum(cpu - cpu0 for pid, (_, cpu0, cpu) in self._seen.items() if pid not in live)
        t0, t = self._postmaster0, self.postmaster.cpu_times()
        by_type["postmaster"] = (t.user + t.system) - (t0.user + t0.system)
        by_type["exited (unsampled)"] = max(0.0, (t.children_user + t.children_system)
                                            - (t0.children_user + t0.children_system) - exited_seen)
        n = max(1, queries)
        out = {k: round(v * 1e6 / n, 1) for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])}
        # A backend started in the window is a connection opened (and its caches warmed) then.
        out["client_backends_started"] = sum(1 for kind, cpu0, _ in self._seen.values() if cpu0 == 0.0 and kind == "client backend")
        return out

    def one(self, sql: str):
        return self.conn.execute(sql).fetchone()[0]

    def reset_statements(self) -> None:
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def statements(self, queries: int, top: int = TOP_STATEMENTS) -> dict:
        """Per query, the agents' statements by total execution time (``pg_stat_statements``; the
        benchmark's own sampling statements left out): calls, microseconds, rows."""
        import re

        raw = self.conn.execute(
            "SELECT query, calls, total_exec_time, rows FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query !~* '(pg_stat_|pg_partition_tree|pg_current_wal_lsn|pg_total_relation_size|^SELECT count\\(\\*\\) FROM recent_records$)' "
            "ORDER BY total_exec_time DESC").fetchall()
        # One family per statement whatever its row count: multi-row VALUES and IN lists collapse.
        families: dict[str, list[float]] = {}
        for query, calls, ms, nrows in raw:
            key = re.sub(r"\$\d+(::\w+)?", "$", " ".join(query.split()))
            key = re.sub(r"(\([^()]*\))(, \([^()]*\))+", r"\1, ...", key)
            key = re.sub(r"\(\$(, \$)+\)", "($, ...)", key)
            family = families.setdefault(key, [0, 0.0, 0])
            family[0] += calls
            family[1] += ms
            family[2] += nrows
        rows = sorted(((q, c, ms, r) for q, (c, ms, r) in families.items()), key=lambda r: -r[2])
        n = max(1, queries)
        total_us = sum(r[2] for r in rows) * 1e3
        return {
            "exec_us_per_query": round(total_us / n, 1),
            "calls_per_query": round(sum(r[1] for r in rows) / n, 3),
            "top": [{"statement": q[:240], "calls_per_query": round(calls / n, 3),
                     "exec_us_per_query": round(ms * 1e3 / n, 2), "rows_per_call": round(nrows / max(1, calls), 2)}
                    for q, calls, ms, nrows in rows[:top]],
        }

    def counters(self) -> dict[str, float]:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        return {
            "wal_bytes": float(self.one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")),
            "rows_inserted": float(self.one("SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables")),
            "data_bytes": float(self.one("SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables")),
            "hot_bytes": float(self.one(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM (SELECT relid FROM pg_partition_tree('recent_records') "
                "UNION ALL SELECT relid FROM pg_partition_tree('recent_documents')) t")),
            "hot_partitions": float(self.one(
                "SELECT count(*) FROM pg_partition_tree('recent_records') WHERE isleaf")),
            "live_records": float(self.one("SELECT count(*) FROM recent_records")),
            "transactions": float(self.one(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")),
        }

    def autovacuum_runs(self) -> dict[str, int]:
        """Autovacuum and autoanalyze runs per table so far (dropped partitions' runs go with them)."""
        return {name: int(n) for name, n in self.conn.execute(
            "SELECT relname, autovacuum_count + autoanalyze_count FROM pg_stat_user_tables "
            "WHERE autovacuum_count + autoanalyze_count > 0").fetchall()}
