"""``rag-monitor store``: the schema's revision, upgrade and downgrade (the only commands that migrate)."""

from __future__ import annotations

import argparse


def store_command(args: argparse.Namespace) -> int:
    from rag_monitor.settings import load_settings
    from rag_monitor.store import Store

    settings = load_settings(args.config, overrides={"data_dir": args.data_dir, "store_url": args.store_url})
    if args.store_command == "migrate" and not settings.store_url:
        from pathlib import Path

        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)  # the embedded store's first run
    store = Store(settings.resolved_store_url())
    try:
        if args.store_command == "migrate":
            before = store.schema_state()
            if before.readable:  # newer only by additive revisions: nothing this version can (or must) do
                print(before.message())
                return 0
            head = store.migrate()
            was = ", ".join(before.current) or "no schema"
            print(f"store {store.url}: at schema revision {head}" + ("" if before.at_head else f" (was {was})"))
        elif args.store_command == "downgrade":
            before = store.schema_state()
            after = store.downgrade(args.to)
            print(f"store {store.url}: downgraded from {', '.join(before.current)} to {', '.join(after) or 'no schema'}")
        else:
            state = store.schema_state()
            print(f"store {store.url}: at schema revision {state.head}, this rag-monitor's: up to date"
                  if state.at_head else state.message())
            return 0 if state.usable else 1
    finally:
        store.close()
    return 0


def add_store_commands(sub, store_options) -> None:
    store = sub.add_parser("store", help="the store's schema: show its revision, migrate, downgrade")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    for name, text in (
        ("status", "the store's schema revision and this rag-monitor's"),
        ("migrate", "upgrade the schema to this rag-monitor's (the agent does it at start; nothing else does)"),
        ("downgrade", "go back one schema revision (or --to one), for rolling back to an older rag-monitor"),
    ):
        command = store_sub.add_parser(name, help=text)
        store_options(command)
        command.set_defaults(run=store_command)
        if name == "downgrade":
            command.add_argument("--to", help="the revision to go back to (default: one revision back)")

