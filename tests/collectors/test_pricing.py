from __future__ import annotations

from pathlib import Path

import pytest

from rag_monitor.collectors import PriceTable

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_table_prefix_and_specificity():
    prices = PriceTable.load(ROOT / "collectors" / "prices.yaml")
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


@pytest.mark.parametrize("bad", [{"models": {"x": {"output": 1}}}, {"models": {"x": {"input": -1}}}, {"models": ["x"]}])
def test_bad_tables_raise(bad):
    with pytest.raises(ValueError, match="x|models"):
        PriceTable.from_mapping(bad)
