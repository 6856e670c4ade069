"""The agent: composes ingest, store, metrics, forwarding and the background workers.

Usage::

    agent = Agent(load_settings("agent.yaml"))
    agent.start()          # in a background thread; returns when both servers listen
    ...
    agent.stop()           # drains what was accepted, then closes the store

or ``rag-monitor agent --config agent.yaml`` (``Agent.run()`` in the foreground).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from rag_monitor import semconv
from rag_monitor.agent.forwarder import SpanForwarder
from rag_monitor.agent.http import health_routes, metrics_routes, otlp_app
from rag_monitor.agent.observe import QueryObserver, RegenerationDetector
from rag_monitor.agent.pipeline import IngestPipeline
from rag_monitor.agent.scoring import ScoringLoop, phoenix_annotator
from rag_monitor.agent.scrape import ReviewStatsCollector
from rag_monitor.alerts.metrics import AgentMetrics
from rag_monitor.collectors.assembly import TraceAssembler
from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.otlp import encode_export_request
from rag_monitor.collectors.pricing import PriceTable
from rag_monitor.collectors.pseudonyms import load_pseudonym_key
from rag_monitor.collectors.redaction import Redactor
from rag_monitor.config_files import CONFIG_FILES, config_path, load_config
from rag_monitor.detectors.faithfulness import load_scorer
from rag_monitor.detectors.faithfulness.worker import FaithfulnessWorker
from rag_monitor.detectors.feed import DriftFeed, SentenceEmbedder
from rag_monitor.detectors.jobs import DriftScheduler
from rag_monitor.detectors.profiles import load_profiles
from rag_monitor.review.auth import Reviewers
from rag_monitor.review.sampler import Sampler, SamplingConfig
from rag_monitor.review.web import ReviewApp
from rag_monitor.settings import AgentSettings
from rag_monitor.store import StoreUnavailable, open_store

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, settings: AgentSettings, registry: CollectorRegistry | None = None):
        self.settings = s = settings
        Path(s.data_dir).mkdir(parents=True, exist_ok=True)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.instance = f"{socket.gethostname()}:{os.getpid()}:{s.otlp_port}"
        """This replica's name: it holds drift runs and locks in the shared store."""
        self.store = open_store(
            s.resolved_store_url(), recent_ttl_s=s.recent_ttl_s,
            busy_timeout_s=s.store_timeout_s, connect_timeout_s=s.store_timeout_s,
        )
        self._build_drift()
        self._build_ingest()
        self._build_review()
        self._build_scoring()
        self._servers: list = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._workers: list[threading.Thread] = []

    # --- the planes ---------------------------------------------------------------------------

    def _build_drift(self) -> None:
        s = self.settings
        self.profiles = load_config("detector_profiles", s.detector_profiles, load_profiles, list)
        self.drift_feed = DriftFeed(
            self.store, self.profiles,
            embedder=SentenceEmbedder(s.embedding_model, threads=s.torch_threads),
            embedding_model=s.embedding_model,
            on_dropped=lambda n: self.metrics.spans_dropped.labels("drift_feed_full").inc(n),
        )
        self.drift = DriftScheduler(self.store, self.profiles, holder=self.instance)

    def _build_ingest(self) -> None:
        s = self.settings
        overrides = {
            name: value
            for name in ("max_body_bytes", "max_attribute_chars", "max_pending_traces", "root_timeout_s")
            if (value := getattr(s, name))
        }
        self.limits = load_config("ingest_config", s.ingest_config, lambda p: IngestLimits.load(p, **overrides),
                                  lambda: IngestLimits(**overrides))
        self.prices = load_config("price_table", s.price_table, PriceTable.load, lambda: PriceTable([]))
        key = load_pseudonym_key(s.pseudonym_key, s.data_dir)
        if not s.pseudonym_key and s.store_url:
            log.warning("pseudonym_key is not set: replicas sharing this store will pseudonymise the same "
                        "identifier differently (each keeps its own key in its data_dir); set the same key on all")
        self.redactor = load_config("redaction_rules", s.redaction_rules, lambda p: Redactor.load(p, pseudonym_key=key),
                                    lambda: Redactor(pseudonym_key=key))
        self.sampler = Sampler(load_config("sampling_config", s.sampling_config, SamplingConfig.load, SamplingConfig))
        files = ", ".join(f"{name}={config_path(name, getattr(s, name)) or 'none'}" for name in CONFIG_FILES)
        log.info("config files: %s; %d priced models; drift profiles: %s", files, len(self.prices.prices),
                 ", ".join(p.name for p in self.profiles) or "none")
        self.observer = QueryObserver(
            self.metrics,
            self.prices.call_cost,
            top_intents=s.top_intents,
            top_tenants=s.top_tenants,
            top_releases=s.top_releases,
            regeneration=RegenerationDetector(s.regeneration_window_s, s.regeneration_similarity),
        )
        self.observer.releases.refresh(self.store)
        self.forwarder: SpanForwarder | None = None
        if s.phoenix_url:
            self.forwarder = SpanForwarder(
                s.phoenix_url,
                encode=lambda spans: encode_export_request(_with_project(spans, s.phoenix_project)),
                on_outcome=lambda outcome, n: self.metrics.forwarded_spans.labels(outcome).inc(n),
                max_queue=s.forward_queue_spans,
            )
        self.pipeline = IngestPipeline(
            store=self.store,
            metrics=self.metrics,
            observer=self.observer,
            assembler=TraceAssembler.from_limits(self.limits),
            redactor=self.redactor,
            sampler=self.sampler,
            limits=self.limits,
            forward=self.forwarder.submit if self.forwarder else None,
            on_records=self.drift_feed.offer,
        )

    def _build_review(self) -> None:
        s = self.settings
        self.review_stats = ReviewStatsCollector(self.store)
        self.registry.register(self.review_stats)
        self.reviewers = Reviewers.parse(s.review_tokens)
        if not len(self.reviewers):
            log.warning("no reviewers configured (review_tokens): the review page will refuse every login")
        self.review_app = ReviewApp(self.store, self.reviewers, claim_s=s.review_claim_s, on_review=self._on_review)

    def _build_scoring(self) -> None:
        s = self.settings
        scorer = load_scorer(s.hhem_model_path or None, threshold=s.scorer_threshold, torch_threads=s.torch_threads)
        self.scoring = ScoringLoop(
            self.store, FaithfulnessWorker(scorer), self.metrics, self.observer.labels_of,
            annotate=phoenix_annotator(s.phoenix_url) if s.phoenix_url else None,
            holder=self.instance, lease_s=max(5.0, 5 * s.score_interval_s),
        )

    # --- HTTP apps ------------------------------------------------------------------------

    def ready(self) -> bool:
        try:
            self.store.ping()
        except StoreUnavailable:
            return False
        return True

    def build_otlp_app(self) -> Starlette:
        return otlp_app(
            self.pipeline,
            max_body_bytes=self.limits.max_body_bytes,
            bearer_token=self.settings.otlp_token,
            max_concurrent=self.settings.max_concurrent_requests,
            ready=self.ready,
        )

    def build_http_app(self) -> Starlette:
        return Starlette(routes=[
            *metrics_routes(self.registry, self.refresh_gauges),
            *health_routes(self.ready),
            *self.review_app.routes(),
        ])

    def _on_review(self, item, labels) -> None:
        self.review_stats.invalidate()

    def refresh_gauges(self) -> None:
        """Gauges read from the store at scrape time (the same on every replica)."""
        try:
            for state, n in self.store.queue_depth().items():
                self.metrics.review_queue_depth.labels(state).set(n)
            for profile in self.profiles:
                self._export_drift(profile)
        except Exception as exc:  # noqa: BLE001 - a scrape must still answer when the store is down
            log.warning("could not read store gauges: %s", exc)

    def _export_drift(self, profile) -> None:
        """The latest completed run of a profile, whichever replica ran it."""
        for run in self.store.drift_runs(profile.name, limit=5):
            result = run.result or {}
            if result.get("status") != "done":
                continue
            m, labels = self.metrics, (profile.signal, profile.detector)
            m.drift_statistic.labels(*labels).set(result["statistic"])
            m.drift_p_value.labels(*labels).set(result["p_value"])
            m.drift_detected.labels(*labels).set(1 if result["is_drift"] else 0)
            m.drift_window_size.labels(*labels, "reference").set(result["n_reference"])
            m.drift_window_size.labels(*labels, "current").set(result["n_current"])
            m.drift_last_run.labels(*labels).set(run.finished_at or run.started_at)
            return

    # --- background work --------------------------------------------------------------------

    def _every(self, interval_s: float, fn, name: str) -> None:
        def loop() -> None:
            while not self._stop_event.wait(interval_s):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - one bad tick must not kill the worker
                    log.exception("background task %s failed", name)

        thread = threading.Thread(target=loop, name=f"rag-monitor-{name}", daemon=True)
        thread.start()
        self._workers.append(thread)

    def _maintenance(self) -> None:
        self.pipeline.expire()
        self.store.prune_recent()

    # --- lifecycle ----------------------------------------------------------------------------

    async def serve(self) -> None:
        import uvicorn

        s = self.settings
        configs = [
            uvicorn.Config(self.build_otlp_app(), host=s.otlp_host, port=s.otlp_port, log_level="warning", lifespan="off"),
            uvicorn.Config(self.build_http_app(), host=s.http_host, port=s.http_port, log_level="warning", lifespan="off"),
        ]
        self._servers = [uvicorn.Server(c) for c in configs]
        for server in self._servers:
            server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        await asyncio.gather(*(server.serve() for server in self._servers))

    def _start_background(self) -> None:
        if self.forwarder:
            self.forwarder.start()
        self._every(max(1.0, min(10.0, self.limits.root_timeout_s / 4)), self._maintenance, "maintenance")
        self._every(self.settings.score_interval_s, self.scoring.tick, "scoring")
        if self.profiles:
            self._every(self.settings.drift_feed_interval_s, self.drift_feed.tick, "drift-feed")
            self.drift.start()

    def start(self, timeout_s: float = 30.0) -> None:
        """Serve in a background thread; returns once both servers accept connections."""
        self._start_background()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.serve())

        self._thread = threading.Thread(target=run, name="rag-monitor-agent", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not (self._servers and all(s.started for s in self._servers)):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the agent's servers did not start (is the port taken?)")
            time.sleep(0.02)

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM, then drain and stop."""
        import signal

        self._start_background()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def request_stop(*_):
            for server in self._servers:
                server.should_exit = True

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        log.info("rag-monitor agent: OTLP on %s:%s, metrics and review on %s:%s",
                 self.settings.otlp_host, self.settings.otlp_port, self.settings.http_host, self.settings.http_port)
        try:
            loop.run_until_complete(self.serve())
        finally:
            self._shutdown_background()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop accepting, finish in-flight requests, drain forwarding, close the store."""
        for server in self._servers:
            server.should_exit = True
        if self._thread:
            self._thread.join(timeout_s)
        self._shutdown_background()

    def _shutdown_background(self) -> None:
        self._stop_event.set()
        self.drift.shutdown()
        for thread in self._workers:
            thread.join(5)
        if self.forwarder:
            self.forwarder.flush(5)
            self.forwarder.shutdown()
        self.store.close()


def _with_project(spans, project: str):
    """Spans keep the Phoenix project their app chose; the rest land in ``project``."""
    seen: set[int] = set()
    for span in spans:
        if id(span.resource) not in seen:
            seen.add(id(span.resource))
            span.resource.setdefault(semconv.OPENINFERENCE_PROJECT_NAME, project)
    return spans
