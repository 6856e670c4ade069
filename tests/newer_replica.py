"""A rag-monitor one version ahead of this one, for rolling-upgrade tests.

It is today's code with what the next version may do and still be read by this one: one more
schema revision (``FUTURE``, additive: a nullable column and a table) and writers that add keys
this version does not know to every JSON object they store, at every depth (records, review labels
and drafts, claims, drift results). As a process (an agent replica, or any CLI command)::

    RAG_MONITOR_NEWER_DIR=/tmp/x python -m tests.newer_replica agent
    RAG_MONITOR_NEWER_DIR=/tmp/x python -m tests.newer_replica review STORE_URL COUNT   # a reviewer on it

The real previous version (``ac98599``, the last landed) cannot be the older replica: its record
reader refuses unknown nested keys and the schema since then is not additive (0010), which is what
the compatibility rule in ``store/versions.py`` starts from.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FUTURE = "9000_future"
UNKNOWN_KEY = "added_in_a_later_version"
FREE_FORM = ("metadata", "cache")
"""Maps whose keys are the app's own (kept whole by every version): no key is added to them."""

_REVISION = '''"""A later version's revision: {what}."""
import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
additive = {additive}


def upgrade():
    op.add_column("recent_records", sa.Column("added_later", sa.Text, nullable=True))
    op.create_table("added_later", sa.Column("id", sa.Integer, primary_key=True))


def downgrade():
    op.drop_table("added_later")
    with op.batch_alter_table("recent_records") as batch:
        batch.drop_column("added_later")
'''


def with_unknown_keys(value: Any, free_form: bool = False) -> Any:
    """``value`` as a newer writer may store it: an unknown key in every object, at every depth."""
    if isinstance(value, dict):
        out = {k: with_unknown_keys(v, free_form or k in FREE_FORM) for k, v in value.items()}
        if not free_form:
            out[UNKNOWN_KEY] = {"nested": [1, {"deeper": True}]}
        return out
    if isinstance(value, list):
        return [with_unknown_keys(v, free_form) for v in value]
    return value


def write_migrations(directory: Path, *, additive: bool = True) -> Path:
    """This package's migrations plus ``FUTURE`` after its head, under ``directory``."""
    from rag_monitor.store.versions import MIGRATIONS_DIR, package_head

    target = directory / "migrations"
    shutil.copytree(MIGRATIONS_DIR, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    # The same change either way: whether older code runs against it is what the revision declares.
    text = _REVISION.format(what="additive" if additive else "declared not additive", revision=FUTURE,
                            down=package_head(), additive=additive)
    (target / "versions" / f"{FUTURE}.py").write_text(text)
    return target


@contextlib.contextmanager
def newer_schema(migrations: Path) -> Iterator[None]:
    """Inside: this process migrates (and reads versions) as the newer package does."""
    from rag_monitor.store import versions

    def use(directory: Path) -> None:
        versions.MIGRATIONS_DIR = directory
        versions._script.cache_clear()
        versions._lineage.cache_clear()

    original = versions.MIGRATIONS_DIR
    use(migrations)
    try:
        yield
    finally:
        use(original)


def _replace_everywhere(original: Any, replacement: Any) -> None:
    """Rebind ``original`` to ``replacement`` in every loaded rag_monitor module (``from x import f``)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("rag_monitor"):
            for name, value in list(vars(module).items()):
                if value is original:
                    setattr(module, name, replacement)


def install_newer_writers() -> None:
    """Every JSON object the store writes gets unknown keys at every depth."""
    import rag_monitor.agent.service  # noqa: F401 - load every module that imported the writers
    import rag_monitor.cli  # noqa: F401
    from rag_monitor.faithfulness import claims
    from rag_monitor.store import models

    record_json, dump_json, claims_json = models.record_json, models.dump_json, claims.claims_json

    def newer_record_json(record):
        trace_id, text = record_json(record)
        return trace_id, json.dumps(with_unknown_keys(json.loads(text)))

    def newer_dump_json(value, what):
        return dump_json(with_unknown_keys(value), what)

    def newer_claims_json(found):
        text = claims_json(found)
        return None if text is None else json.dumps(with_unknown_keys(json.loads(text)))

    _replace_everywhere(record_json, newer_record_json)
    _replace_everywhere(dump_json, newer_dump_json)
    _replace_everywhere(claims_json, newer_claims_json)


def review(url: str, count: int) -> int:
    """A reviewer on the newer version: claims and labels up to ``count`` items; prints how many."""
    from rag_monitor.store import open_store

    store = open_store(url, migrate=False)
    done = 0
    try:
        while done < count and (item := store.review.claim("newer-reviewer", 600)) is not None:
            record = item.query_record
            store.review.submit_review(item.id, "newer-reviewer", {"faithful": "yes", "correct": "yes",
                                                            "relevant_documents": [d.id for d in record.delivered]})
            done += 1
    finally:
        store.close()
    print(done)
    return 0


def main() -> int:
    migrations = write_migrations(Path(os.environ["RAG_MONITOR_NEWER_DIR"]))
    install_newer_writers()
    from rag_monitor.cli import main as cli

    with newer_schema(migrations):
        if sys.argv[1:2] == ["review"]:  # python -m tests.newer_replica review URL COUNT
            return review(sys.argv[2], int(sys.argv[3]))
        return cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
