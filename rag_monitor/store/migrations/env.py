"""Alembic environment: runs on the connection ``Store.migrate`` hands over.

No logging configuration here on purpose: migrating must not reconfigure the host's logging.
"""

from __future__ import annotations

from alembic import context

from rag_monitor.store.schema import metadata


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run the store's migrations through rag_monitor.store.Store.migrate()")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things: later revisions rebuild tables in batch mode.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; use Store.migrate()")
run_migrations_online()
