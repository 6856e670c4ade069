"""What the command line's subcommands share: the store named by the options, and times."""

from __future__ import annotations

import argparse


def store_from_args(args: argparse.Namespace, *, migrate: bool = False):
    """The settings and the store the options name. Reports never migrate: a store whose schema
    is not this version's raises ``SchemaMismatch`` (one line saying what to run)."""
    from rag_monitor.settings import load_settings
    from rag_monitor.store import open_store

    settings = load_settings(args.config, overrides={"data_dir": args.data_dir, "store_url": args.store_url})
    url = settings.resolved_store_url()
    if url.startswith("sqlite:///") and not migrate:
        from pathlib import Path

        from rag_monitor.store import SchemaMismatch

        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():  # SQLite would create an empty one
            raise SchemaMismatch(f"no store at {path} yet: start the agent or run `rag-monitor store migrate`")
    return settings, open_store(url, migrate=migrate)


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
