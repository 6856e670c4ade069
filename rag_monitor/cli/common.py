"""What the command line's subcommands share: the store named by the options, logging, and times."""

from __future__ import annotations

import argparse
import os

from rag_monitor.settings import ENV_PREFIX


class StoreNotFound(ValueError):
    """A command was pointed at a SQLite store that does not exist."""


def apply_log_settings(args: argparse.Namespace, settings) -> None:
    """The settings' ``log_level`` / ``log_format``; ``-v`` and ``--quiet`` on the command line win."""
    from rag_monitor.logs import configure_logging

    configure_logging(cli_log_level(args) or settings.log_level, settings.log_format)


def cli_log_level(args: argparse.Namespace) -> str | None:
    if getattr(args, "verbose", False):
        return "DEBUG"
    if getattr(args, "quiet", False):
        return "WARNING"
    return None


def store_from_args(args: argparse.Namespace, *, migrate: bool = False):
    """The settings and the open store. Only ``store migrate`` migrates or creates a store: for every
    other command a SQLite file that is not there is an error naming it (not a new empty store that
    reports nothing), and a store whose schema is not this version's raises ``SchemaMismatch``."""
    from rag_monitor.settings import load_settings
    from rag_monitor.store import open_store

    settings = load_settings(args.config, overrides={"data_dir": args.data_dir, "store_url": args.store_url})
    apply_log_settings(args, settings)
    url = settings.resolved_store_url()
    if not migrate:
        _check_sqlite_exists(url, args, settings)
    return settings, open_store(url, migrate=migrate)


def _check_sqlite_exists(url: str, args: argparse.Namespace, settings) -> None:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or os.path.exists(parsed.database):
        return
    chosen = args.data_dir or args.config or os.environ.get(f"{ENV_PREFIX}DATA_DIR")
    source = "store_url" if settings.store_url else f"data_dir {settings.data_dir!r}{'' if chosen else ', the default'}"
    raise StoreNotFound(
        f"no store at {parsed.database} (from {source}): point at the agent's store with --config AGENT.yaml, "
        f"--data-dir DIR or --store-url URL (or {ENV_PREFIX}DATA_DIR / {ENV_PREFIX}STORE_URL), "
        f"or create one with `rag-monitor store migrate`")


def format_utc(t: float) -> str:
    import datetime as dt

    return f"{dt.datetime.fromtimestamp(t, dt.timezone.utc):%Y-%m-%d %H:%M} UTC"


def parse_time(text: str) -> float:
    """Unix seconds from a number or an ISO 8601 time (UTC unless it names its zone)."""
    import datetime as dt

    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither Unix seconds nor an ISO 8601 time (2026-11-23T00:00)") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)).timestamp()
