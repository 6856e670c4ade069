"""The compiled protobuf decoder (``otlp/wire.pyx``) against upb + ``ProtoDecoder``, its reference.

Both must give the same ``DecodeResult`` (spans, scopes, events, links, counts, rejection reasons)
for every body upb parses, and refuse every body upb refuses, with ``OTLPDecodeError``: on real
exporter bodies, on random requests, on random byte edits of them, and at the nesting limit.
"""

from __future__ import annotations

import math
import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from rag_monitor.collectors import IngestLimits, OTLPDecodeError
from rag_monitor.collectors.otlp import body as otlp_body
from rag_monitor.collectors.otlp.body import decode_protobuf_upb
from tests.collectors.test_otlp import _sdk_spans
from tests.collectors.helpers import protobuf_body

if otlp_body.wire is None and os.environ.get("CI") == "true":
    pytest.fail("the compiled OTLP decoder is not built (pip install needs Cython and a C compiler)", pytrace=False)
pytestmark = pytest.mark.skipif(otlp_body.wire is None, reason="the compiled OTLP decoder is not built")

SMALL = IngestLimits(max_attribute_chars=6, max_embedding_dim=3)
"""Limits small enough that random values get truncated and vectors refused."""


def outcome(raw: bytes, decode, limits: IngestLimits) -> str:
    """What a decoder makes of ``raw``: the whole result (repr: NaN equals NaN), or that it refused."""
    try:
        return repr(decode(raw, limits))
    except OTLPDecodeError as exc:
        assert str(exc).startswith("body is not a valid protobuf ExportTraceServiceRequest: "), exc
        return "refused"


def assert_same(raw: bytes, limits: IngestLimits = SMALL) -> str:
    compiled = outcome(raw, otlp_body.decode_protobuf, limits)
    assert compiled == outcome(raw, decode_protobuf_upb, limits), raw.hex()
    return compiled


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def test_the_agent_decodes_with_the_compiled_decoder():
    assert otlp_body.PROTOBUF_DECODER == "compiled"


def test_real_exporter_bodies_decode_the_same():
    raw = protobuf_body(_sdk_spans())
    for limits in (IngestLimits(), SMALL):
        assert assert_same(raw, limits) != "refused"


def test_the_scale_benchmarks_traffic_decodes_the_same():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from load import PayloadFactory

    factory = PayloadFactory(5, unique_queries=True)
    for _ in range(10):
        assert assert_same(bytes(factory.body()), IngestLimits()) != "refused"


ids = st.sampled_from([0, 7, 8, 15, 16, 17]).flatmap(
    lambda n: st.one_of(st.just(bytes(n)), st.binary(min_size=n, max_size=n)))
texts = st.text(max_size=10)
scalars = st.one_of(
    texts.map(lambda v: ("string_value", v)), st.booleans().map(lambda v: ("bool_value", v)),
    st.integers(-2**63, 2**63 - 1).map(lambda v: ("int_value", v)), st.floats().map(lambda v: ("double_value", v)),
    st.binary(max_size=5).map(lambda v: ("bytes_value", v)), st.just((None, None)))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(lambda v: ("array_value", v)),
    st.lists(st.tuples(texts, inner), max_size=3).map(lambda v: ("kvlist_value", v))), max_leaves=8)
keys = st.one_of(texts, st.sampled_from(["embedding.embeddings.0.embedding.vector", "embedding.embeddings.1.embedding.vector"]))
vectors = st.lists(st.floats(), min_size=1, max_size=5).map(lambda v: ("array_value", [("double_value", x) for x in v]))
attributes = st.lists(st.tuples(keys, st.one_of(values, vectors)), max_size=4)


def fill(target: AnyValue, value) -> None:
    kind, payload = value
    if kind == "array_value":
        target.array_value.SetInParent()
        for item in payload:
            fill(target.array_value.values.add(), item)
    elif kind == "kvlist_value":
        target.kvlist_value.SetInParent()
        for key, item in payload:
            kv = target.kvlist_value.values.add()
            kv.key = key
            fill(kv.value, item)
    elif kind is not None:
        setattr(target, kind, payload)


def add_attributes(repeated, pairs) -> None:
    for key, value in pairs:
        kv = repeated.add()
        kv.key = key
        fill(kv.value, value)


@st.composite
def requests(draw) -> bytes:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = request.resource_spans.add()
        add_attributes(resource_spans.resource.attributes, draw(attributes))
        for _ in range(draw(st.integers(0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            if draw(st.booleans()):
                scope_spans.scope.name, scope_spans.scope.version = draw(texts), draw(texts)
                add_attributes(scope_spans.scope.attributes, draw(attributes))
            for _ in range(draw(st.integers(0, 3))):
                span = scope_spans.spans.add(trace_id=draw(ids), span_id=draw(ids), parent_span_id=draw(ids), name=draw(texts),
                                             kind=draw(st.integers(0, 5)), start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                                             end_time_unix_nano=draw(st.integers(0, 2**64 - 1)), trace_state=draw(texts))
                span.status.code, span.status.message = draw(st.integers(0, 2)), draw(texts)
                add_attributes(span.attributes, draw(attributes))
                for _ in range(draw(st.integers(0, 2))):
                    event = span.events.add(name=draw(texts), time_unix_nano=draw(st.integers(0, 2**64 - 1)))
                    add_attributes(event.attributes, draw(attributes))
                for _ in range(draw(st.integers(0, 2))):
                    link = span.links.add(trace_id=draw(ids), span_id=draw(ids))
                    add_attributes(link.attributes, draw(attributes))
    return request.SerializeToString()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_random_requests_decode_the_same(raw):
    assert assert_same(raw) != "refused"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), requests())
def test_a_body_sent_as_two_concatenated_messages_merges_the_same(first, second):
    """Protobuf parses concatenated messages as one merged message."""
    assert_same(first + second)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.randoms(use_true_random=False))
def test_random_byte_edits_are_refused_or_decoded_the_same(raw, rng: random.Random):
    edited = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        where = rng.randint(0, len(edited))
        action = rng.randrange(4)
        if action == 0 and edited:
            edited[min(where, len(edited) - 1)] = rng.randrange(256)
        elif action == 1:
            edited[where:where] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif action == 2:
            del edited[where:where + rng.randint(1, 4)]
        else:
            edited = edited[:where]
    assert_same(bytes(edited))


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field, as the wire carries it."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def request_with_span(span: bytes) -> bytes:
    return field(1, field(2, field(2, span)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(values, vectors), st.one_of(values, vectors), keys)
def test_an_attribute_whose_value_is_sent_twice_merges_the_same(first, second, key):
    """Two KeyValue messages in one field merge: the second value's oneof member wins, and an
    array or kvlist sent in both is one array or kvlist (protobuf's merge of a singular message)."""
    one, two = KeyValue(key=key), KeyValue()
    fill(one.value, first)
    fill(two.value, second)
    span = field(1, b"\x01" * 16) + field(2, b"\x02" * 8) + field(9, one.SerializeToString() + two.SerializeToString())
    assert assert_same(request_with_span(span)) != "refused"


def test_every_prefix_of_a_real_body_is_refused_or_decoded_the_same():
    raw = protobuf_body(_sdk_spans())
    outcomes = [assert_same(raw[:cut]) for cut in range(len(raw))]
    assert outcomes.count("refused") > len(raw) // 2


def nested(depth: int, kinds: str) -> bytes:
    """A span attribute nested ``depth`` levels deep, arrays and kvlists in turn from ``kinds``."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="deep")
    kv = span.attributes.add(key="k")
    value = kv.value
    for level in range(depth):
        if kinds[level % len(kinds)] == "a":
            value = value.array_value.values.add()
        else:
            value = value.kvlist_value.values.add(key="k").value
    value.string_value = "leaf"
    return request.SerializeToString()


@pytest.mark.parametrize("kinds", ["a", "k", "ak", "aak"])
def test_nesting_is_refused_where_upb_refuses_it(kinds):
    outcomes = [assert_same(nested(depth, kinds)) for depth in range(20, 60)]
    assert outcomes[0] != "refused" and outcomes[-1] == "refused"


def test_nesting_far_past_the_limit_is_refused_not_a_crash():
    value = field(1, b"leaf")  # AnyValue string_value, inside 5,000 arrays (built as bytes: protobuf's own encoder would overflow the stack)
    for _ in range(5_000):
        value = field(5, field(1, value))
    span = field(1, b"\x01" * 16) + field(2, b"\x02" * 8) + field(9, field(1, b"k") + field(2, value))
    assert assert_same(request_with_span(span)) == "refused"


@pytest.mark.parametrize("raw", [
    b"\x00\x00",                    # field number 0
    b"\x0c",                        # an end-group key with no group
    b"\x0b\x0c",                    # an empty group: an unknown field, skipped
    b"\x0b\x08\x01\x0c",            # a group with a field inside
    b"\x0b\x08\x01",                # a group never ended
    b"\x0b\x14",                    # a group ended by another field's key
    b"\x0f",                        # wire type 7
    b"\xf8\xff\xff\xff\x7f\x00",    # the largest key
    b"\xf8\xff\xff\xff\xff\x01\x00",  # a key past 32 bits
    b"\x08" + b"\xff" * 9 + b"\x01",  # a 10-byte varint
    b"\x08" + b"\xff" * 10 + b"\x01",  # an 11-byte varint
    b"\x0a\x05\x1a\x03\xff\xfe\xfd",  # schema_url that is not UTF-8
    b"\x0a\x80\x80\x80\x80\x10",     # a length past the body
])
def test_odd_wire_forms_are_read_as_upb_reads_them(raw):
    assert_same(raw)


def test_non_finite_vectors_in_nested_kvlists_are_dropped_alike():
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    add_attributes(span.attributes, [("outer", ("kvlist_value", [
        ("embedding.embeddings.0.embedding.vector", ("array_value", [("double_value", math.nan)])),
        ("kept", ("string_value", "x" * 10))]))])
    result = otlp_body.decode_protobuf(request.SerializeToString(), SMALL)
    assert result.spans[0].attributes == {"outer": {"kept": "x" * 6}}
    assert (result.rejected_embeddings, result.truncated_attributes) == (1, 1)
    assert_same(request.SerializeToString())
