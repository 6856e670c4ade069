"""Subcommands that read the monitoring signals from the store: drift, probes, shadow evaluation."""

from __future__ import annotations

import argparse

from rag_monitor.cli.common import format_utc, parse_time, store_from_args


def drift_report(args: argparse.Namespace) -> int:
    from rag_monitor.agent.drift.profiles import load_profiles
    from rag_monitor.agent.drift.report import write_report
    from rag_monitor.config_files import load_config

    settings, store = store_from_args(args)
    try:
        profiles = load_config("detector_profiles", settings.detector_profiles, load_profiles, list)
        index = write_report(store, profiles, args.out, phoenix_url=settings.phoenix_url or None)
    finally:
        store.close()
    print(f"drift report: {index}")
    return 0


def drift_reference(args: argparse.Namespace) -> int:
    import datetime as dt
    import json

    from rag_monitor.agent.drift.profiles import load_profiles
    from rag_monitor.agent.drift.reference_admin import reference_status, set_reference
    from rag_monitor.config_files import load_config

    # `show` reads the agent's store; `set` and `reset` may come before the agent's first start.
    settings, store = store_from_args(args)
    try:
        profiles = load_config("detector_profiles", settings.detector_profiles, load_profiles, list)
        if not profiles:
            raise ValueError("no drift profiles (the setting detector_profiles is empty): drift detection is off")
        signals = [args.signal] if getattr(args, "signal", None) else sorted({p.signal for p in profiles})
        unknown = set(signals) - {p.signal for p in profiles}
        if unknown:
            raise ValueError(f"no drift profile watches {sorted(unknown)}; profiles watch {sorted({p.signal for p in profiles})}")
        if args.reference_command == "show":
            for row in reference_status(store, profiles):
                if row["signal"] in signals:
                    state = "complete" if row["complete"] else "capturing"
                    print(f"{row['signal']}: {row['description']} ({row['set_by']}; version {row['version']}, "
                          f"{row['items']} items, {state}) {json.dumps(row['spec'])}")
            return 0
        spec = None
        if args.reference_command == "set":
            if args.start or args.end:
                if not (args.start and args.end):
                    raise ValueError("a time range needs both --from and --to")
                spec = {"mode": "range", "start": parse_time(args.start), "end": parse_time(args.end)}
            elif args.release:
                spec = {"mode": "release", "release": args.release, "days": args.days}
            else:
                spec = {"mode": "period", "days": args.days}
        for signal in signals:
            capacity = max(p.reference_size for p in profiles if p.signal == signal)
            version = set_reference(store, signal, spec, capacity=capacity)
            what = json.dumps(spec) if spec else "the profile default"
            print(f"{signal}: new reference version {version}: {what}; runs wait until it is captured "
                  f"({dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC)")
    finally:
        store.close()
    return 0


def probes_command(args: argparse.Namespace) -> int:
    import time

    from rag_monitor.agent.probes import HttpRetriever, ProbeRunner, describe_probes, load_probe_set
    from rag_monitor.alerts.thresholds import parse_duration

    settings, store = store_from_args(args)
    try:
        if args.probes_command == "announce":
            until = time.time() + parse_duration(args.duration)
            store.probes.announce(until, args.note)
            print(f"index change announced until {format_utc(until)}: probe overlap alerts hold off until then")
            return 0
        if not settings.probes_path:
            raise ValueError("no probe set: set probes_path (in --config or RAG_MONITOR_PROBES_PATH)")
        probes = load_probe_set(settings.probes_path, k=settings.probes_k, limit=settings.probes_golden_limit)
        if args.probes_command == "show":
            for line in describe_probes(store, probes):
                print(line)
            return 0
        url = args.url or settings.probes_url
        if not url:
            raise ValueError("no retrieval hook: pass --url or set probes_url")
        retriever = HttpRetriever(url, timeout_s=settings.probes_timeout_s)
        try:
            runner = ProbeRunner(store.probes, probes, retriever, concurrency=settings.probes_concurrency, rbo_p=settings.probes_rbo_p)
            pinned, failed = runner.pin()
        finally:
            retriever.close()
        print(f"pinned {pinned} of {len(probes)} probes as the new baseline")
        for name, error in failed.items():
            print(f"  {name}: {error}; its baseline is dropped, the next run that reaches it pins it")
        return 1 if failed else 0
    finally:
        store.close()


def shadow_report_command(args: argparse.Namespace) -> int:
    import json

    from rag_monitor.collectors.pricing import PriceTable
    from rag_monitor.config_files import load_config
    from rag_monitor.review.shadow import shadow_report

    settings, store = store_from_args(args)
    prices = load_config("price_table", settings.price_table, PriceTable.load, lambda: PriceTable([]))
    since = parse_time(args.since) if args.since else None
    try:
        # Priced as the agent prices queries (storage share included): one cost per query everywhere.
        report = shadow_report(store, since=since, call_cost=prices.call_cost, scorer=args.scorer,
                               storage_usd_per_query=settings.storage_usd_per_query)
    finally:
        store.close()
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.text())
    return 0
