"""Alembic environment and revisions for the store, shipped inside the package.

``Store(url).migrate()`` runs them. After changing ``schema.py``, add a revision by hand
(``tests/store/test_migrations.py`` fails until the migrated schema matches again)::

    from alembic import command
    from alembic.config import Config
    config = Config()
    config.set_main_option("script_location", "rag_monitor/store/migrations")
    command.revision(config, message="what changed", rev_id="0002")
"""
