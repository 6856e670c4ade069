"""``rag-monitor demo`` (``make demo``): the agent, its alerting stack, the sample app and its traffic.

Starts the agent on SQLite under the demo data directory, a local Phoenix when installed,
Prometheus and Alertmanager when their binaries are present, then plays the scripted phases
(baseline, query-mix shift, bad release) and prints a one-screen summary::

    rag-monitor demo                  # a few minutes; asks whether to continue a previous run
    rag-monitor demo --quick --fresh  # the shortened mode the tests run (QUICK_DURATION)
    rag-monitor demo --serve          # keep everything running afterwards, for exploration

From Python: ``run_demo(DemoOptions(quick=True, data_dir=tmp))`` returns a ``DemoResult``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rag_monitor.demo.reviewer import HUMAN, SIMULATED, HumanQueue
from rag_monitor.demo.settings import DEMO_OVERRIDES, write_configs
from rag_monitor.demo.waits import (
    DRIFT_PROFILE,
    DriftRuns,
    Every,
    wait_for_drift_page,
    wait_for_drift_run,
    wait_for_story,
    wait_scored,
    wait_stored,
)

SERVICE_NAME = "support-bot"
STATE_FILE = "demo-state.json"
CONFIG_FILE = "agent.yaml"
"""The demo agent's settings, written next to its data: the CLI's reports read its store with it."""
QUICK_DURATION = "about a minute and a half on an idle machine"
"""How long ``--quick`` takes: ``demo --help`` says it, README.md quotes it (a test keeps them equal)."""
REVIEW_TOKEN = "demo-reviewer-token"
"""The demo's reviewer token for the person trying it (a throwaway: the agent only ever sees its SHA-256)."""
SIMULATED_TOKEN = "demo-simulated-reviewer-token"
"""The simulated reviewer's own token: a second identity, so the person can be a second reviewer."""



@dataclass
class DemoOptions:
    quick: bool = False
    serve: bool = False
    fresh: bool | None = None
    """True: wipe the previous run; False: continue it; None: ask (fresh when not interactive)."""
    seed: int = 7
    phoenix: bool = True
    data_dir: Path = Path(".rag-monitor-demo")
    progress: TextIO | None = sys.stderr
    out: TextIO = sys.stdout
    alert_wait_s: float | None = None
    phases: tuple[str, ...] | None = None
    """Play only these phases of the story (None: all); a test plays as much as its check needs."""
    scale: float = 1.0
    """Stretches the phases' durations (``plan_phases``)."""
    before_stop: Any = None
    """Called with the ``DemoResult`` while every service still runs (tests query Prometheus)."""


@dataclass
class DemoResult:
    summary: Any
    text: str
    phases: list[Any]
    alerts: list[dict[str, Any]]
    drift: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    prometheus_url: str | None = None


# --- argument parsing ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's flags, for ``rag-monitor demo``."""
    parser.add_argument("--quick", action="store_true", help=f"shortened scenario ({QUICK_DURATION}), as the tests run it")
    parser.add_argument("--serve", action="store_true", help="keep the agent, Phoenix and Prometheus running after the summary (Ctrl-C stops)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--fresh", dest="fresh", action="store_true", default=None, help="start clean: delete the previous demo run's data")
    start.add_argument("--continue", dest="fresh", action="store_false", help="continue the previous run's store (new releases, same history)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the scripted traffic (default 7)")
    parser.add_argument("--no-phoenix", dest="phoenix", action="store_false", help="do not start a local Phoenix")
    parser.add_argument("--data-dir", type=Path, default=Path(".rag-monitor-demo"), help="where the demo keeps its state (default .rag-monitor-demo)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rag-monitor demo`` and ``python -m rag_monitor.demo``."""
    parser = argparse.ArgumentParser(prog="rag-monitor demo", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_from_args(args)


def run_from_args(args: argparse.Namespace) -> int:
    """Ctrl-C and SIGTERM (a supervisor, `kill`, `timeout`, the end of `make`) both stop every
    server the demo started."""
    from rag_monitor.demo.stopping import Terminated, sigterm_as_interrupt

    options = DemoOptions(quick=args.quick, serve=args.serve, fresh=args.fresh, seed=args.seed,
                          phoenix=args.phoenix, data_dir=args.data_dir)
    try:
        with sigterm_as_interrupt():
            run_demo(options)
    except Terminated:
        print("\nterminated: the demo's servers are stopped", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    return 0


# --- data directory -------------------------------------------------------------------------------


def _prepare_data_dir(options: DemoOptions) -> int:
    """Wipe or continue the data directory; returns this run's number (1 for a fresh start)."""
    root = options.data_dir
    state_path = root / STATE_FILE
    previous = json.loads(state_path.read_text()) if state_path.exists() else None
    fresh = options.fresh
    if previous is not None and fresh is None:
        fresh = True
        if sys.stdin.isatty():
            answer = input(f"A previous demo run is in {root}. [c]ontinue it or start [f]resh? [f] ").strip().lower()
            fresh = not answer.startswith("c")
    if previous is None and root.exists() and any(p.name != "cache" for p in root.iterdir()):
        raise ValueError(f"{root} exists and is not a demo data directory (no {STATE_FILE}); choose another --data-dir")
    if previous is not None and fresh:
        for child in root.iterdir():
            if child.name != "cache":  # keep the corpus embeddings: they depend only on the corpus
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        previous = None
    run = 1 if previous is None else int(previous.get("runs", 1)) + 1
    root.mkdir(parents=True, exist_ok=True)
    state_path.write_text(json.dumps({"runs": run}))
    return run


# --- the run ----------------------------------------------------------------------------------------


def run_demo(options: DemoOptions) -> DemoResult:
    """Run the whole demo; returns what the summary shows (and prints it to ``options.out``)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = options.out
    run = _prepare_data_dir(options)
    root = options.data_dir.resolve()
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    notes: list[str] = []
    say(f"rag-monitor demo (run {run}, seed {options.seed}{', quick' if options.quick else ''}); data in {root}")

    with contextlib.ExitStack() as stack:
        from rag_monitor.demo.links import demo_links, report_commands, review_after_exit
        from rag_monitor.demo.services import AlertingStack, PhoenixServer, free_port

        phoenix = None
        if options.phoenix and PhoenixServer.available():
            phoenix = PhoenixServer(root / "phoenix")
            say("  starting Phoenix (about 10 s)...")
            phoenix.start()
            stack.callback(phoenix.stop)
        elif options.phoenix:
            notes.append("Phoenix is not installed (pip install arize-phoenix): traces are not browsable; the agent still works.")

        from rag_monitor.demo.probes import RetrievalHook

        hook = stack.enter_context(RetrievalHook())  # the app's retrieval hook, for the agent's probes
        agent = _start_agent(root, phoenix.url if phoenix else "", stack, free_port, options.quick, hook.url)
        alerting = None
        if AlertingStack.available():
            alerting = stack.enter_context(AlertingStack(root / "alerting", [f"127.0.0.1:{agent.settings.http_port}"], DEMO_OVERRIDES))
        else:
            notes.append("Prometheus and Alertmanager are not installed (apt-get install prometheus prometheus-alertmanager): "
                         "no alert rules are evaluated, so you miss the pages and their regression/drift triage; "
                         "the metrics are still at /metrics.")
        urls = demo_links(agent, alerting, phoenix.url if phoenix else "", REVIEW_TOKEN)

        human = HumanQueue(agent.store)
        phases, drift, alerts = _play(options, run, root, agent, alerting, say, hook, human)
        if alerting is not None:
            alerts = alerting.webhook.alerts

        from rag_monitor.demo.corpus import load_corpus
        from rag_monitor.demo.summary import collect_summary, render_summary

        archived = [d.id for d in load_corpus().documents if d.metadata.get("archived")]
        summary = collect_summary(agent, phases, alerts, urls, drift=drift, notes=notes, probes=hook.phases,
                                  archived_ids=archived, human_queue=human.waiting())
        summary.urls["report"] = str(_write_report(root, agent, summary, phases, alerts))
        text = render_summary(summary)
        say(text)
        say(report_commands(root / CONFIG_FILE, [r.release for r in summary.releases]))
        if not options.serve:
            say(review_after_exit(root / CONFIG_FILE, urls["review"]))
        result = DemoResult(summary, text, phases, list(alerts), drift, notes,
                            alerting.prometheus.url if alerting else None)
        if options.before_stop is not None:
            options.before_stop(result)
        if options.serve:
            say("Serving: open the URLs above; Ctrl-C (or SIGTERM) stops everything.")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return result


def _write_report(root: Path, agent: Any, summary: Any, phases: list, alerts: list) -> Path:
    """The one-page HTML report with plots (rag_monitor/demo/report.py), next to the data."""
    import yaml

    from rag_monitor.demo.report import write_report
    from rag_monitor.demo.services import alerts_dir

    limits = yaml.safe_load((alerts_dir() / "thresholds.yaml").read_text())  # the demo keeps these two
    profile = next(p for p in agent.profiles if p.name == DRIFT_PROFILE)
    return write_report(root / "report", agent, summary, phases, alerts, DRIFT_PROFILE, alpha=profile.alpha,
                        p_floor=profile.page_rule().p_floor,
                        thresholds={"unsupported": limits["faithfulness"]["max_unsupported_ratio"],
                                    "false_exclusion": limits["filter_false_exclusion"]["max_ratio"]})


def _start_agent(root: Path, phoenix_url: str, stack: contextlib.ExitStack, free_port: Any, quick: bool, probes_url: str) -> Any:
    import yaml

    from rag_monitor.agent.service import Agent
    from rag_monitor.demo.corpus import load_corpus
    from rag_monitor.demo.probes import write_probe_set
    from rag_monitor.review.auth import hash_token
    from rag_monitor.settings import load_settings

    overrides = {
        "otlp_port": free_port(), "http_port": free_port(), "data_dir": str(root / "agent"),
        "review_tokens": f"{HUMAN}:admin:{hash_token(REVIEW_TOKEN)},{SIMULATED}:reviewer:{hash_token(SIMULATED_TOKEN)}",
        "phoenix_url": phoenix_url,
        "score_interval_s": 1.0, "root_timeout_s": 5.0, "torch_threads": 1, "drift_feed_interval_s": 1.0,
        "storage_usd_per_query": 0.00001,
        **write_configs(root, quick),
        "probes_url": probes_url, "probes_interval_s": 2.0,
        "probes_path": str(write_probe_set(load_corpus(), root / "config" / "probes.yaml")),
    }
    # The same settings as a file beside the store: `rag-monitor ... --config` reads this store.
    (root / CONFIG_FILE).write_text(yaml.safe_dump(overrides, sort_keys=False))
    agent = Agent(load_settings(overrides=overrides, environ={}))
    agent.start(timeout_s=300)  # over 60 s on a loaded machine, where the default ended two runs
    stack.callback(agent.stop)
    return agent


def _play(options: DemoOptions, run: int, root: Path, agent: Any, alerting: Any, say: Any, hook: Any,
          human: HumanQueue) -> tuple[list, list, list]:
    import rag_monitor
    from rag_monitor.demo.app import MiniLMEmbedder, SupportApp
    from rag_monitor.sdk import ShadowConfig
    from rag_monitor.demo.corpus import load_corpus
    from rag_monitor.demo.reviewer import SimulatedReviewer
    from rag_monitor.demo.signals import DemoIndex, LagMarks
    from rag_monitor.demo.traffic import ProgressBar, TrafficRunner, build_script, plan_phases

    suffix = "" if run == 1 else f"-{run}"
    phases = [p for p in plan_phases(quick=options.quick, release_suffix=suffix, scale=options.scale)
              if options.phases is None or p.name in options.phases]
    corpus = load_corpus()
    say("  loading all-MiniLM-L6-v2 and indexing the corpus...")
    endpoint = f"http://127.0.0.1:{agent.settings.otlp_port}"
    monitors = {}
    for phase in phases:
        name = phase.release.name
        if name not in monitors:
            monitors[name] = rag_monitor.init(service_name=SERVICE_NAME, endpoint=endpoint, release=name, schedule_delay_s=0.5,
                                              shadow=ShadowConfig(share=1.0, timeout_s=10.0, max_concurrency=1, max_pending=4))
    base = SupportApp(corpus, monitors[phases[0].release.name], MiniLMEmbedder(), phases[0].release, cache_dir=root / "cache")
    # One app per phase: the full demo's provider update runs release r1 with another model version.
    apps = {p.name: base.with_release(p.release, monitors[p.release.name]) for p in phases}
    index, lag_marks = DemoIndex(corpus, now=time.time()), LagMarks(agent.registry)
    index.publish(monitors[phases[0].release.name])
    for app in apps.values():
        app.versions = index.current
    for phase in phases:
        if phase.shadow is not None:
            apps[phase.name].shadow = base.with_release(phase.shadow, monitors[phase.release.name])
    runner = TrafficRunner(corpus, apps, seed=options.seed)
    drift = DriftRuns(agent.store)
    reviewer = SimulatedReviewer(f"http://127.0.0.1:{agent.settings.http_port}", SIMULATED_TOKEN, corpus)

    def review_pass(limit: int) -> None:
        human.reserve()  # first: the person's share is never offered to the simulated reviewer
        reviewer.review_available(limit)

    progress = ProgressBar(options.progress)
    recent: list[str] = []
    stats = []
    background: list[Every] = []
    try:
        for i, phase in enumerate(phases):
            say(f"  phase {i + 1}/{len(phases)}: {phase.name}: {phase.description}")
            script = build_script(phase, corpus, options.seed)
            deployed_at = time.time()
            drift.phase_started(phase.name, deployed_at)
            hook.deploy(apps[phase.name])
            if phase.release.stale_index:
                apps[phase.name].versions = index.ship_stale_snapshot(monitors[phase.release.name], time.time())
            stats.append(runner.run(phase, script, progress=progress, on_query=lambda a: recent.append(a.trace_id)))
            for monitor in monitors.values():
                monitor.force_flush()
            stats[-1].index_lag = lag_marks.delta()
            hook.record_phase(agent.store, phase.name, phase.release.name, deployed_at)
            if phase.name == "baseline":
                background.append(Every(3.0, drift.collect, "drift"))
                background.append(Every(2.0, lambda: review_pass(25), "reviewer"))
            if phase.name == "shift" and alerting is not None and not wait_for_drift_page(alerting, options.quick):
                say("  the drift page has not come yet: it may read as the next release's regression")
        wait_stored(agent, recent[-20:])
        wait_scored(agent)
        played = [p.name for p in phases]
        if "shift" in played:  # the drift story: its reference fills in the baseline
            wait_for_drift_run(agent, drift)
        review_pass(100)
        if alerting is not None:
            wait_for_story(alerting, options.quick, options.alert_wait_s, played)
    finally:
        for worker in background:
            worker.stop()
        for monitor in monitors.values():
            monitor.shutdown()
        reviewer.close()
    for worker in background:
        for error in worker.errors[:3]:
            say(f"  warning: {error}")
    return stats, drift.results, []
