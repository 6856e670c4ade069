from __future__ import annotations


import pytest

from rag_monitor.collectors import PriceTable
from rag_monitor.config_files import shipped_path



def test_shipped_table_prefix_and_specificity():
    prices = PriceTable.load(shipped_path("price_table"))
    mini = prices.lookup("gpt-4o-mini")
    assert prices.lookup("gpt-4o-mini-2024-07-18") == mini  # versioned name, more specific than gpt-4o*
    assert prices.lookup("GPT-4o-2024-08-06").pattern == "gpt-4o*"
    expected = (1000 * mini.input_per_million + 100 * mini.output_per_million) / 1e6
    assert prices.cost("gpt-4o-mini-2024-07-18", 1000, 100) == pytest.approx(expected)


def test_unknown_model_is_none_and_counted():
    prices = PriceTable.from_mapping({"models": {"a*": {"input": 1, "output": 2}}})
    assert prices.cost("zzz", 10, 10) is None and prices.cost(None, 1, 1) is None
    assert prices.unknown_models == {"zzz": 1, "": 1}


def test_unknown_fallback_price():
    prices = PriceTable.from_mapping({"models": {}, "unknown": {"input": 1.0, "output": 3.0}})
    assert prices.cost("zzz", 1_000_000, 1_000_000) == 4.0 and prices.unknown_models["zzz"] == 1


def test_glob_and_exact():
    prices = PriceTable.from_mapping({"models": {"claude-?-haiku*": {"input": 1, "output": 1}, "m": {"input": 2, "output": 2}, "m*": {"input": 9, "output": 9}}})
    assert prices.cost("claude-3-haiku-2024", 1_000_000, 0) == 1.0
    assert prices.cost("m", 1_000_000, 0) == 2.0 and prices.cost("m2", 1_000_000, 0) == 9.0


@pytest.mark.parametrize("bad", [{"models": {"x": {"output": 1}}}, {"models": {"x": {"input": -1}}}, {"models": ["x"]},
                                 {"models": {"x": {"input": 1, "cached_write": -1}}}, {"models": {"x": {"input": 1, "cached_write": "dear"}}}])
def test_bad_tables_raise(bad):
    with pytest.raises(ValueError, match="x|models"):
        PriceTable.from_mapping(bad)


def test_cached_prompt_tokens_at_the_cached_rate():
    prices = PriceTable.from_mapping({"models": {"a": {"input": 2.0, "output": 8.0, "cached_input": 0.5}, "b": {"input": 2.0, "output": 8.0}}})
    # 1M prompt tokens of which 400k cached, 100k completion
    assert prices.cost("a", 1_000_000, 100_000, 400_000) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)
    assert prices.cost("b", 1_000_000, 100_000, 400_000) == pytest.approx(2.0 + 0.8)  # no cached column: input rate
    with pytest.raises(ValueError, match="cached_input"):
        PriceTable.from_mapping({"models": {"c": {"input": 1, "cached_input": "cheap"}}})


def test_each_call_at_its_own_models_price_with_the_shipped_table():
    """The issue's example: router on gpt-4o-mini (1,000 + 10), generator on gpt-4o (1,000 + 200)."""
    from rag_monitor.record import ModelCall

    prices = PriceTable.load(shipped_path("price_table"))
    router, generator = ModelCall("llm", "gpt-4o-mini", 1000, 10), ModelCall("llm", "gpt-4o", 1000, 200)
    assert prices.call_cost(generator) == pytest.approx(0.0045)
    assert prices.call_cost(router) == pytest.approx(0.000156)
    embedding = ModelCall("embedding", "text-embedding-3-small", 50_000)
    assert prices.call_cost(embedding) == pytest.approx(0.001)  # the embedding rows are live
    cached = ModelCall("llm", "gpt-4o", 1000, 200, cached_input_tokens=800)
    assert prices.call_cost(cached) == pytest.approx((200 * 2.5 + 800 * 1.25 + 200 * 10) / 1e6)
    # Anthropic bills cache writes above input (cached_write) and reads far below (cached_input);
    # both are parts of the prompt tokens. OpenAI rows have no cached_write: writes cost input.
    both = ModelCall("llm", "claude-sonnet-4-20250514", 10_000, 100, cached_input_tokens=6_000, cache_write_input_tokens=3_000)
    assert prices.call_cost(both) == pytest.approx((1_000 * 3.0 + 6_000 * 0.30 + 3_000 * 3.75 + 100 * 15.0) / 1e6)
    written = ModelCall("llm", "gpt-4o", 1000, 200, cache_write_input_tokens=800)
    assert prices.call_cost(written) == pytest.approx((1000 * 2.5 + 200 * 10) / 1e6)
    # More cached tokens than prompt tokens (a malformed span): never a negative uncached part.
    over = ModelCall("llm", "claude-sonnet-4", 1000, 0, cached_input_tokens=800, cache_write_input_tokens=800)
    assert prices.call_cost(over) == pytest.approx((800 * 0.30 + 200 * 3.75) / 1e6)
