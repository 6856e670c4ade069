"""The store's schema revision against this package's: compare, upgrade, step back.

    versions = SchemaVersions(database)
    versions.state()              # SchemaState(current=("0005_runtime",), head="0007_signals", ...)
    versions.require_head()       # raises SchemaMismatch with one line saying what to run
    versions.upgrade()            # what the agent's start and `rag-monitor store migrate` do
    versions.downgrade()          # one revision back (`rag-monitor store downgrade`)

Only the agent's start and the explicit ``store`` commands change the schema; every other command
checks it (``require_head``) and says in one line what to run when it does not match.

Rolling upgrades: a revision whose module says ``additive = True`` only adds (tables, nullable or
defaulted columns, indexes), so the previous revision's code keeps running against it (its record
readers ignore keys they do not know). Migrating, an agent writes into ``schema_compat`` the
oldest revision whose code runs against its head (``readable_from``: back over additive
revisions). An older agent finding a newer store runs when its own head is at or after that
revision, and refuses with one line otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from .engine import Database
from .errors import SchemaMismatch
from .schema import schema_compat

log = logging.getLogger(__name__)

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


def readable_from(revision: str) -> str:
    """The oldest revision whose code runs against ``revision``'s schema: back over additive revisions
    (a merge or a revision not marked ``additive`` stops the walk)."""
    script = _script()
    rev = script.get_revision(revision)
    while getattr(rev.module, "additive", False) and isinstance(rev.down_revision, str):
        rev = script.get_revision(rev.down_revision)
    return rev.revision


@functools.cache
def _lineage(head: str) -> frozenset[str]:
    """``head`` and every revision before it."""
    return frozenset(r.revision for r in _script().iterate_revisions(head, "base"))


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
    readable_from: str | None = None
    """For a store at one revision: the oldest revision whose code runs against it, as the
    rag-monitor that migrated it recorded (None: not recorded)."""

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

    @property
    def readable(self) -> bool:
        """Newer than this package, but only by additive revisions: this package runs against it (a
        replica behind during a rolling upgrade)."""
        return self.newer and self.readable_from is not None and self.readable_from in _lineage(self.head)

    @property
    def usable(self) -> bool:
        """This package can run against the store as it is, without migrating."""
        return self.at_head or self.readable

    def message(self) -> str:
        """One line: which side is newer and what to run."""
        stamped = ", ".join(self.current) or "none"
        if self.readable:
            return (f"store {self.url} is at schema revision {stamped}, newer than this rag-monitor ({self.head}), but "
                    f"only by additive revisions (code from {self.readable_from} on runs against it): running as a "
                    f"replica behind during a rollout; upgrade this replica to the version that migrated it")
        if self.newer:
            if self.readable_from is not None:
                return (f"store {self.url} is at schema revision {stamped}, newer than this rag-monitor (which knows up "
                        f"to {self.head}) and not readable by it (code from {self.readable_from} on is needed): run "
                        f"that rag-monitor or a later one, or roll the store back with the version that migrated it: "
                        f"`rag-monitor store downgrade --to {self.head}`")
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

        current = tuple(sorted(MigrationContext.configure(conn).get_current_heads()))
        readable = None  # only a newer store's matters
        if len(current) == 1 and not _known(current[0]) and sa.inspect(conn).has_table(schema_compat.name):
            readable = conn.execute(sa.select(schema_compat.c.readable_from)
                                    .where(schema_compat.c.revision == current[0])).scalar_one_or_none()
        return SchemaState(self._db.display_url, current, package_head(), readable)

    def require_head(self) -> SchemaState:
        """The state when this package can run against the schema (its head, or a newer one only
        by additive revisions); else ``SchemaMismatch`` saying what to run."""
        state = self.state()
        if not state.usable:
            raise SchemaMismatch(state.message())
        return state

    def upgrade(self) -> str:
        """Upgrade to this package's head (a no-op there); returns the store's revision afterwards.

        A store newer than this package only by additive revisions is left as it is (logged).
        """
        from alembic import command

        with self._locked() as config:
            state = config.attributes["state"]
            if state.readable:
                log.warning("%s", state.message())
                return state.current[0]
            command.upgrade(config, "head")
            self._record_readable_from(config.attributes["connection"])
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
            self._record_readable_from(conn)
            return self._state(conn).current

    def _record_readable_from(self, conn: sa.Connection) -> None:
        """Write, for the revision the store is now at, the oldest revision whose code runs against it."""
        current = self._state(conn).current
        if len(current) != 1 or not sa.inspect(conn).has_table(schema_compat.name):
            return  # below the revision that made the table: no replica reads it there
        insert = self._db.insert(schema_compat).values(revision=current[0], readable_from=readable_from(current[0]))
        conn.execute(insert.on_conflict_do_update(index_elements=["revision"],
                                                  set_={"readable_from": insert.excluded.readable_from}))

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
            # Alembic would stop with "Can't locate revision" and a traceback; ``upgrade`` runs on a
            # store newer only by additive revisions without migrating it.
            if state.newer and not state.readable:
                raise SchemaMismatch(state.message())
            config.attributes["connection"] = conn
            config.attributes["state"] = state
            yield config
