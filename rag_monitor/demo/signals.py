"""The demo's index, caches and their part of the summary: freshness, stale share, cache hit rates,
cost by component.

The indexer publishes every document's current version before the baseline (searchable within
minutes of its commit). The bad release r2 ships with an index snapshot taken before a batch of
policy updates: the updates reach the production index hours after their commit (the freshness
lag jumps) while r2 keeps serving the old versions (its queries count as stale). r2 also keys its
caches with the session id, so repeated questions stop hitting them (the cache regression)::

    index = DemoIndex(corpus, now=time.time())
    index.publish(monitor)                                 # before the baseline phase
    app.versions = index.current                           # r1 serves the current versions
    bad_app.versions = index.ship_stale_snapshot(monitor)  # before the bad-release phase
    stats.index_lag = marks.delta()                        # after each phase: lag quantiles per release
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rag_monitor.demo.corpus import Corpus
from rag_monitor.demo.summary import _ratio, histogram_quantile, sums_by

SOURCE = "help-center"
DAY_S = 86400.0
UPDATED_SHARE = 0.5
"""Of the policy documents, the share updated just before the bad release (r2 serves their old version)."""
COMPONENTS = ("embedding", "retrieval", "rerank", "generation", "storage")


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from ``parts``."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class DemoIndex:
    """Document versions (commit times) and the index events the demo's indexer sends."""

    def __init__(self, corpus: Corpus, now: float) -> None:
        self.corpus = corpus
        self.now = now
        # Committed one to two days ago, each document at its own time.
        self.current = {d.id: now - DAY_S - DAY_S * _unit(d.id, "commit") for d in corpus.documents}

    def publish(self, monitor: Any) -> int:
        """Every document's current version, searchable 20 s to 5 min after its commit."""
        for doc_id, committed in self.current.items():
            monitor.index_event(doc_id, committed, indexed_at=committed + 20 + 280 * _unit(doc_id, "lag"), source=SOURCE)
        return len(self.current)

    def ship_stale_snapshot(self, monitor: Any, now: float) -> dict[str, float]:
        """A batch of policy updates lands 1-4 hours after its commit; returns the versions the stale
        snapshot serves (the ones before the updates)."""
        snapshot = dict(self.current)
        for doc in self.corpus.documents:
            if doc.metadata.get("family") and _unit(doc.id, "update") < UPDATED_SHARE:
                lag = 3600 + 3 * 3600 * _unit(doc.id, "update-lag")
                self.current[doc.id] = now - lag
                monitor.index_event(doc.id, now - lag, indexed_at=now, source=SOURCE)
        return snapshot


class LookupCache:
    """A bounded LRU map: what the demo app's embedding and retrieval caches are. Locked: a shadow
    candidate looks up from its own thread."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class LagMarks:
    """Increments of the freshness-lag histogram's buckets between calls: each phase gets the lag of
    the index events published during it (``PhaseStats.index_lag``), each release those of its phases."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._last: dict[float, float] = {}

    def _buckets(self) -> dict[float, float]:
        out: dict[float, float] = defaultdict(float)
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name == "rag_index_freshness_lag_seconds_bucket":
                    out[float(sample.labels["le"])] += sample.value
        return out

    def delta(self) -> dict[float, float]:
        now = self._buckets()
        change = {le: count - self._last.get(le, 0.0) for le, count in now.items()}
        self._last = now
        return change


@dataclass
class SignalsLine:
    release: str
    freshness_p50_p99_s: tuple[float | None, float | None]
    index_events: int
    stale_share: float | None
    checked_queries: int
    cache_hit_rates: dict[str, float | None]
    """``embedding``, ``retrieval`` (lookups) and ``prompt`` (tokens read from the prompt cache)."""
    cost_by_component: dict[str, float | None]
    """Mean USD per priced query of each component."""


def signal_lines(registry: Any, releases: Sequence[str], phases: Sequence[Any] = ()) -> list[SignalsLine]:
    """Per release, from the agent's registry; the lag from the phases' ``index_lag`` increments."""
    lag: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for phase in phases:
        for le, n in (getattr(phase, "index_lag", None) or {}).items():
            lag[phase.release][le] += n
    # Production only: a shadow candidate's queries carry the release of the app it shadows.
    production = {"variant": "production"}
    checked = sums_by(registry, "rag_index_checked_queries_total", ["release"], where=production)
    stale = sums_by(registry, "rag_index_stale_queries_total", ["release"], where=production)
    cache = sums_by(registry, "rag_cache_requests_total", ["release", "cache", "outcome"], where=production)
    tokens = sums_by(registry, "rag_tokens_total", ["release", "kind"], where=production)
    priced: dict[str, float] = defaultdict(float)
    component_sums: dict[tuple[str, str], float] = defaultdict(float)
    for family in registry.collect():
        for sample in family.samples:
            if sample.labels.get("variant") != "production":
                continue
            if sample.name == "rag_query_component_cost_usd_sum":
                component_sums[(sample.labels["release"], sample.labels["component"])] += sample.value
            elif sample.name == "rag_query_cost_usd_count":
                priced[sample.labels["release"]] += sample.value
    lines = []
    for release in releases:
        buckets = lag.get(release, {})
        events = int(buckets.get(float("inf"), 0.0))
        quantiles = tuple(histogram_quantile(q, list(buckets.items())) if events else None for q in (0.5, 0.99))
        hit_rates: dict[str, float | None] = {}
        for kind in ("embedding", "retrieval"):
            hits = cache.get((release, kind, "hit"), 0.0)
            hit_rates[kind] = _ratio(hits, hits + cache.get((release, kind, "miss"), 0.0))
        hit_rates["prompt"] = _ratio(tokens.get((release, "cached_prompt"), 0.0), tokens.get((release, "prompt"), 0.0))
        costs = {c: _ratio(component_sums[(release, c)], priced.get(release, 0.0)) if (release, c) in component_sums else None
                 for c in COMPONENTS}
        n = checked.get((release,), 0.0)
        lines.append(SignalsLine(release, quantiles, events, _ratio(stale.get((release,), 0.0), n), int(n), hit_rates, costs))
    return lines


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.1f}h" if seconds >= 3600 else f"{seconds / 60:.1f}m" if seconds >= 60 else f"{seconds:.0f}s"


def _per_1k(usd_per_query: float | None) -> str:
    """USD per 1,000 queries: an embedding's share is a few millionths of a dollar per query."""
    return "-" if usd_per_query is None else f"{usd_per_query * 1000:.3g}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def render_signals(lines: Sequence[SignalsLine]) -> list[str]:
    out = ["", "Freshness, caches, cost  lag p50/p99 (events)  stale (n)    cache hits emb/retr/prompt   "
               "$ per 1k queries emb/retr/rerank/gen/storage"]
    for s in lines:
        p50, p99 = s.freshness_p50_p99_s
        lag = f"{_duration(p50)}/{_duration(p99)} ({s.index_events})"
        hits = "/".join(_share(s.cache_hit_rates.get(k)) for k in ("embedding", "retrieval", "prompt"))
        cost = "/".join(_per_1k(s.cost_by_component.get(c)) for c in COMPONENTS)
        out.append(f"  {s.release:<22} {lag:<22} {_share(s.stale_share):>4} ({s.checked_queries:<4}) {hits:<28} {cost}")
    return out


def component_rows(lines: Sequence[SignalsLine]) -> list[Mapping[str, Any]]:
    """The report's table rows (strings, formatted like the summary)."""
    return [{"release": s.release, "lag": "/".join(_duration(v) for v in s.freshness_p50_p99_s), "events": s.index_events,
             "stale": _share(s.stale_share), "checked": s.checked_queries,
             "hits": {k: _share(v) for k, v in s.cache_hit_rates.items()},
             "cost": {c: _per_1k(v) for c, v in s.cost_by_component.items()}} for s in lines]
