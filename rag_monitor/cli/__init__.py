"""``rag-monitor``: the command line. Each subcommand imports what it needs, when it runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rag_monitor.cli.calibration import calibrate_from_store
from rag_monitor.cli.common import apply_log_settings, cli_log_level, store_from_args
from rag_monitor.cli.signals import drift_reference, drift_report, probes_command, shadow_report_command
from rag_monitor.cli.store import add_store_commands


def _agent(args: argparse.Namespace) -> int:
    from rag_monitor.settings import limit_native_threads, load_settings

    overrides = {
        "otlp_host": args.host, "otlp_port": args.port, "http_host": args.http_host,
        "http_port": args.http_port, "data_dir": args.data_dir, "store_url": args.store_url,
        "phoenix_url": args.phoenix_url,
    }
    settings = load_settings(args.config, overrides=overrides)
    apply_log_settings(args, settings)
    limit_native_threads(settings.torch_threads)
    from rag_monitor.agent.service import Agent  # after the thread limits: numpy reads them on import

    # run() checks the ports, then opens (and migrates) the store before the servers start: a store
    # this version cannot use ends the command with one line (``SchemaMismatch``), not a traceback.
    Agent(settings).run()
    return 0


def _config(args: argparse.Namespace) -> int:
    import dataclasses

    from rag_monitor.masking import display_setting
    from rag_monitor.settings import SETTINGS_DOC, load_settings

    settings = load_settings(args.config)
    for field in dataclasses.fields(settings):
        env, default, doc = SETTINGS_DOC[field.name]
        print(f"{field.name} = {display_setting(field.name, getattr(settings, field.name))}    # {env}, default {default!r}: {doc}")
    return 0


def _models_pull(args: argparse.Namespace) -> int:
    from rag_monitor.faithfulness.pull import pull

    path = pull(args.model, args.directory)
    setting = "hhem_model_path" if args.model == "hhem" else "lettucedetect_model_path"
    print(f"{args.model} is in {path}; set {setting}: {path}")
    return 0


def _export_golden(args: argparse.Namespace) -> int:
    from rag_monitor.review.golden import golden_rows, push_to_phoenix, write_jsonl

    settings, store = store_from_args(args)
    shares = tuple(float(x) for x in args.split_shares.split(","))
    try:
        rows = golden_rows(store, corpus_version=args.corpus_version, shares=shares,
                           phoenix_url=args.phoenix_url or settings.phoenix_url, phoenix_project=settings.phoenix_project)
    finally:
        store.close()
    n = write_jsonl(rows, args.out)
    per_split = {split: sum(r["split"] == split for r in rows) for split in ("development", "judge_calibration", "release")}
    print(f"wrote {n} reviewed items to {args.out} (export version {rows[0]['export_version'] if rows else '-'}; splits {per_split})")
    empty = [split for split, count in per_split.items() if count == 0]
    if rows and empty:
        groups = len({r["split_group"] for r in rows})
        print(f"warning: the {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty: {n} items fall in "
              f"{groups} group{'s' if groups != 1 else ''} (a session's items and items sharing a document stay together); "
              f"review more sessions or change --split-shares", file=sys.stderr)
    if args.phoenix_url:
        dataset = push_to_phoenix(rows, args.phoenix_url, args.dataset)
        print(f"pushed {len(rows)} examples to the Phoenix dataset {args.dataset!r} ({getattr(dataset, 'id', '')})")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    if args.from_store:
        return calibrate_from_store(args)
    from rag_monitor.faithfulness.thresholds import shipped_calibration
    from rag_monitor.review.calibrate import calibrate, write_html

    if args.begin:
        from rag_monitor.faithfulness import load_scorer
        from rag_monitor.review.calibrate import load_begin

        data = load_begin(args.begin)
        scorer = load_scorer(args.model or None)
        scores = scorer.score(data.premises, data.hypotheses)
        supported, weights, name, threshold = data.supported, None, scorer.name, scorer.threshold
        shipped = shipped_calibration(scorer.name, scorer.version)
        print(f"BEGIN: {len(scores)} labelled pairs ({data.n_generic} 'Generic' rows left out), scored by {name}")
    else:
        from rag_monitor.review.golden import read_jsonl

        rows = [r for r in read_jsonl(args.golden) if r["labels"].get("faithful") in ("yes", "no") and args.scorer in r["scores"]]
        if not rows:
            raise ValueError(f"{args.golden}: no reviewed item has a faithful yes/no label and a {args.scorer!r} score")
        scores = [r["scores"][args.scorer] for r in rows]
        supported = [r["labels"]["faithful"] == "yes" for r in rows]
        weights, name = [r["weight"] for r in rows], args.scorer
        threshold = next((r.get("score_thresholds", {}).get(args.scorer) for r in rows if r.get("score_thresholds", {}).get(args.scorer) is not None), None)
        version = rows[0]["versions"]["scorers"].get(args.scorer, "")
        shipped = shipped_calibration(args.scorer, version)
    report = calibrate(scores, supported, weights, threshold=threshold, scorer=name)
    path = write_html(report, args.out, shipped=shipped)
    low, high = report.recommended_interval
    print(
        f"{report.scorer}: n={report.n} (excluded {report.n_excluded}), balanced accuracy {report.balanced_accuracy:.3f}, "
        f"unsupported precision {report.precision_unsupported:.3f} recall {report.recall_unsupported:.3f}, "
        f"ROC AUC {report.roc_auc:.3f}, ECE {report.ece:.3f}; recommended threshold {report.recommended_threshold:.3f} "
        f"[{low:.3f}, {high:.3f}] at threshold {report.threshold}"
    )
    print(f"report: {path}")
    return 0


def _review_report(args: argparse.Namespace) -> int:
    from rag_monitor.review.report import release_report, write_html

    _, store = store_from_args(args)
    try:
        report = release_report(store, args.baseline, args.candidate, variant=args.variant)
    finally:
        store.close()
    print(report.text())
    if args.out:
        print(f"report: {write_html(report, args.out)}")
    return 0


def _review_assign(args: argparse.Namespace) -> int:
    _, store = store_from_args(args)
    try:
        n = store.review.assign(None if args.to == "anyone" else args.to, count=args.count, tenant=args.tenant)
    finally:
        store.close()
    print(f"assigned {n} unreviewed items to {args.to}")
    return 0


def _hash_token(args: argparse.Namespace) -> int:
    import getpass

    from rag_monitor.review.auth import hash_token

    token = sys.stdin.readline().strip() if not sys.stdin.isatty() else getpass.getpass("reviewer token: ")
    if not token:
        raise ValueError("empty token")
    print(hash_token(token))
    return 0


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="the agent's YAML settings file")
    parser.add_argument("--data-dir", help="directory of the embedded SQLite store")
    parser.add_argument("--store-url", help="SQLAlchemy URL of the store")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag-monitor", description="Monitoring for retrieval-augmented generation.")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    level.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only (the setting log_level otherwise)")
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
    pull.add_argument("model", choices=["hhem", "lettucedetect"])
    pull.add_argument("directory")
    pull.set_defaults(run=_models_pull)

    export = sub.add_parser("export", help="export reviewed items")
    export_sub = export.add_subparsers(dest="export_command", required=True)
    golden = export_sub.add_parser("golden", help="reviewed items as golden-set JSON lines (and a Phoenix dataset)")
    _store_options(golden)
    golden.add_argument("--out", default="golden.jsonl")
    golden.add_argument("--corpus-version", default="", help="the document corpus version the answers were drawn from")
    golden.add_argument("--phoenix-url", help="also push the rows to this Phoenix as a dataset")
    golden.add_argument("--dataset", default="rag-monitor-golden", help="the Phoenix dataset name")
    golden.add_argument("--split-shares", default="0.6,0.2,0.2",
                        help="shares of the development, judge-calibration and release splits (rows of a session or sharing a document stay together)")
    golden.set_defaults(run=_export_golden)

    calibrate = sub.add_parser("calibrate", help="compare a faithfulness scorer with human labels; writes an HTML report")
    source = calibrate.add_mutually_exclusive_group(required=True)
    source.add_argument("--golden", help="a golden-set export (uses its human 'faithful' labels and stored scores)")
    source.add_argument("--begin", help="a BEGIN TSV file (human attribution labels), scored now")
    source.add_argument("--from-store", action="store_true",
                        help="the store's reviewed items of the judge_calibration split, per scorer version and release")
    _store_options(calibrate)
    calibrate.add_argument("--split-shares", default="0.6,0.2,0.2", help="with --from-store: as for export golden")
    calibrate.add_argument("--scorer", default="support-v1", help="with --golden or --from-store: which stored scorer to calibrate")
    calibrate.add_argument("--model", help="with --begin: HHEM model directory (default: the lexical fallback)")
    calibrate.add_argument("--out", default="calibration.html")
    calibrate.set_defaults(run=_calibrate)

    drift = sub.add_parser("drift", help="drift reports")
    drift_sub = drift.add_subparsers(dest="drift_command", required=True)
    report = drift_sub.add_parser("report", help="an HTML report of the current drift windows (Evidently + the agent's verdicts)")
    _store_options(report)
    report.add_argument("--out", default="drift-report")
    report.set_defaults(run=drift_report)
    reference = drift_sub.add_parser("reference", help="show, set or reset the reference the drift runs compare with")
    reference_sub = reference.add_subparsers(dest="reference_command", required=True)
    for name, text in (("show", "the reference of each signal: its definition, version and whether it is captured"),
                       ("set", "a new reference: a period (--days), a release (--release) or a time range (--from/--to)"),
                       ("reset", "back to the profile's default (the first full week from now)")):
        command = reference_sub.add_parser(name, help=text)
        _store_options(command)
        command.add_argument("--signal", help="one signal (default: every signal a profile watches)")
        command.set_defaults(run=drift_reference)
        if name == "set":
            command.add_argument("--days", type=float, default=7.0, help="length of the reference period (default 7)")
            command.add_argument("--release", help="capture only this release's queries")
            command.add_argument("--from", dest="start", help="start of a time range (ISO 8601 or Unix seconds)")
            command.add_argument("--to", dest="end", help="end of the time range")

    probes = sub.add_parser("probes", help="neighbour-stability probes: show, pin the baseline, announce an index change")
    probes_sub = probes.add_subparsers(dest="probes_command", required=True)
    for name, text in (("show", "each probe's baseline and its latest overlap"),
                       ("pin", "retrieve every probe now and make the answers the new baseline (after an intended change)"),
                       ("announce", "announce an intended index change: overlap alerts hold off meanwhile")):
        command = probes_sub.add_parser(name, help=text)
        _store_options(command)
        command.set_defaults(run=probes_command)
        if name == "pin":
            command.add_argument("--url", help="the app's retrieval hook (default: the setting probes_url)")
        if name == "announce":
            command.add_argument("--for", dest="duration", required=True, help="how long, as a Prometheus duration (2h, 30m)")
            command.add_argument("--note", default="", help="what changes (shown by probes show)")

    review = sub.add_parser("review", help="review-page administration")
    review_sub = review.add_subparsers(dest="review_command", required=True)
    hash_cmd = review_sub.add_parser("hash-token", help="print the SHA-256 to configure for a reviewer token (read from stdin)")
    hash_cmd.set_defaults(run=_hash_token)
    review_report = review_sub.add_parser("report", help="human-judged rates of two releases side by side (95%% intervals, counts)")
    _store_options(review_report)
    review_report.add_argument("--baseline", required=True, help="the release to compare against")
    review_report.add_argument("--candidate", required=True, help="the new release")
    review_report.add_argument("--variant", default="production", help="which variant's answers (default production)")
    review_report.add_argument("--out", help="also write an HTML report here")
    review_report.set_defaults(run=_review_report)
    assign = review_sub.add_parser("assign", help="assign unreviewed items to a reviewer or group:<name> ('anyone' clears)")
    _store_options(assign)
    assign.add_argument("--to", required=True)
    assign.add_argument("--count", type=int, help="at most this many (oldest first)")
    assign.add_argument("--tenant", help="only this tenant's items")
    assign.set_defaults(run=_review_assign)

    shadow = sub.add_parser("shadow", help="shadow evaluation of candidate pipelines")
    shadow_sub = shadow.add_subparsers(dest="shadow_command", required=True)
    shadow_cmd = shadow_sub.add_parser("report", help="per candidate: blind pairwise win rate vs production (95%% interval), "
                                       "position-swap consistency, latency, cost, refusals and faithfulness side by side")
    _store_options(shadow_cmd)
    shadow_cmd.add_argument("--since", help="only pairs sampled since (ISO 8601 or Unix seconds)")
    shadow_cmd.add_argument("--scorer", help="faithfulness scorer whose labels count (default: the one with most scores)")
    shadow_cmd.add_argument("--json", action="store_true", help="print JSON instead of text")
    shadow_cmd.set_defaults(run=shadow_report_command)

    add_store_commands(sub, _store_options)

    # `demo` is dispatched in main() before parsing; listed here for --help.
    sub.add_parser("demo", help="the sample RAG app, scripted traffic and the agent on the embedded default (see `rag-monitor demo --help`)")
    _log_flags_on_every_command(parser)
    return parser


def _log_flags_on_every_command(parser: argparse.ArgumentParser) -> None:
    """`-v` / `--quiet` after the subcommand too (`rag-monitor agent --quiet`); SUPPRESS keeps
    a flag given before the subcommand from being reset by the subcommand's default."""
    for action in parser._actions:  # argparse has no public walk over subcommands
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                level = command.add_mutually_exclusive_group()
                level.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at DEBUG level")
                level.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="log warnings and errors only")
                _log_flags_on_every_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo"]:
        # The demo parses its own flags (argparse's REMAINDER would swallow none that start with --).
        from rag_monitor.demo.run import main as demo_main

        return demo_main(argv[1:])
    args = build_parser().parse_args(argv)
    from rag_monitor.extras import MissingExtra
    from rag_monitor.logs import configure_logging
    from rag_monitor.masking import install_log_masking, mask
    from rag_monitor.settings import ENV_PREFIX
    from rag_monitor.store.errors import StoreError

    install_log_masking()
    try:
        # Until a command has read its settings file: the flags, else the environment.
        configure_logging(cli_log_level(args) or os.environ.get(f"{ENV_PREFIX}LOG_LEVEL", "INFO"),
                          os.environ.get(f"{ENV_PREFIX}LOG_FORMAT", "text"))
        return args.run(args)
    except (ValueError, FileNotFoundError, StoreError, MissingExtra) as exc:
        print(f"rag-monitor: error: {mask(str(exc))}", file=sys.stderr)
        return 2

