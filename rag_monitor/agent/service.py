"""The agent: composes ingest, store, metrics, forwarding and the periodic jobs.

Usage::

    agent = Agent(load_settings("agent.yaml"))   # no I/O: settings, registry, scheduler
    agent.start()          # in a background thread; returns when both servers listen
    ...
    agent.stop()           # stop admitting, drain, flush, close

or ``rag-monitor agent --config agent.yaml`` (``Agent.run()`` in the foreground).

Every long-lived part is a component (``agent/component.py``) built from the settings by
``open`` (the drift and ingest planes in ``agent/planes.py``) and listed in dependency order by ``agent/graph.py``: store, Phoenix forwarder, probes,
scorer, drift jobs, the ingest sinks, the OTLP receiver, the scheduler. ``open`` starts all but
the scheduler (a benchmark can drive the pipeline without jobs); Starlette's lifespan then starts
the scheduler. Stop order: the servers stop accepting, in-flight requests finish (uvicorn's
drain), then the lifespan's shutdown stops the components in reverse (``close``): jobs first, the
sinks drain, forwarding flushes, the store closes last. ``/readyz`` is their health.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool

from rag_monitor.agent.component import Lifecycle
from rag_monitor.agent.forwarder import SpanForwarder
from rag_monitor.agent.http import (answering_half_closed, check_listen_address, health_routes, metrics_routes, otlp_app, 
                                     require_length)
from rag_monitor.agent.graph import LastOutcome, agent_components
from rag_monitor.agent.jobs import JobScheduler, agent_jobs
from rag_monitor.agent.planes import build_drift, build_ingest
from rag_monitor.agent.probes import HttpRetriever, ProbeExporter, ProbeRunner, load_probe_set
from rag_monitor.agent.scoring import ScoringLoop, judge_metrics, phoenix_annotator
from rag_monitor.agent.scrape import ReviewStatsCollector, StoreGauges
from rag_monitor.agent.tail_sampling import TailSampler
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors import assembly
from rag_monitor.collectors.otlp.body import PROTOBUF_DECODER
from rag_monitor.compiled import is_compiled
from rag_monitor.faithfulness import load_scorer
from rag_monitor.faithfulness.judge import judge_from_settings
from rag_monitor.faithfulness.worker import FaithfulnessWorker
from rag_monitor.review.auth import Reviewers
from rag_monitor.review.collector import ReviewMetricsCollector
from rag_monitor.review.reviewed_cache import ReviewedCache
from rag_monitor.review.unsupported import UnsupportedRateCollector
from rag_monitor.review.shadow_collector import ShadowMetricsCollector
from rag_monitor.review.proxy import ExternalView
from rag_monitor.review.web import ReviewApp
from rag_monitor.review.store_calibration import ThresholdAdopter
from rag_monitor.settings import AgentSettings, threshold_setting
from rag_monitor.store import StoreUnavailable, open_store
from rag_monitor.store.retention import days

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, settings: AgentSettings, registry: CollectorRegistry | None = None):
        self.settings = s = settings
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{s.otlp_port}"
        """This replica's name: it holds drift runs, job leases and locks in the shared store."""
        self.jobs = JobScheduler(self.metrics, holder=self.instance)
        self.store = None
        self.forwarder: SpanForwarder | None = None
        self.tail_sampler: TailSampler | None = None
        self.forward_outcomes = LastOutcome()
        self.lifecycle = Lifecycle()
        self._open_lock = threading.Lock()
        self._opened = self._closed = False
        self._lifespans = 0
        self._servers: list = []
        self._thread: threading.Thread | None = None
        self._startup_error: BaseException | None = None

    # --- start and stop -------------------------------------------------------------------------

    def open(self) -> None:
        """Store (migrated), models and planes; idempotent. The lifespan calls it before the servers bind."""
        with self._open_lock:
            if self._opened:
                return
            s = self.settings
            Path(s.data_dir).mkdir(parents=True, exist_ok=True)
            self.store = open_store(
                s.resolved_store_url(), recent_ttl_s=s.recent_ttl_s,
                history_retention_s=days(s.history_retention_days), review_retention_s=days(s.review_retention_days),
                prune_batch_rows=s.prune_batch_rows,
                busy_timeout_s=s.store_timeout_s, connect_timeout_s=s.store_timeout_s,
            )
            self.store.recent.prepare()
            self.jobs.try_lock = self.store.locks.try_lock
            build_drift(self)
            build_ingest(self)
            # A drift slot waits for its queries as long as the assembler may take to hand one over.
            self.drift_feed.lateness_s = self.limits.root_timeout_s
            self._build_review()
            self._build_scoring()
            self._build_probes()
            for job in agent_jobs(self):
                self.jobs.add(job)
            self.lifecycle.add(agent_components(self))
            try:
                self.lifecycle.start(until="scheduler")
            except BaseException:
                self.lifecycle.stop()
                raise
            self._opened = True

    def close(self) -> None:
        """Stop every started component in reverse start order; idempotent."""
        with self._open_lock:
            if not self._opened or self._closed:
                return
            self._closed = True
            self.lifecycle.stop()

    def settle(self, timeout_s: float = 10.0) -> bool:
        """Wait until every sink's queue is empty and its worker idle (tests and benchmarks call it
        before reading metrics); False when ``timeout_s`` passed first."""
        return self.pipeline.sinks.settle(timeout_s)

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        """Both servers' Starlette lifespan: the first to start opens, the last to stop closes."""
        try:
            await run_in_threadpool(self.open)
            await run_in_threadpool(self.lifecycle.start)  # the rest: the scheduler
        except BaseException as exc:
            self._startup_error = exc
            raise
        if getattr(app, "review_routes", False) is None:
            app.review_routes = self.review_app.routes()
            app.router.routes.extend(app.review_routes)
        self._lifespans += 1
        try:
            yield
        finally:
            self._lifespans -= 1
            if self._lifespans == 0:
                await run_in_threadpool(self.close)

    # --- the planes ---------------------------------------------------------------------------

    def _forward_outcome(self, outcome: str, n: int) -> None:
        self.metrics.forwarded_spans.labels(outcome).inc(n)
        self.forward_outcomes.saw(outcome)

    def _build_review(self) -> None:
        s = self.settings
        label = self.observer.releases.label  # one release fold for every family
        # One cache of the reviewed items for every review collector: one incremental store read per interval.
        self.reviewed = ReviewedCache(self.store.queue, min_interval_s=s.scrape_cache_interval_s)
        self.review_stats = ReviewStatsCollector(self.store, release_label=label, reviewed=self.reviewed)
        self.registry.register(self.review_stats)
        self.store_gauges = StoreGauges(self.store, self.profiles, self.drift_exporter, self.metrics)
        self.reviewers = Reviewers.parse(s.review_tokens)
        if not len(self.reviewers):
            log.warning("no reviewers configured (review_tokens): the review page will refuse every login")
        self.review_metrics = ReviewMetricsCollector(self.store, reviewers=[r.name for r in self.reviewers], release_label=label,
                                                     reviewed=self.reviewed)
        self.registry.register(self.review_metrics)
        # The scoring loops are built later; their scorers are named when Prometheus scrapes.
        self.unsupported_rates = UnsupportedRateCollector(
            self.store, lambda: [loop.scorer.name for loop in (getattr(self, "scoring", None), getattr(self, "judging", None)) if loop],
            label, reviewed=self.reviewed)
        self.registry.register(self.unsupported_rates)
        self.shadow_metrics = ShadowMetricsCollector(self.store, call_cost=self.prices.call_cost, top_candidates=s.top_releases,
                                                     storage_usd_per_query=s.storage_usd_per_query)
        self.registry.register(self.shadow_metrics)
        self.review_app = ReviewApp(
            self.store, self.reviewers, claim_s=s.review_claim_s, on_review=self._on_review,
            redact_text=lambda text: self.redactor.redact_text(text)[0],
            external=ExternalView.parse(s.trusted_proxies, s.review_external_url),
            double_share=s.review_double_share, guidelines=s.review_guidelines,
        )

    def _build_scoring(self) -> None:
        s = self.settings
        chosen = threshold_setting(s.scorer_threshold)
        fixed = chosen if isinstance(chosen, float) else None
        scorer = load_scorer(s.hhem_model_path or None, threshold=fixed, torch_threads=s.torch_threads,
                             device=s.hhem_device, offline=s.offline_scorer, lettucedetect_path=s.lettucedetect_model_path or None)
        annotate = phoenix_annotator(s.phoenix_url) if s.phoenix_url else None
        self.scoring = ScoringLoop(
            self.store, FaithfulnessWorker(scorer, batch_tokens=s.scorer_batch_tokens), self.metrics,
            self.observer.labels_of, annotate=annotate, holder=self.instance, lease_s=max(5.0, 5 * s.score_interval_s),
            threshold_source="setting" if fixed is not None else "shipped",
        )
        # scorer_threshold auto: the shipped threshold until the store's labels suffice (the job ticks it).
        self.threshold_adopter = ThresholdAdopter(self.store, self.scoring) if chosen == "auto" else None
        # The LLM judge scores the same sampled answers beside the main scorer, under its own name and lease.
        judge = judge_from_settings(s, on_call=judge_metrics(self.metrics))
        self.judging = None if judge is None else ScoringLoop(
            self.store, FaithfulnessWorker(judge, max_batch=4 * s.judge_concurrency), self.metrics,
            self.observer.labels_of, annotate=None, holder=self.instance,
            lease_s=max(5.0, 5 * s.score_interval_s, 3 * s.judge_timeout_s * (s.judge_max_retries + 1)),
        )

    def _build_probes(self) -> None:
        s = self.settings
        self.probe_exporter = ProbeExporter(self.store.probes, self.metrics)
        self.probe_runner = self.probe_retriever = None
        if not s.probes_url:
            if s.probes_path:
                log.warning("probes_path is set but probes_url is empty: the probes are off")
            return
        if not s.probes_path:
            raise ValueError("probes_url is set but probes_path is empty: give the probe set")
        probes = load_probe_set(s.probes_path, k=s.probes_k, limit=s.probes_golden_limit)
        self.probe_retriever = HttpRetriever(s.probes_url, timeout_s=s.probes_timeout_s)
        self.probe_runner = ProbeRunner(
            self.store.probes, probes, self.probe_retriever, concurrency=s.probes_concurrency, rbo_p=s.probes_rbo_p,
            on_query=self.metrics.probe_queries.inc, on_error=lambda reason: self.metrics.probe_errors.labels(reason).inc(),
        )
        log.info("neighbour-stability probes: %d probes against %s every %g s", len(probes),
                 urlsplit(s.probes_url).netloc.rpartition("@")[2], s.probes_interval_s)  # never its credentials

    def run_probes(self) -> None:
        """One run of the probe set (the ``probes`` job, one replica at a time)."""
        self.probe_runner.run(self.instance)
        self.metrics.probe_runs.inc()

    def prune_store(self) -> None:
        """Store-wide clean-up (the ``store_pruning`` job, one replica at a time)."""
        self.store.recent.prune()
        self.regeneration.prune()
        self.review_app.throttle.prune()
        deleted = {table: n for table, n in self.store.retention.prune().items() if n}
        if deleted:
            log.info("history past retention deleted: %s", deleted)

    # --- HTTP apps ------------------------------------------------------------------------

    def ready(self) -> bool:
        return self.readiness()[0]

    def readiness(self) -> tuple[bool, dict]:
        """(ready, body of ``/readyz``): every component's health; ready unless one failed."""
        if self.store is None or self._closed:
            return False, {"status": "failed", "components": {}, "reason": "stopped" if self._closed else "not started"}
        return self.lifecycle.report()

    def build_otlp_app(self) -> Starlette:
        s = self.settings

        def ingest(body: bytes, media_type: str, encoding: str | None):
            return self.pipeline.ingest(body, media_type, encoding)

        return otlp_app(
            ingest, self.metrics,
            max_body_bytes=lambda: self.limits.max_body_bytes,
            bearer_token=s.otlp_token,
            max_concurrent=s.max_concurrent_requests,
            max_reading=s.max_reading_requests,
            read_timeout_s=s.body_read_timeout_s,
            ready=self.readiness,
            client_of=ExternalView.parse(s.trusted_proxies).client,
            lifespan=self.lifespan,
        )

    def build_http_app(self) -> Starlette:
        app = Starlette(routes=[
            *metrics_routes(self.registry, self.refresh_gauges),
            *health_routes(self.readiness),
        ], lifespan=self.lifespan)
        app.review_routes = None  # added by the lifespan, once the store is open
        return app

    def refresh_gauges(self) -> None:
        """Gauges read from the store at scrape time (the same on every replica)."""
        self.store_gauges.refresh()
        try:
            self.probe_exporter.export()
        except StoreUnavailable as exc:  # the rest of the scrape still answers
            log.warning("could not read the probe results: %s", exc)

    def _on_review(self, item, labels) -> None:
        self.reviewed.invalidate()
        self.review_metrics.invalidate()
        self.unsupported_rates.invalidate()
        self.shadow_metrics.invalidate()

    # --- serving ----------------------------------------------------------------------------

    async def serve(self) -> None:
        """Both servers until either stops; then the other stops too."""
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # the agent's own handlers stop both servers at once
                yield

        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        s = self.settings
        protocol = answering_half_closed(AutoHTTPProtocol)
        configs = [
            # proxy_headers off: uvicorn would believe X-Forwarded-For from loopback; the review
            # page reads forwarded headers itself, from `trusted_proxies` only.
            uvicorn.Config(require_length(self.build_otlp_app()), host=s.otlp_host, port=s.otlp_port, http=protocol,
                           log_level="warning", lifespan="on", proxy_headers=False),
            uvicorn.Config(require_length(self.build_http_app()), host=s.http_host, port=s.http_port, http=protocol,
                           log_level="warning", lifespan="on", proxy_headers=False),
        ]
        self._servers = [Server(c) for c in configs]
        tasks = [asyncio.ensure_future(server.serve()) for server in self._servers]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        self.request_stop()
        await asyncio.gather(*tasks)

    def request_stop(self) -> None:
        for server in self._servers:
            server.should_exit = True

    def start(self, timeout_s: float = 60.0) -> None:
        """Serve in a background thread; returns once both servers accept connections."""
        # The servers' event loop, off the caller's thread (tests, the demo): the only thread the
        # agent starts itself; periodic work runs on the JobScheduler's APScheduler.
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="rag-monitor-agent", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not (self._servers and all(s.started for s in self._servers)):
            if self._startup_error is not None:
                raise RuntimeError(f"the agent did not start: {self._startup_error}") from self._startup_error
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the agent's servers did not start (is the port taken?)")
            time.sleep(0.02)

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM, then drain and stop."""
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop())
        signal.signal(signal.SIGINT, lambda *_: self.request_stop())
        # Ports, store, config files and models before the servers: a bad setting stops the
        # start with one message, not the servers' lifespan tracebacks.
        s = self.settings
        check_listen_address(s.otlp_host, s.otlp_port, "otlp_host/otlp_port")
        check_listen_address(s.http_host, s.http_port, "http_host/http_port")
        self.open()
        tune_garbage_collector()
        log.info("rag-monitor agent: OTLP on %s:%s (%s protobuf decoder, %s span assembly), metrics and review on %s:%s",
                 s.otlp_host, s.otlp_port, PROTOBUF_DECODER, "compiled" if is_compiled(assembly) else "interpreted",
                 s.http_host, s.http_port)
        asyncio.run(self.serve())
        if self._startup_error is not None:
            raise self._startup_error
        log.info("rag-monitor agent stopped")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop accepting, finish in-flight requests, then the lifespan flushes and closes."""
        self.request_stop()
        if self._thread:
            self._thread.join(timeout_s)
        self.close()  # when the servers never started (or a benchmark only opened the agent)


GC_YOUNG_THRESHOLD = 20_000
"""Container allocations between young-generation collections (CPython's default: 700)."""


def tune_garbage_collector() -> None:
    """Ingest allocates a few thousand short-lived containers per request (spans, attribute dicts,
    records): at the default threshold a collection ran every few spans, about 5% of the CPU per
    query, to find almost no cycles. The heap built at start (models, tables, caches) is frozen
    out of every later collection."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
