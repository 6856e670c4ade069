"""Trace ids and the root span id derived from them."""

from __future__ import annotations

import threading

import pytest

from rag_monitor.sdk.ids import RootDerivedIdGenerator, format_trace_id, parse_trace_id, root_span_id


def test_root_span_id_is_the_low_64_bits_or_one():
    assert root_span_id(0xABCDEF << 64 | 0x1234) == 0x1234
    assert root_span_id(0xABCDEF << 64) == 1


def test_generator_derives_only_the_span_id_right_after_a_trace_id():
    gen = RootDerivedIdGenerator()
    trace_id = gen.generate_trace_id()
    assert gen.generate_span_id() == root_span_id(trace_id)
    children = {gen.generate_span_id() for _ in range(50)}
    assert root_span_id(trace_id) not in children
    assert len(children) == 50


def test_pending_trace_id_is_per_thread():
    gen = RootDerivedIdGenerator()
    trace_id = gen.generate_trace_id()
    other_thread_ids = []
    t = threading.Thread(target=lambda: other_thread_ids.append(gen.generate_span_id()))
    t.start()
    t.join()
    assert other_thread_ids[0] != root_span_id(trace_id)
    assert gen.generate_span_id() == root_span_id(trace_id)


def test_parse_and_format_round_trip():
    value = 0x0123456789ABCDEF0123456789ABCDEF
    text = format_trace_id(value)
    assert text == "0123456789abcdef0123456789abcdef"
    assert parse_trace_id(text) == parse_trace_id(text.upper()) == parse_trace_id(value) == value


@pytest.mark.parametrize("bad", ["", "0" * 32, "z" * 32, "abc", 0, -1, 1 << 128, True, None, 1.5])
def test_parse_rejects_with_the_value(bad):
    with pytest.raises(ValueError, match="trace_id="):
        parse_trace_id(bad)
