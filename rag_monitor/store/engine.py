"""Connecting: engines, dialect specifics, transactions and error translation.

SQLite (the embedded default) runs in WAL mode with a busy timeout and
``synchronous=NORMAL``; every write transaction starts with ``BEGIN IMMEDIATE`` so two
writers queue on the database lock up front instead of failing half-way with a stale
snapshot. PostgreSQL (``postgresql+psycopg://``) is the shared store for several replicas.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, make_url

from .errors import StoreError, StoreUnavailable

SQLITE_FILENAME = "rag-monitor.sqlite3"
_WRITE_OPTION = "rag_monitor_write"


def default_sqlite_url(data_dir: str | os.PathLike[str]) -> str:
    """The embedded store's URL under ``data_dir`` (created if missing).

    >>> default_sqlite_url("/var/lib/rag-monitor")
    'sqlite:////var/lib/rag-monitor/rag-monitor.sqlite3'
    """
    path = Path(data_dir).absolute()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / SQLITE_FILENAME}"


PG_POOL_SIZE, PG_POOL_MAX = 10, 15
"""PostgreSQL connections a replica keeps open, and opens at most. At production rates the
request path, the sinks and the jobs use more than SQLAlchemy's default five at once: each
connection beyond the pool was opened and closed again around one transaction, a new server
backend every time (a fork, authentication, cold catalog caches, every statement parsed and
prepared again). The most a replica opens stays the default's fifteen, so the server's
``max_connections`` covers as many replicas as before."""


class Database:
    """One engine plus the store's transaction helpers.

    ``read()`` yields a connection in a plain transaction, ``write()`` one in a write
    transaction (``BEGIN IMMEDIATE`` on SQLite) that commits on exit; both turn connection
    failures and lock timeouts into ``StoreUnavailable``.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 5.0, connect_timeout_s: float = 5.0):
        if busy_timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError(f"timeouts must be positive, got busy={busy_timeout_s}, connect={connect_timeout_s}")
        parsed = make_url(url)
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            if parsed.database in (None, "", ":memory:") or parsed.database.startswith("file::memory:"):
                # Each pooled connection would get its own empty database.
                raise ValueError("an in-memory SQLite store is not supported: use a file, e.g. sqlite:///path/store.db")
            self.engine = _sqlite_engine(parsed, busy_timeout_s)
        elif backend == "postgresql":
            if parsed.drivername == "postgresql":
                parsed = parsed.set(drivername="postgresql+psycopg")
            self.engine = sa.create_engine(
                parsed,
                pool_size=PG_POOL_SIZE,
                max_overflow=PG_POOL_MAX - PG_POOL_SIZE,
                pool_timeout=connect_timeout_s,
                connect_args={"connect_timeout": max(1, round(connect_timeout_s))},
            )
            _ping_when_idle(self.engine)
        else:
            raise ValueError(f"unsupported store URL {parsed.render_as_string(hide_password=True)!r}: "
                             "use sqlite:///path or postgresql+psycopg://user@host/db")
        self.dialect = backend
        self.display_url = parsed.render_as_string(hide_password=True)
        self._write_engine = self.engine.execution_options(**{_WRITE_OPTION: True})

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def insert(self, table: sa.Table) -> Any:
        """A dialect insert construct with ``on_conflict_do_nothing`` / ``on_conflict_do_update``."""
        return (sqlite.insert if self.is_sqlite else postgresql.insert)(table)

    def any_of(self, column: sa.ColumnElement, values: list) -> sa.ColumnElement[bool]:
        """``column IN values``; on PostgreSQL ``column = ANY(:array)``: one statement text
        (prepared once per connection) whatever the number of values, where each length of an
        ``IN`` list is a statement of its own, parsed and planned every time."""
        if self.is_sqlite:
            return column.in_(values)
        return column == sa.any_(sa.bindparam(None, list(values), type_=postgresql.ARRAY(column.type)))

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.translate_errors(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with self.translate_errors(), self._write_engine.begin() as conn:
            yield conn

    @contextmanager
    def translate_errors(self) -> Iterator[None]:
        """Map driver failures that mean "try again later" to ``StoreUnavailable``."""
        try:
            yield
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as e:
            message = str(e.orig) if e.orig is not None else str(e)
            if self.is_sqlite and "no such table" in message:
                raise StoreError(f"{self.display_url}: {message}: the schema is missing, call Store.migrate()") from e
            raise StoreUnavailable(f"store {self.display_url} unavailable: {message.strip()}") from e
        except sa_exc.TimeoutError as e:  # the connection pool stayed exhausted
            raise StoreUnavailable(f"store {self.display_url} unavailable: {e}") from e
        except sa_exc.DBAPIError as e:
            if e.connection_invalidated:
                raise StoreUnavailable(f"store {self.display_url} unavailable: {e.orig}") from e
            raise

    def checkpoint(self) -> tuple[int, int]:
        """SQLite: copy the write-ahead log into the database without waiting for readers or
        writers (``PRAGMA wal_checkpoint(PASSIVE)``); returns (frames in the log, frames copied).
        PostgreSQL checkpoints itself: (0, 0)."""
        if not self.is_sqlite:
            return 0, 0
        with self.translate_errors(), self.engine.connect() as conn:
            _busy, in_log, copied = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").one()
        return max(in_log, 0), max(copied, 0)

    def dispose(self) -> None:
        self.engine.dispose()


_ARRAY_TYPES = ((sa.BigInteger, "bigint"), (sa.Integer, "integer"), (sa.Double, "double precision"),
                (sa.Text, "text"), (sa.String, "varchar"), (sa.LargeBinary, "bytea"))


class UnnestInsert:
    """PostgreSQL: one ``INSERT ... SELECT * FROM unnest(<column arrays>)`` for any number of rows.

    Its text is the same whatever the row count, so psycopg prepares it once per connection
    (after ``prepare_threshold`` uses) and the server parses and plans it once; a multi-row
    ``VALUES`` list (or an executemany) is parsed and planned again for every row count. ``tail``:
    the ``ON CONFLICT`` and ``RETURNING`` clauses::

        insert = UnnestInsert(review_items, ["queue", "trace_id"], "ON CONFLICT (queue, trace_id) DO NOTHING")
        insert.execute(conn, [{"queue": "default", "trace_id": "..."}, ...])

    The arrays go in binary (psycopg's ``%b``), each element as its length and bytes. In the text
    format every text element is quoted and escaped in Python, and a review item's record is JSON,
    mostly quotes to escape: 20x the client CPU per row (``benchmarks/results/pg_array_params.json``).
    """

    def __init__(self, table: sa.Table, columns: list[str], tail: str = ""):
        self.columns = columns
        types = [_array_type(table.c[c].type) for c in columns]
        self._convert = [_ARRAY_ELEMENT[t] for t in types]
        arrays = ", ".join(f"CAST(%({c})b AS {t}[])" for c, t in zip(columns, types))
        self.statement = f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM unnest({arrays}) {tail}"

    def execute(self, conn: Connection, rows: list[dict[str, Any]]) -> sa.CursorResult:
        return self.execute_columns(conn, {c: [row[c] for row in rows] for c in self.columns})

    def execute_columns(self, conn: Connection, columns: dict[str, list]) -> sa.CursorResult:
        """``execute`` of rows given as one list per column (no per-row dicts to build)."""
        # One element type per array: an int among floats would make psycopg pick an integer
        # array (it looks at the elements), and the float after it would not fit.
        params = {c: [v if v is None else convert(v) for v in columns[c]] if convert is not None else columns[c]
                  for c, convert in zip(self.columns, self._convert)}
        return conn.exec_driver_sql(self.statement, params)


def _array_type(column_type: sa.types.TypeEngine) -> str:
    for kind, name in _ARRAY_TYPES:
        if isinstance(column_type, kind):
            return name
    raise TypeError(f"no array type for {column_type!r}")


_ARRAY_ELEMENT = {"bigint": int, "integer": int, "double precision": float, "text": None, "varchar": None, "bytea": None}
"""What each array's elements are made into before dumping (None: as given)."""


PING_IDLE_S = 1.0
"""A pooled PostgreSQL connection idle this long is pinged before use."""


def _ping_when_idle(engine: Engine) -> None:
    """``pool_pre_ping``, only for connections that sat idle ``PING_IDLE_S`` or longer.

    A PostgreSQL restart leaves dead pooled connections: a ping finds them before a request
    does. A connection back in the pool a moment ago has been through the server just now, and
    at production rates every connection is: pinging it too added a round trip (and the
    server's work) to every transaction, two per ingest request. A restart inside that moment
    fails one transaction (503, which exporters retry) and the pool drops every connection
    opened before it (SQLAlchemy's disconnect handling).
    """
    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _used(_dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        last = record.info.get("checked_in_at")
        if last is not None and time.monotonic() - last < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # noqa: BLE001 - any failure: a new connection (the pool retries)
            raise sa_exc.DisconnectionError(f"stale pooled connection: {exc}") from exc


WAL_AUTOCHECKPOINT_PAGES = 10_000
"""About 40 MB of log (4 KiB pages) before a commit checkpoints by itself (SQLite's default: 1,000)."""


def _sqlite_engine(url: sa.URL, busy_timeout_s: float) -> Engine:
    if url.database:
        Path(url.database).absolute().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url,
        connect_args={"timeout": busy_timeout_s, "check_same_thread": False},
        pool_size=8,
        max_overflow=16,
    )
    busy_ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below emit BEGIN instead of pysqlite's own
        # (which would defer locking and ignore BEGIN IMMEDIATE).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
            # The agent's store_checkpoint job copies the log every second, off the request path
            # (a copy inside a commit added ~12 ms to every other ingest request); this bound is
            # the backstop when no job runs (CLI tools, a stalled scheduler).
            cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "BEGIN")

    return engine
