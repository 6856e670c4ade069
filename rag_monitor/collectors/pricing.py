"""Cost per query from token counts and an operator-maintained price table.

    prices = PriceTable.load("rag_monitor/defaults/collectors/prices.yaml")
    prices.cost("gpt-4o-mini-2024-07-18", prompt_tokens=812, completion_tokens=64)   # USD, or None
    prices.call_cost(record.model_calls[0])   # one call at its own model's price, cached tokens included
    prices.unknown_models        # Counter of model names with no price (cost None)
    price_query(record, prices.call_cost, storage_usd_per_query=1e-5).total_usd   # the query's cost

``price_query`` is the one definition of a query's cost: the agent's ``rag_query_cost_usd``, the
shadow report and the demo's summary all read it, so they agree.

Prices are USD per million tokens: ``input``, ``output`` and, where the provider discounts
prompt tokens read from its cache, ``cached_input`` (cached tokens cost ``input`` without it);
where it bills prompt tokens written to its cache apart (Anthropic: above ``input``),
``cached_write`` (written tokens cost ``input`` without it). Both cached parts are part of the
call's prompt tokens (``collectors/usage.py``), so a call costs
``(prompt - read - written) * input + read * cached_input + written * cached_write + completion * output``.
Embedding models are rows like any other (``output: 0``). A pattern is an exact name, a glob (``gpt-4o-mini*``), or
a prefix (a pattern ending in ``*``); matching ignores case, and the most specific pattern
(the longest) wins, so ``gpt-4o-mini*`` beats ``gpt-4o*`` whatever their order in the file.
An unknown model costs ``None`` (never 0: a free-looking query would hide spend) unless the
table sets ``unknown:`` prices, and is counted either way.

Calls billed per request rather than per token (a reranker billed per search, a managed vector
index per query) are rows of ``calls:``, ``per_call`` or ``per_1k_calls`` USD, matched the same
way against the reranker's model or the retrieval's data source (``gen_ai.data_source.id``): a
call that matches one is billed per call, whatever tokens it reports. A rerank or retrieval with
neither tokens nor a per-call price costs nothing, as before.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from rag_monitor.record import ModelCall, QueryRecord

__all__ = ["CallPrice", "ModelPrice", "PriceTable", "QueryCost", "price_query"]

_MAX_CACHED_MODELS = 4096


@dataclass(frozen=True, slots=True)
class ModelPrice:
    pattern: str
    input_per_million: float
    output_per_million: float
    cached_input_per_million: float | None = None
    """Prompt tokens read from the provider's cache; None: priced as ``input``."""
    cached_write_per_million: float | None = None
    """Prompt tokens written to the provider's cache; None: priced as ``input``."""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0,
             cache_write_tokens: int = 0) -> float:
        """USD; ``cached_prompt_tokens`` (read) and ``cache_write_tokens`` (written) are part of ``prompt_tokens``."""
        cached = min(cached_prompt_tokens, prompt_tokens)
        written = min(cache_write_tokens, prompt_tokens - cached)
        rate = self.input_per_million
        read_rate = rate if self.cached_input_per_million is None else self.cached_input_per_million
        write_rate = rate if self.cached_write_per_million is None else self.cached_write_per_million
        return ((prompt_tokens - cached - written) * rate + cached * read_rate + written * write_rate
                + completion_tokens * self.output_per_million) / 1e6


@dataclass(frozen=True, slots=True)
class CallPrice:
    pattern: str
    usd_per_call: float


def _call_price(pattern: str, item: Any, where: str) -> CallPrice:
    keys = set(item) if isinstance(item, dict) else set()
    if len(keys & {"per_call", "per_1k_calls"}) != 1 or keys - {"per_call", "per_1k_calls"}:
        raise ValueError(f"{where}: call price for {pattern!r} needs one of 'per_call' or 'per_1k_calls' (USD), got {item!r}")
    try:
        usd = float(item["per_call"]) if "per_call" in item else float(item["per_1k_calls"]) / 1000
    except (TypeError, ValueError):
        raise ValueError(f"{where}: call price for {pattern!r} must be a number, got {item!r}") from None
    if usd < 0:
        raise ValueError(f"{where}: negative price for {pattern!r}: {item!r}")
    return CallPrice(pattern.lower(), usd)


def _most_specific_first(prices: list) -> list:
    return sorted(prices, key=lambda p: len(p.pattern.rstrip("*")), reverse=True)


def _match(prices: list, key: str):
    return next((p for p in prices if p.pattern == key), None) or next(
        (p for p in prices if fnmatch.fnmatchcase(key, p.pattern)), None)


def _price(pattern: str, item: dict[str, Any], where: str) -> ModelPrice:
    try:
        prices = float(item["input"]), float(item.get("output", 0.0))
        cached, written = (None if item.get(key) is None else float(item[key]) for key in ("cached_input", "cached_write"))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(
            f"{where}: price for {pattern!r} needs numeric 'input' (and 'output', optionally 'cached_input' "
            f"and 'cached_write') USD per million tokens, got {item!r}"
        ) from None
    if min(prices) < 0 or any(v is not None and v < 0 for v in (cached, written)):
        raise ValueError(f"{where}: negative price for {pattern!r}: {item!r}")
    return ModelPrice(pattern.lower(), *prices, cached, written)


class PriceTable:
    """Model name -> USD per million input/output tokens."""

    def __init__(self, prices: list[ModelPrice], unknown: ModelPrice | None = None, calls: list[CallPrice] = ()):
        # Longest pattern first = most specific first.
        self.prices = _most_specific_first(prices)
        self.calls = _most_specific_first(list(calls))
        self.unknown = unknown
        self.unknown_models: Counter[str] = Counter()
        self._cache: dict[str, ModelPrice | None] = {}
        self._call_cache: dict[str, CallPrice | None] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_mapping(cls, data: dict[str, Any], where: str = "price table") -> PriceTable:
        models = data.get("models") or {}
        if not isinstance(models, dict):
            raise ValueError(f"{where}: 'models' must map model patterns to prices, got {type(models).__name__}")
        calls = data.get("calls") or {}
        if not isinstance(calls, dict):
            raise ValueError(f"{where}: 'calls' must map model or data-source patterns to per-call prices, got {type(calls).__name__}")
        unknown = data.get("unknown")
        return cls(
            [_price(str(pattern), item, where) for pattern, item in models.items()],
            _price("*", unknown, where) if unknown else None,
            [_call_price(str(pattern), item, where) for pattern, item in calls.items()],
        )

    @classmethod
    def load(cls, path: str | Path) -> PriceTable:
        import yaml

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping with 'models:', got {type(data).__name__}")
        return cls.from_mapping(data, str(path))

    def lookup(self, model: str) -> ModelPrice | None:
        """The price that applies to ``model``, or None when no pattern matches."""
        key = model.strip().lower()
        if key in self._cache:
            return self._cache[key]
        found = _match(self.prices, key)
        with self._lock:
            if len(self._cache) < _MAX_CACHED_MODELS:  # model names are few; bound it anyway
                self._cache[key] = found
        return found

    def per_call(self, name: str | None) -> float | None:
        """USD per call for a model or data source in ``calls:``; None when no row matches."""
        if not name or not self.calls:
            return None
        key = name.strip().lower()
        if key in self._call_cache:
            found = self._call_cache[key]
        else:  # the glob match once per name (every model call asks)
            found = _match(self.calls, key)
            with self._lock:
                if len(self._call_cache) < _MAX_CACHED_MODELS:
                    self._call_cache[key] = found
        return None if found is None else found.usd_per_call

    def call_cost(self, call: ModelCall) -> float | None:
        """USD for one call: per call when ``calls:`` prices it, else its tokens at its own model's
        price; None for an unpriced model, and for a tokenless rerank or retrieval without a per-call price."""
        per_call = self.per_call(call.model)
        if per_call is not None:
            return per_call
        if call.kind != "llm" and not (call.input_tokens or call.output_tokens):
            return None
        return self.cost(call.model, call.input_tokens, call.output_tokens, call.cached_input_tokens,
                         call.cache_write_input_tokens)

    def cache_saving(self, call: ModelCall) -> float:
        """USD the provider's prompt cache saved on ``call``: its cached tokens at the input rate
        minus at the cached rate (0 without a cached rate, or for an unpriced model)."""
        price = self.lookup(call.model) if call.model and call.cached_input_tokens else None
        if price is None or price.cached_input_per_million is None:
            return 0.0
        cached = min(call.cached_input_tokens, call.input_tokens)
        return cached * (price.input_per_million - price.cached_input_per_million) / 1e6

    def cost(self, model: str | None, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0,
             cache_write_tokens: int = 0) -> float | None:
        """USD for one call; None for an unpriced model."""
        price = self.lookup(model) if model else None
        if price is None:
            with self._lock:
                name = model or ""
                if name not in self.unknown_models and len(self.unknown_models) >= _MAX_CACHED_MODELS:
                    name = "<other>"  # names come off the wire: keep the counter bounded
                self.unknown_models[name] += 1
            price = self.unknown
            if price is None:
                return None
        return price.cost(prompt_tokens, completion_tokens, cached_prompt_tokens, cache_write_tokens)


COMPONENT_OF_CALL = {"llm": "generation", "embedding": "embedding", "rerank": "rerank", "retrieval": "retrieval"}
"""The cost component each kind of call belongs to (``rag_query_component_cost_usd``); storage is the fifth."""


@dataclass(frozen=True)
class QueryCost:
    """One query's cost: ``total_usd`` (None unless every call that needs a price has one), its
    ``components`` (generation, embedding, rerank, retrieval, storage), each priced call with its
    cost, and the models left unpriced."""

    total_usd: float | None
    components: dict[str, float]
    priced_calls: list[tuple[ModelCall, float]]
    unpriced_models: frozenset[str]


def model_calls(record: QueryRecord) -> list[ModelCall]:
    """The record's calls; one LLM call from its totals for a record made before ``model_calls``."""
    if not record.model_calls and (record.llm_calls or record.total_tokens):
        return [ModelCall("llm", record.llm_model, record.prompt_tokens, record.completion_tokens)]
    return list(record.model_calls)


def price_query(record: QueryRecord, call_cost: Callable[[ModelCall], float | None],
                storage_usd_per_query: float = 0.0) -> QueryCost:
    """Every call at its own price (``PriceTable.call_cost``), plus the per-query storage share.

    A tokenless rerank or retrieval without a per-call price costs nothing; any other call
    without a price leaves the total None (a query half priced would look cheap).
    """
    priced: list[tuple[ModelCall, float]] = []
    unpriced: set[str] = set()
    components: dict[str, float] = {}
    for call in model_calls(record):
        cost = call_cost(call)
        if cost is None:
            if call.kind == "llm" or call.input_tokens or call.output_tokens:
                unpriced.add(call.model or "")
            continue
        priced.append((call, cost))
        component = COMPONENT_OF_CALL.get(call.kind, "generation")
        components[component] = components.get(component, 0.0) + cost
    if not priced or unpriced:
        return QueryCost(None, components, priced, frozenset(unpriced))
    if storage_usd_per_query:
        components["storage"] = storage_usd_per_query
    return QueryCost(sum(components.values()), components, priced, frozenset())
