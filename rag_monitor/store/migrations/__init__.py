"""Alembic environment and revisions for the store, shipped inside the package.

Run them with ``Store(url).migrate()``. To add a revision after changing ``schema.py``::

    python -m alembic -x url=sqlite:///dev.db -c /dev/null revision -m "what changed"

(or build a ``Config`` with ``script_location`` pointing here, as ``store.migrate`` does).
"""
