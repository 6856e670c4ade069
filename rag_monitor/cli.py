"""``rag-monitor``: the command line. Each subcommand imports what it needs, when it runs."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def _agent(args: argparse.Namespace) -> int:
    from rag_monitor.agent.service import Agent, configure_threads
    from rag_monitor.settings import load_settings

    overrides = {
        "otlp_host": args.host, "otlp_port": args.port, "http_host": args.http_host,
        "http_port": args.http_port, "data_dir": args.data_dir, "store_url": args.store_url,
        "phoenix_url": args.phoenix_url,
    }
    settings = load_settings(args.config, overrides=overrides)
    configure_threads(settings.torch_threads)
    Agent(settings).run()
    return 0


def _config(args: argparse.Namespace) -> int:
    import dataclasses

    from rag_monitor.settings import SETTINGS_DOC, load_settings

    settings = load_settings(args.config)
    for field in dataclasses.fields(settings):
        env, default, doc = SETTINGS_DOC[field.name]
        print(f"{field.name} = {getattr(settings, field.name)!r}    # {env}, default {default!r}: {doc}")
    return 0


def _models_pull(args: argparse.Namespace) -> int:
    from rag_monitor.models import pull_hhem

    path = pull_hhem(args.directory)
    print(f"HHEM-2.1-Open is in {path}; set hhem_model_path: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-monitor", description="Monitoring for retrieval-augmented generation.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)

    agent = sub.add_parser("agent", help="run the agent (OTLP receiver, metrics, review page, workers)")
    agent.add_argument("--config", help="YAML settings file (see `rag-monitor config`)")
    agent.add_argument("--host", help="OTLP receiver address")
    agent.add_argument("--port", type=int, help="OTLP receiver port (default 4318)")
    agent.add_argument("--http-host", help="metrics and review server address")
    agent.add_argument("--http-port", type=int, help="metrics and review server port (default 8080)")
    agent.add_argument("--data-dir", help="directory of the embedded SQLite store")
    agent.add_argument("--store-url", help="SQLAlchemy URL of the store (PostgreSQL for scale-out)")
    agent.add_argument("--phoenix-url", help="Phoenix base URL to forward traces to")
    agent.set_defaults(run=_agent)

    config = sub.add_parser("config", help="print every setting with its value, environment variable and default")
    config.add_argument("--config", help="YAML settings file")
    config.set_defaults(run=_config)

    models = sub.add_parser("models", help="download model weights (needs network)")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    pull = models_sub.add_parser("pull", help="download a model into a directory")
    pull.add_argument("model", choices=["hhem"])
    pull.add_argument("directory")
    pull.set_defaults(run=_models_pull)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"rag-monitor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
