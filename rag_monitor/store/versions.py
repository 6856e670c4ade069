"""The store's schema revision against this package's: compare, upgrade, step back.

    versions = SchemaVersions(database)
    versions.state()              # SchemaState(current=("0005_runtime",), head="0007_signals", ...)
    versions.require_head()       # raises SchemaMismatch with one line saying what to run
    versions.upgrade()            # what the agent's start and `rag-monitor store migrate` do
    versions.downgrade()          # one revision back (`rag-monitor store downgrade`)

Only the agent's start and the explicit ``store`` commands change the schema; every other command
checks it (``require_head``) and says in one line what to run when it does not match.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from .engine import Database
from .errors import SchemaMismatch

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Any constant: replicas starting together take it so only one runs the migrations.
_MIGRATION_LOCK_KEY = 0x7261676D6F6E


@functools.cache
def _script():
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR))


def package_head() -> str:
    """The newest revision this package ships."""
    return _script().get_current_head()


def _known(revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return _script().get_revision(revision) is not None
    except CommandError:
        return False


@dataclass(frozen=True)
class SchemaState:
    """Where a store's schema stands against this package."""

    url: str
    current: tuple[str, ...]
    """The revisions stamped in the store (empty: no schema yet)."""
    head: str
    """This package's newest revision."""

    @property
    def unknown(self) -> tuple[str, ...]:
        """Stamped revisions this package does not ship: a newer rag-monitor migrated the store."""
        return tuple(r for r in self.current if not _known(r))

    @property
    def at_head(self) -> bool:
        return self.current == (self.head,)

    @property
    def newer(self) -> bool:
        return bool(self.unknown)

    def message(self) -> str:
        """One line: which side is newer and what to run."""
        stamped = ", ".join(self.current) or "none"
        if self.newer:
            return (f"store {self.url} is at schema revision {stamped}, newer than this rag-monitor (which knows up to "
                    f"{self.head}): run the rag-monitor version that migrated it, or roll the store back with that "
                    f"version's `rag-monitor store downgrade --to {self.head}`")
        if not self.current:
            return (f"store {self.url} has no schema yet (this rag-monitor needs {self.head}): "
                    f"run `rag-monitor store migrate` or start the agent")
        return (f"store {self.url} is at schema revision {stamped}, older than this rag-monitor ({self.head}): "
                f"run `rag-monitor store migrate` or start the agent")


class SchemaVersions:
    def __init__(self, db: Database):
        self._db = db

    def state(self) -> SchemaState:
        with self._db.read() as conn:
            return self._state(conn)

    def _state(self, conn: sa.Connection) -> SchemaState:
        from alembic.migration import MigrationContext

        current = MigrationContext.configure(conn).get_current_heads()
        return SchemaState(self._db.display_url, tuple(sorted(current)), package_head())

    def require_head(self) -> SchemaState:
        """The state when the schema is this package's head; else ``SchemaMismatch`` saying what to run."""
        state = self.state()
        if not state.at_head:
            raise SchemaMismatch(state.message())
        return state

    def upgrade(self) -> str:
        """Upgrade to this package's head (a no-op there); returns the head."""
        from alembic import command

        with self._locked() as config:
            command.upgrade(config, "head")
        return package_head()

    def downgrade(self, to: str | None = None) -> tuple[str, ...]:
        """Back to ``to``, or one revision back (a merge steps back to its first, main-line parent).

        Returns the revisions stamped afterwards. Never below the first revision: that would drop
        every table.
        """
        from alembic import command
        from alembic.util import CommandError

        with self._locked() as config:
            conn = config.attributes["connection"]
            target = to or self._one_step_back(self._state(conn))
            if not _known(target):
                raise SchemaMismatch(f"no schema revision {target!r} in this rag-monitor (it knows up to {package_head()})")
            try:
                command.downgrade(config, target)
                # Alembic stops at the target's branch: revisions of another branch (a merge's
                # second parent) that the target does not include are stepped back one by one.
                keep = {r.revision for r in _script().iterate_revisions(target, "base")}
                while extra := [r for r in self._state(conn).current if r not in keep]:
                    command.downgrade(config, f"{extra[0]}@-1")
            except CommandError as exc:  # e.g. --to names a revision newer than the store's
                raise SchemaMismatch(f"store {self._db.display_url}: cannot downgrade to {target}: {exc}") from exc
            return self._state(conn).current

    def _one_step_back(self, state: SchemaState) -> str:
        current = state.current
        if len(current) != 1:
            raise SchemaMismatch(f"store {state.url} is at schema revisions {', '.join(current) or 'none'}: "
                                 f"name the revision to go back to with --to")
        down = _script().get_revision(current[0]).down_revision
        if down is None:
            raise SchemaMismatch(f"store {state.url} is at the first schema revision {current[0]}: nothing older to go back to")
        return down[0] if isinstance(down, tuple) else down

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Any]:
        """A write transaction holding the migration lock, with an Alembic config on its connection."""
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self._db.write() as conn:
            if not self._db.is_sqlite:  # SQLite's BEGIN IMMEDIATE already excludes other migrators
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
            state = self._state(conn)
            if state.newer:  # Alembic would stop with "Can't locate revision" and a traceback
                raise SchemaMismatch(state.message())
            config.attributes["connection"] = conn
            yield config
