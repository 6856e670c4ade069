"""Every Prometheus metric the agent exports, in one place.

Names follow Prometheus conventions (base units, ``_seconds``, ``_total``, ``_usd``); latency and
cost are histograms so quantiles aggregate across replicas with ``histogram_quantile``. Label
values come from bounded sets: free-form values (tenants, intents, releases) pass through a
``LabelFolder`` that keeps the first N seen and folds the rest into ``other``.

The alert rules in ``alerts/``, docs/metrics.md and the Grafana dashboard are written against these
names; ``tests/alerts`` checks that every metric a rule uses is defined here.

Usage::

    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)
    metrics.queries.labels(release="r1", variant="production", intent="billing", tenant="acme").inc()
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rag_monitor.alerts.families import LeanCounter, LeanHistogram

OTHER = "other"
UNKNOWN = "unknown"

# Resolve p50/p95/p99 of every stage and query, from a sub-millisecond filter or cache hit to a
# tens-of-seconds generation: boundaries about 1.5x apart (an estimate within ~25% of the true
# quantile) from 0.1 ms to 60 s. A first bucket of 5 ms read every fast stage's p95 as "5 ms" and
# put a query's p50 below its own retrieve stage's (both interpolated in one bucket).
LATENCY_BUCKETS = (
    0.0001, 0.00015, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075,
    0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75,
    1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0,
)
COST_BUCKETS_USD = (
    0.00001, 0.00003, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0,
)
SCORE_BUCKETS = tuple(i / 20 for i in range(1, 21))
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
JOB_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
JUDGE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Commit-to-searchable lag: from a streaming indexer (seconds) to a weekly batch rebuild.
FRESHNESS_BUCKETS = (
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
    43200.0, 86400.0, 172800.0, 345600.0, 604800.0,
)
COST_COMPONENTS = ("embedding", "retrieval", "rerank", "generation", "storage")

METRIC_PREFIX = "rag_"


class LabelFolder:
    """Keeps the first ``limit`` distinct values of a label; later ones become ``other``.

    >>> f = LabelFolder(2); [f("a"), f("b"), f("c"), f("a")]
    ['a', 'b', 'other', 'a']
    """

    def __init__(self, limit: int, allowed: tuple[str, ...] | None = None):
        self.limit = limit
        self.allowed = frozenset(allowed) if allowed else None
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if not value:
            return UNKNOWN
        if self.allowed is not None:
            return value if value in self.allowed else OTHER
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return OTHER


class AgentMetrics:
    """The agent's metric families, registered on one registry (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        rv = ["release", "variant"]

        # --- queries, latency, cost ---
        self.queries = LeanCounter("rag_queries_total", "Queries answered, by release, variant, intent and tenant.", [*rv, "intent", "tenant"], registry=r)
        self.query_errors = LeanCounter("rag_query_errors_total", "Queries whose root span ended with an error.", rv, registry=r)
        self.refusals = LeanCounter("rag_refusals_total", "Queries the app refused to answer.", rv, registry=r)
        self.query_duration = LeanHistogram("rag_query_duration_seconds", "End-to-end query latency (root span).", rv, buckets=LATENCY_BUCKETS, registry=r)
        self.stage_duration = LeanHistogram("rag_stage_duration_seconds", "Latency of one pipeline stage.", ["stage", *rv], buckets=LATENCY_BUCKETS, registry=r)
        self.time_to_first_token = LeanHistogram("rag_time_to_first_token_seconds", "Time from the query's start to the generator's first token (g.first_token() or q.stream), what the user waits; the model's own wait is the generate span's rag.generation.stage_time_to_first_token_s.", rv, buckets=LATENCY_BUCKETS, registry=r)
        self.query_cost = LeanHistogram("rag_query_cost_usd", "Cost of one query in USD, from tokens and the price table.", rv, buckets=COST_BUCKETS_USD, registry=r)
        self.cost = LeanCounter("rag_cost_usd_total", "Cost in USD of every LLM, embedding and rerank call, by the call's own model.", [*rv, "model"], registry=r)
        self.tokens = LeanCounter("rag_tokens_total", "Tokens by kind (prompt, completion; cached_prompt and cache_write_prompt are the parts of prompt read from and written to the provider's cache) and the call's model.", [*rv, "kind", "model"], registry=r)
        self.component_cost = LeanHistogram(
            "rag_query_component_cost_usd",
            "Cost in USD of one part of a fully priced query: component=embedding, retrieval, rerank, generation (every LLM call), and storage (storage_usd_per_query, when set); rag_query_cost_usd is their sum.",
            [*rv, "component"], buckets=COST_BUCKETS_USD, registry=r,
        )
        self.cache_requests = LeanCounter("rag_cache_requests_total", "Lookups in the app's caches (cache=embedding, retrieval, response) by outcome (hit, miss); the prompt cache is rag_tokens_total{kind=\"cached_prompt\"}.", [*rv, "cache", "outcome"], registry=r)
        self.cache_saved = LeanCounter("rag_cache_saved_usd_total", "USD the provider's prompt cache saved (cache=prompt): cached prompt tokens priced at the input rate minus the cached rate.", [*rv, "cache"], registry=r)
        self.unpriced = LeanCounter("rag_unpriced_queries_total", "Queries with a model call whose model is missing from the price table, by that model.", ["model"], registry=r)
        self.release_info = Gauge("rag_release_info", "1 for every release seen, with its service.", ["service", "release"], registry=r)
        self.release_first_seen = Gauge("rag_release_first_seen_timestamp_seconds", "When the agents first saw each release (Unix time).", ["service", "release"], registry=r)

        # --- change events (agent/changes.py): what triage compares a guardrail's signal across ---
        self.change_events = Counter("rag_change_events_total", "Changes seen, by kind: release (a service's newest release), model (a new response model under one requested model name), prompt and config (a new rag.prompt.version / rag.config.version), index (a new rag.index.version of a source).", ["kind"], registry=r)
        self.change_last = Gauge("rag_change_last_timestamp_seconds", "When the latest change of each kind was first seen on this replica (Unix time), with what it changed to (change); one series per kind.", ["kind", "change"], registry=r)

        # --- index freshness ---
        self.freshness_lag = Histogram("rag_index_freshness_lag_seconds", "Commit-to-searchable lag of each new document version, from index events, by source.", ["source"], buckets=FRESHNESS_BUCKETS, registry=r)
        self.index_events = Counter("rag_index_events_total", "Index events by outcome: new_version (lag observed), not_newer (re-sent, re-indexed or older than the newest known), invalid.", ["outcome"], registry=r)
        self.index_checked_queries = Counter("rag_index_checked_queries_total", "Queries served at least one document whose served version (metadata commit time) and newest version (index events) are known.", rv, registry=r)
        self.index_stale_queries = Counter("rag_index_stale_queries_total", "Of the checked queries, those served a document older than its newest version committed before the query started.", rv, registry=r)

        # --- user feedback ---
        self.feedback = LeanCounter("rag_feedback_total", "User feedback events by kind: thumbs_up, thumbs_down, regenerate, copy, dwell, follow_up (marked by the app or detected), citation_click, share, edit.", [*rv, "kind"], registry=r)
        self.regenerations = LeanCounter("rag_regenerations_total", "Regeneration signals by source: explicit regenerate events and inferred near-duplicate re-asks, under the regenerated query's labels. A click and the re-ask it triggers are two signals of one regeneration: rates read rag_regenerated_queries_total.", [*rv, "intent", "source"], registry=r)
        self.regenerated_queries = LeanCounter("rag_regenerated_queries_total", "Queries regenerated (an explicit regenerate, a near-duplicate re-ask in the same session within the window, or both), each counted once: the numerator of the regeneration rate. Present at 0 beside every query series.", [*rv, "intent"], registry=r)
        self.regeneration_unchecked = Counter("rag_agent_regeneration_unchecked_total", "Queries not checked for an inferred regeneration (check queue full, or the store unavailable).", registry=r)

        # --- filters ---
        self.filtered_queries = LeanCounter("rag_filter_queries_total", "Queries that applied a filter, by filter kind.", [*rv, "filter_kind"], registry=r)
        self.filter_exclusions = LeanCounter(
            "rag_filter_exclusions_total",
            "Queries whose filter of this kind emptied its candidates (outcome=emptied) or removed at least one of its unfiltered top-k candidates (outcome=removed_topk: named in excluded_ids or excluded_documents, or fewer candidates out than in; an emptied filter counts in both). Each query counts once per filter kind and outcome.",
            [*rv, "filter_kind", "outcome"], registry=r,
        )
        # The sample-based false-exclusion rate is computed from reviews in the store at scrape
        # time (see ReviewStatsCollector): absent, never 0, when no reviewed query qualifies.

        # --- faithfulness (scored sample) ---
        self.faithfulness_score = Histogram("rag_faithfulness_score", "Faithfulness scores of sampled answers (1 = supported).", [*rv, "scorer"], buckets=SCORE_BUCKETS, registry=r)
        self.faithfulness_weighted = Counter(
            "rag_faithfulness_weighted_total",
            "Scored answers weighted by inverse inclusion probability, by verdict (supported, unsupported; refused, no_claims, no_context and not_scored (hidden content) apart, never scored; error when scoring failed).",
            [*rv, "scorer", "verdict"], registry=r,
        )
        self.faithfulness_scored = Counter("rag_faithfulness_scored_total", "Scored answers, unweighted (for minimum-sample guards).", [*rv, "scorer", "verdict"], registry=r)
        self.scorer_info = Gauge("rag_scorer_info", "The faithfulness scorers in use (1), with the threshold each flags unsupported answers below and where it came from (threshold_source: shipped, setting, or calibrated on the store's human labels under scorer_threshold auto); scorer=support-v1 or lexical-v1 means HHEM weights are not configured.", ["scorer", "version", "threshold", "threshold_source"], registry=r)
        self.judge_requests = Counter("rag_judge_requests_total", "LLM judge HTTP calls by outcome (ok, retried, malformed, error).", ["outcome"], registry=r)
        self.judge_latency = Histogram("rag_judge_request_seconds", "LLM judge HTTP call latency.", ["outcome"], buckets=JUDGE_BUCKETS, registry=r)
        self.judge_tokens = Counter("rag_judge_tokens_total", "Tokens the LLM judge consumed, by kind (input, output).", ["kind"], registry=r)
        self.judge_cost = Counter("rag_judge_cost_usd_total", "What the LLM judge cost (USD, from judge_usd_per_million_*).", registry=r)

        # --- sampling and review ---
        self.sampled = Counter("rag_sampled_total", "Queries chosen for review, by stratum.", ["stratum"], registry=r)
        self.review_pull_expired = Counter("rag_review_pull_expired_total", "Thumbs-down and follow-ups for queries no longer in the recent-records cache (too late to pull them into review).", registry=r)

        # --- drift ---
        self.drift_statistic = Gauge("rag_drift_statistic", "Latest drift test statistic.", ["signal", "detector"], registry=r)
        self.drift_p_value = Gauge("rag_drift_p_value", "Latest drift test p-value.", ["signal", "detector"], registry=r)
        self.drift_detected = Gauge("rag_drift_detected", "1 while the latest test pages (its evidence at or above the page threshold).", ["signal", "detector"], registry=r)
        self.drift_evidence = Gauge("rag_drift_evidence", "Evidence of the latest drift test: ln(1/p), p floored at the test's smallest p-value.", ["signal", "detector"], registry=r)
        self.drift_evidence_threshold = Gauge("rag_drift_evidence_threshold", "Natural log of the page threshold (from the false-page budget and the schedule): a test pages at p <= 1/threshold.", ["signal", "detector"], registry=r)
        self.drift_top_cluster = Gauge(
            "rag_drift_top_cluster_info",
            "1 for the latest run's most over- (direction=over) and under-represented (under) query cluster: a redacted example and its shares.",
            ["signal", "detector", "direction", "example", "current_share", "reference_share"], registry=r,
        )
        self.drift_window_size = Gauge("rag_drift_window_size", "Items in the drift test's windows.", ["signal", "detector", "window"], registry=r)
        self.drift_feed_sampled = Counter("rag_drift_feed_sampled_total", "Queries the drift feed sampled and wrote, by signal and window (current: the interval's reservoir of current_size; reference: Algorithm R over the reference period); only these are embedded.", ["signal", "window"], registry=r)
        self.drift_feed_skipped = Counter("rag_drift_feed_skipped_total", "Queries the drift feed passed over, by signal and window: not in the interval's reservoir or Algorithm R's pick, late for a finished slot, or nothing to embed (hidden content, no vectors and no embedder).", ["signal", "window"], registry=r)
        self.drift_last_run = Gauge("rag_drift_last_run_timestamp_seconds", "When the latest drift test finished (Unix time).", ["signal", "detector"], registry=r)

        # --- neighbour stability (probe set against its pinned baseline; agent/probes.py) ---
        self.probe_overlap = Gauge("rag_probe_topk_overlap", "Mean top-k overlap of the probes compared in the latest probe run with their pinned baselines, by measure (jaccard: Jaccard@k; rbo: rank-biased overlap). Absent when no probe could be compared.", ["measure"], registry=r)
        self.probe_overlap_min = Gauge("rag_probe_topk_overlap_min", "The lowest probe's top-k overlap with its baseline in the latest probe run, by measure.", ["measure"], registry=r)
        self.probe_compared = Gauge("rag_probe_compared_probes", "Probes compared with their baseline in the latest probe run (failed probes are not).", registry=r)
        self.probe_changed = Gauge("rag_probe_changed_probes", "Probes whose top-k (ids or order) differs from their baseline in the latest probe run.", registry=r)
        self.probe_last_run = Gauge("rag_probe_last_run_timestamp_seconds", "When the latest probe run finished, on any replica (Unix time).", registry=r)
        self.probe_change_announced = Gauge("rag_probe_index_change_announced", "1 while an announced index change (`rag-monitor probes announce`) is in force, else 0.", registry=r)
        self.probe_runs = Counter("rag_probe_runs_total", "Probe-set runs on this replica.", registry=r)
        self.probe_queries = Counter("rag_probe_queries_total", "Probe queries sent to the app's retrieval hook.", registry=r)
        self.probe_errors = Counter("rag_probe_errors_total", "Probe queries that failed, by reason (unreachable, timeout, http_status, malformed): no overlap is computed from them.", ["reason"], registry=r)

        # --- the agent's own health ---
        self.spans_received = Counter("rag_agent_spans_received_total", "Spans accepted by the OTLP receiver.", registry=r)
        self.spans_dropped = Counter("rag_agent_spans_dropped_total", "Spans dropped, by reason.", ["reason"], registry=r)
        self.traces_dropped = Counter("rag_agent_traces_dropped_total", "Traces dropped before assembly finished, by reason.", ["reason"], registry=r)
        self.traces_duplicate = Counter("rag_agent_traces_duplicate_total", "Assembled traces already stored (an exporter's retry, on this replica or another): counted once, where first stored.", registry=r)
        self.traces_partial = Counter("rag_agent_traces_partial_total", "Traces whose root span never arrived: stages without their query, not counted as queries.", registry=r)
        self.ingest_errors = Counter("rag_agent_ingest_errors_total", "Rejected OTLP requests, by reason.", ["reason"], registry=r)
        self.attributes_truncated = Counter("rag_agent_attributes_truncated_total", "Span attributes truncated to the size limit.", registry=r)
        self.embeddings_rejected = Counter("rag_agent_embeddings_rejected_total", "Embedding vectors rejected (NaN, infinite, wrong dimension).", ["reason"], registry=r)
        self.pii_redactions = Counter("rag_agent_pii_redactions_total", "PII occurrences redacted, by kind.", ["kind"], registry=r)
        self.traces_pending = Gauge("rag_agent_traces_pending", "Traces waiting for their root span.", registry=r)
        self.review_queue_depth = Gauge("rag_agent_review_queue_depth", "Review items by state.", ["state"], registry=r)
        self.scorer_backlog = Gauge("rag_agent_scorer_backlog", "Sampled answers waiting to be scored.", registry=r)
        self.store_latency = Histogram("rag_agent_store_latency_seconds", "Store operation latency.", ["op"], buckets=STORE_BUCKETS, registry=r)
        self.store_errors = Counter("rag_agent_store_errors_total", "Store operations that failed (503 to exporters while it lasts).", ["op"], registry=r)
        self.forwarded_spans = Counter("rag_agent_forwarded_spans_total", "Spans forwarded to Phoenix, by outcome: sent, failed, dropped (the forward queue was full), sampled_out (the tail sampler kept them out), annotation_failed.", ["outcome"], registry=r)
        self.forwarded_traces = Counter("rag_agent_forwarded_traces_total", "Traces the tail sampler decided, by reason: forwarded (review, scored, complaint, error, shadow, slow, budget; late_held, late_rebuilt: promoted after the decision) or not (sampled_out; late_unavailable: promoted but neither held nor in the recent records).", ["reason"], registry=r)
        self.sink_dropped = Counter("rag_agent_sink_dropped_total", "Items an ingest sink lost, because its queue was full or its consumer raised (records; spans for the forwarder sink).", ["sink"], registry=r)
        self.sink_queue_depth = Gauge("rag_agent_sink_queue_depth", "Items waiting in an ingest sink's bounded queue (records; spans for the forwarder sink).", ["sink"], registry=r)
        self.job_last_success = Gauge("rag_agent_job_last_success_timestamp_seconds", "When a periodic job last finished without error on this replica (Unix time).", ["job"], registry=r)
        self.job_duration = Histogram("rag_agent_job_duration_seconds", "Duration of one run of a periodic job.", ["job"], buckets=JOB_BUCKETS, registry=r)
        self.job_failures = Counter("rag_agent_job_failures_total", "Runs of a periodic job that raised (logged).", ["job"], registry=r)
