"""The agent's drift and ingest planes, built from its settings onto the ``Agent`` (``open`` calls
them in this order: the ingest plane's log line names the drift profiles).

    build_drift(agent)    # agent.profiles, drift_feed, drift, drift_exporter
    build_ingest(agent)   # agent.limits, prices, redactor, sampler, observer, regeneration,
                          # forwarder, tail_sampler, freshness, pipeline (with its sinks)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rag_monitor.agent.drift.export import DriftExporter
from rag_monitor.agent.drift.embedder import SentenceEmbedder
from rag_monitor.agent.drift.feed import DriftFeed
from rag_monitor.agent.drift.profiles import load_profiles
from rag_monitor.agent.drift.runs import DriftRunner
from rag_monitor.agent.follow_ups import FollowUpMatcher
from rag_monitor.agent.forwarder import ReadableSpans, SpanForwarder, phoenix_exporter
from rag_monitor.agent.freshness import FreshnessTracker
from rag_monitor.agent.graph import build_sinks
from rag_monitor.agent.observe import QueryObserver, RegenerationDetector
from rag_monitor.agent.pipeline import IngestPipeline
from rag_monitor.agent.tail_sampling import ForwardPolicy, TailSampler
from rag_monitor.collectors.assembly import TraceAssembler
from rag_monitor.collectors.config import IngestLimits
from rag_monitor.collectors.pricing import PriceTable
from rag_monitor.collectors.pseudonyms import load_pseudonym_key
from rag_monitor.collectors.redaction import Redactor
from rag_monitor.config_files import CONFIG_FILES, config_path, load_config
from rag_monitor.detectors.profiles import EMBEDDING_SIGNALS
from rag_monitor.extras import embeddings_installed
from rag_monitor.review.sampler import Sampler, SamplingConfig

if TYPE_CHECKING:
    from rag_monitor.agent.service import Agent

log = logging.getLogger("rag_monitor.agent.service")  # the start-up lines keep the logger they always had


def build_drift(agent: Agent) -> None:
    """The drift plane: profiles, the feed (sampling before embedding), the runner and exporter."""
    s = agent.settings
    agent.profiles = load_config("detector_profiles", s.detector_profiles, load_profiles, list)
    embedder = SentenceEmbedder(s.embedding_model, threads=s.torch_threads)
    watching_embeddings = sorted(p.name for p in agent.profiles if p.signal in EMBEDDING_SIGNALS)
    if watching_embeddings and not embeddings_installed():
        # Said once here, rather than an ImportError traceback from every drift-feed tick.
        embedder = None
        log.warning("drift on embeddings (profiles %s) uses only the vectors the app sends: the embeddings extra "
                    "is not installed (pip install 'rag-monitor[agent,embeddings]'), so queries without vectors "
                    "are left out", ", ".join(watching_embeddings))
    agent.drift_feed = DriftFeed(
        agent.store.reservoirs, agent.profiles,
        embedder=embedder,
        embedding_model=s.embedding_model,
        on_sampled=lambda signal, window, n: agent.metrics.drift_feed_sampled.labels(signal, window).inc(n),
        on_skipped=lambda signal, window, n: agent.metrics.drift_feed_skipped.labels(signal, window).inc(n),
    )
    agent.drift = DriftRunner(agent.store, holder=agent.instance)
    agent.drift_exporter = DriftExporter(agent.metrics)

def build_ingest(agent: Agent) -> None:
    """The ingest plane: limits, prices, redaction, sampling, the observer, re-asks, Phoenix forwarding,
    freshness, and the receiver with its sinks."""
    s = agent.settings
    overrides = {
        name: value
        for name in ("max_body_bytes", "max_attribute_chars", "max_pending_traces", "root_timeout_s")
        if (value := getattr(s, name))
    }
    agent.limits = load_config("ingest_config", s.ingest_config, lambda p: IngestLimits.load(p, **overrides),
                              lambda: IngestLimits(**overrides))
    agent.prices = load_config("price_table", s.price_table, PriceTable.load, lambda: PriceTable([]))
    key = load_pseudonym_key(s.pseudonym_key, s.data_dir)
    if not s.pseudonym_key and s.store_url:
        log.warning("pseudonym_key is not set: replicas sharing this store will pseudonymise the same "
                    "identifier differently (each keeps its own key in its data_dir); set the same key on all")
    agent.redactor = load_config("redaction_rules", s.redaction_rules, lambda p: Redactor.load(p, pseudonym_key=key),
                                lambda: Redactor(pseudonym_key=key))
    agent.sampler = Sampler(load_config("sampling_config", s.sampling_config, SamplingConfig.load, SamplingConfig))
    files = ", ".join(f"{name}={config_path(name, getattr(s, name)) or 'none'}" for name in CONFIG_FILES)
    log.info("config files: %s; %d priced models; drift profiles: %s", files, len(agent.prices.prices),
             ", ".join(p.name for p in agent.profiles) or "none")
    agent.observer = QueryObserver(
        agent.metrics, agent.prices.call_cost,
        top_intents=s.top_intents, top_tenants=s.top_tenants, top_releases=s.top_releases,
        cache_saving=agent.prices.cache_saving, storage_usd_per_query=s.storage_usd_per_query,
    )
    agent.regeneration = RegenerationDetector(
        agent.store.session_windows, s.regeneration_window_s, s.regeneration_similarity,
        on_regeneration=agent.observer.count_regeneration,
        on_regenerated_query=agent.observer.count_regenerated_query,
        claim_ttl_s=s.recent_ttl_s,
        on_unchecked=lambda n: agent.metrics.regeneration_unchecked.inc(n),
        follow_ups=FollowUpMatcher(agent.sampler.config.follow_up_patterns, agent.sampler.config.follow_up_window_s),
        on_follow_ups=lambda found: agent.pipeline.add_follow_ups(found),
    )
    agent.observer.releases.refresh(agent.store.releases)
    if s.phoenix_url:
        agent.forwarder = SpanForwarder(
            phoenix_exporter(s.phoenix_url),
            convert=ReadableSpans(project=s.phoenix_project),
            on_outcome=agent._forward_outcome,
            max_queue=s.forward_queue_spans,
            on_pending=lambda: agent.jobs.wakeup("forwarding"),
        )
        agent.tail_sampler = TailSampler(
            agent.forwarder.submit, ForwardPolicy.from_settings(s),
            on_trace=lambda reason: agent.metrics.forwarded_traces.labels(reason).inc(),
            on_spans=lambda outcome, n: agent.metrics.forwarded_spans.labels(outcome).inc(n),
            recent=agent.store.recent.get,
        )
    assembler = TraceAssembler.from_limits(agent.limits)
    agent.freshness = FreshnessTracker(agent.store.index_documents, agent.metrics, assembler.settings.document_committed_at_metadata_keys,
                                      on_events=agent.observer.changes.observe_index)
    agent.pipeline = IngestPipeline(
        store=agent.store,
        freshness=agent.freshness,
        metrics=agent.metrics,
        observer=agent.observer,
        assembler=assembler,
        redactor=agent.redactor,
        sampler=agent.sampler,
        limits=agent.limits,
        sinks=build_sinks(agent),
    )
