"""What the command line's subcommands share: the store named by the options, and times."""

from __future__ import annotations

import argparse


def store_from_args(args: argparse.Namespace):
    from rag_monitor.settings import load_settings
    from rag_monitor.store import open_store

    settings = load_settings(args.config, overrides={"data_dir": args.data_dir, "store_url": args.store_url})
    return settings, open_store(settings.resolved_store_url())


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
