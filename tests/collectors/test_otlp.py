from __future__ import annotations

import gzip
import json
import math

import pytest
from opentelemetry.trace import SpanKind, Status, StatusCode

from rag_monitor.collectors import (
    BodyTooLarge,
    IngestLimits,
    OTLPDecodeError,
    UnsupportedMediaType,
    decode_export_request,
    encode_export_request,
)
from tests.collectors.helpers import JSON, PROTOBUF, json_body, memory_tracer, protobuf_body

LIMITS = IngestLimits()


def _sdk_spans(vector=(0.1, 0.2, 0.3)):
    with memory_tracer("svc", "1.2.3") as (provider, exporter):
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("rag.query", kind=SpanKind.SERVER) as root:
            root.set_attribute("input.value", "How do I cancel?")
            root.set_attribute("rag.citations", ["d1", "d2"])
            root.set_attribute("rag.answer.confidence", 0.75)
            root.set_attribute("rag.answer.refused", False)
            root.set_attribute("big.int", 2**62)
            with tracer.start_as_current_span("embed") as embed:
                embed.set_attribute("embedding.model_name", "m")
                embed.set_attribute("embedding.embeddings.0.embedding.vector", list(vector))
                embed.add_event("cache-miss", {"k": "v"})
            with tracer.start_as_current_span("generate") as gen:
                gen.set_status(Status(StatusCode.ERROR, "boom"))
        return exporter.get_finished_spans()


@pytest.mark.parametrize("encoding", ["proto", "json", "json-base64-ids"])
def test_decodes_real_exporter_bodies(encoding):
    spans = _sdk_spans()
    if encoding == "proto":
        body, content_type = protobuf_body(spans), PROTOBUF
    else:
        body, content_type = json_body(spans, hex_ids=encoding == "json"), JSON + "; charset=utf-8"
    result = decode_export_request(body, content_type, limits=LIMITS)
    assert result.rejected_spans == 0 and result.error_message is None
    by_name = {s.name: s for s in result.spans}
    root, embed, gen = by_name["rag.query"], by_name["embed"], by_name["generate"]
    sdk_root = next(s for s in spans if s.name == "rag.query")
    assert root.trace_id == format(sdk_root.context.trace_id, "032x")
    assert root.span_id == format(sdk_root.context.span_id, "016x")
    assert root.parent_span_id is None and embed.parent_span_id == root.span_id
    assert root.kind == 2 and root.start_ns == sdk_root.start_time and root.end_ns == sdk_root.end_time
    assert root.attributes["input.value"] == "How do I cancel?"
    assert root.attributes["rag.citations"] == ["d1", "d2"]
    assert root.attributes["rag.answer.confidence"] == 0.75
    assert root.attributes["rag.answer.refused"] is False
    assert root.attributes["big.int"] == 2**62
    assert root.resource["service.name"] == "svc" and root.resource["service.version"] == "1.2.3"
    assert embed.attributes["embedding.embeddings.0.embedding.vector"] == [0.1, 0.2, 0.3]
    assert embed.events[0].name == "cache-miss" and embed.events[0].attributes == {"k": "v"}
    assert gen.status_code == 2 and gen.status_message == "boom"


def test_gzip_and_deflate():
    spans = _sdk_spans()
    body = protobuf_body(spans)
    plain = decode_export_request(body, PROTOBUF, limits=LIMITS).spans
    assert decode_export_request(gzip.compress(body), PROTOBUF, "gzip", limits=LIMITS).spans == plain
    import zlib

    assert decode_export_request(zlib.compress(body), PROTOBUF, "deflate", limits=LIMITS).spans == plain


def test_malformed_bodies_raise_clear_errors():
    with pytest.raises(OTLPDecodeError, match="not a valid protobuf"):
        decode_export_request(b"\xff\xff\xff\xff", PROTOBUF, limits=LIMITS)
    with pytest.raises(OTLPDecodeError, match="not valid JSON"):
        decode_export_request(b"{not json", JSON, limits=LIMITS)
    with pytest.raises(OTLPDecodeError, match="must be an object"):
        decode_export_request(b"[1, 2]", JSON, limits=LIMITS)
    with pytest.raises(OTLPDecodeError, match="not valid gzip"):
        decode_export_request(b"not gzip at all", PROTOBUF, "gzip", limits=LIMITS)
    with pytest.raises(OTLPDecodeError, match="truncated"):
        decode_export_request(gzip.compress(protobuf_body(_sdk_spans()))[:-12], PROTOBUF, "gzip", limits=LIMITS)
    with pytest.raises(OTLPDecodeError, match="not a valid OTLP JSON"):
        decode_export_request(('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "1" * 32 + '", "spanId": "' + "2" * 16 + '", "startTimeUnixNano": "soon"}]}]}]}').encode(), JSON, limits=LIMITS)


def test_unsupported_content_type_and_encoding():
    with pytest.raises(UnsupportedMediaType, match="text/plain"):
        decode_export_request(b"", "text/plain", limits=LIMITS)
    with pytest.raises(UnsupportedMediaType, match="br"):
        decode_export_request(b"", PROTOBUF, "br", limits=LIMITS)


def test_oversize_body_and_gzip_bomb():
    limits = IngestLimits(max_body_bytes=10_000)
    with pytest.raises(BodyTooLarge, match="10000"):
        decode_export_request(b"\x00" * 10_001, PROTOBUF, limits=limits)
    bomb = gzip.compress(b"\x00" * 50_000_000)  # ~50 KB that expands to 50 MB
    assert len(bomb) < 100_000
    with pytest.raises(BodyTooLarge):
        decode_export_request(bomb, PROTOBUF, "gzip", limits=limits)


def test_long_attributes_are_truncated_and_counted():
    with memory_tracer() as (provider, exporter):
        with provider.get_tracer("t").start_as_current_span("s") as span:
            span.set_attribute("long", "x" * 500)
            span.set_attribute("long.list", ["y" * 300, "short"])
            span.set_attribute("ok", "z" * 100)
        spans = exporter.get_finished_spans()
    for body, ctype in ((protobuf_body(spans), PROTOBUF), (json_body(spans), JSON)):
        result = decode_export_request(body, ctype, limits=IngestLimits(max_attribute_chars=100))
        attrs = result.spans[0].attributes
        assert attrs["long"] == "x" * 100 and attrs["long.list"] == ["y" * 100, "short"] and attrs["ok"] == "z" * 100
        assert result.truncated_attributes == 2 and result.rejected_spans == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_embeddings_are_dropped_and_counted(bad):
    spans = _sdk_spans(vector=(0.1, bad, 0.3))
    for body, ctype in ((protobuf_body(spans), PROTOBUF), (json_body(spans), JSON)):
        result = decode_export_request(body, ctype, limits=LIMITS)
        embed = next(s for s in result.spans if s.name == "embed")
        assert "embedding.embeddings.0.embedding.vector" not in embed.attributes
        assert embed.attributes["embedding.model_name"] == "m"  # the rest of the span is kept
        assert result.rejected_embeddings == 1 and len(result.spans) == 3


def test_too_many_dimensions_rejected():
    result = decode_export_request(protobuf_body(_sdk_spans(vector=[0.5] * 9)), PROTOBUF, limits=IngestLimits(max_embedding_dim=8))
    assert result.rejected_embeddings == 1


def test_bad_ids_reject_the_span_not_the_batch():
    document = json.loads(json_body(_sdk_spans()))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["traceId"] = "0" * 32  # all-zero: invalid
    spans[1]["spanId"] = "abcd"  # wrong length
    spans.append({"name": "no-id", "traceId": "1" * 32})  # missing span id
    result = decode_export_request(json.dumps(document).encode(), JSON, limits=LIMITS)
    assert len(result.spans) == 1 and result.rejected_spans == 3
    assert "trace id" in result.error_message and "span id" in result.error_message and "no-id" in result.error_message


def test_encode_round_trip():
    original = decode_export_request(protobuf_body(_sdk_spans()), PROTOBUF, limits=LIMITS).spans
    original[0].attributes["nested"] = {"a": [1, 2.5, True, None, b"\x01"], "b": {}}
    original[0].attributes["empty.list"] = []
    again = decode_export_request(encode_export_request(original), PROTOBUF, limits=LIMITS).spans
    assert again == original


def test_empty_bodies_are_valid():
    assert decode_export_request(b"", PROTOBUF, limits=LIMITS).spans == []
    assert decode_export_request(b"{}", JSON, limits=LIMITS).spans == []


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([PROTOBUF, JSON]), st.sampled_from([None, "gzip"]))
def test_arbitrary_bytes_never_escape_as_other_errors(body, content_type, encoding):
    """Whatever arrives, the receiver gets a result or an OTLPDecodeError (a 4xx), never a 500."""
    try:
        result = decode_export_request(body, content_type, encoding, limits=LIMITS)
    except OTLPDecodeError:
        return
    assert all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in result.spans)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4), max_leaves=10))
def test_json_attribute_values_never_escape(value):
    """Odd but syntactically valid OTLP JSON attribute values: decoded or a clean 400."""
    span = {"traceId": "1" * 32, "spanId": "2" * 16, "attributes": [{"key": "k", "value": {"stringValue": value}}]}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    try:
        decode_export_request(body, JSON, limits=LIMITS)
    except OTLPDecodeError:
        pass


def _two_traces():
    first, second = _sdk_spans(), _sdk_spans()
    assert first[0].context.trace_id != second[0].context.trace_id
    return first, second


def test_gzip_of_several_members_is_read_whole():
    """RFC 1952: a gzip file may be several members; the body is their concatenation."""
    first, second = _two_traces()
    body = gzip.compress(protobuf_body(first)) + gzip.compress(protobuf_body(second))
    result = decode_export_request(body, PROTOBUF, "gzip", limits=LIMITS)
    whole = decode_export_request(protobuf_body(first) + protobuf_body(second), PROTOBUF, limits=LIMITS)
    assert len(result.spans) == len(first) + len(second) == 6  # protobuf messages concatenate
    assert result.spans == whole.spans


def test_several_members_share_one_size_limit():
    one = gzip.compress(b"\x00" * 6_000)
    with pytest.raises(BodyTooLarge):
        decode_export_request(one + one, PROTOBUF, "gzip", limits=IngestLimits(max_body_bytes=10_000))


@pytest.mark.parametrize("trailer", [b"garbage", b"\x00\x00\x00\x00", b"\x1f"])
def test_trailing_garbage_after_gzip_is_a_clear_error(trailer):
    body = gzip.compress(protobuf_body(_sdk_spans())) + trailer
    with pytest.raises(OTLPDecodeError, match="trailing data after the gzip stream") as caught:
        decode_export_request(body, PROTOBUF, "gzip", limits=LIMITS)
    assert not isinstance(caught.value, (BodyTooLarge, UnsupportedMediaType))  # a 400


def test_trailing_garbage_after_deflate_is_an_error():
    import zlib

    with pytest.raises(OTLPDecodeError, match="trailing data after the deflate stream"):
        decode_export_request(zlib.compress(protobuf_body(_sdk_spans())) + b"x", PROTOBUF, "deflate", limits=LIMITS)


def test_scope_and_links_survive_decode_and_encode():
    from opentelemetry.trace import Link

    with memory_tracer() as (provider, exporter):
        tracer = provider.get_tracer("my.lib", "2.0", attributes={"lib.owner": "team"})
        with tracer.start_as_current_span("a") as a:
            pass
        with tracer.start_as_current_span("b", links=[Link(a.get_span_context(), {"why": "retry"})]):
            pass
        spans = exporter.get_finished_spans()
    for body, ctype in ((protobuf_body(spans), PROTOBUF), (json_body(spans), JSON)):
        decoded = decode_export_request(body, ctype, limits=LIMITS).spans
        b = next(s for s in decoded if s.name == "b")
        assert (b.scope.name, b.scope.version, b.scope.attributes) == ("my.lib", "2.0", {"lib.owner": "team"})
        assert [(link.span_id, link.attributes) for link in b.links] == [(format(a.get_span_context().span_id, "016x"), {"why": "retry"})]
        assert decode_export_request(encode_export_request(decoded), PROTOBUF, limits=LIMITS).spans == decoded


def test_float_arrays_read_in_one_pass_match_element_reads():
    """The byte-level read of a double array (the embedding fast path) gives exactly the
    element-wise values, including negative zero, subnormals and the float extremes."""
    import random
    import struct

    rng = random.Random(3)
    vector = [rng.uniform(-1, 1) for _ in range(384)] + [0.0, -0.0, 5e-324, 1.7976931348623157e308, -2.5]
    result = decode_export_request(protobuf_body(_sdk_spans(vector=vector)), PROTOBUF, limits=LIMITS)
    read = next(s for s in result.spans if s.name == "embed").attributes["embedding.embeddings.0.embedding.vector"]
    assert [struct.pack("<d", v) for v in read] == [struct.pack("<d", v) for v in vector]
    assert result.rejected_embeddings == 0


def test_huge_finite_vector_is_kept_and_mixed_arrays_read_each_element():
    # The sum of these overflows to inf; every element is still finite, so the vector stays.
    huge = decode_export_request(protobuf_body(_sdk_spans(vector=[1.7e308, 1.7e308, 1.0])), PROTOBUF, limits=LIMITS)
    assert next(s for s in huge.spans if s.name == "embed").attributes["embedding.embeddings.0.embedding.vector"] == [1.7e308, 1.7e308, 1.0]
    assert huge.rejected_embeddings == 0

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(protobuf_body(_sdk_spans()))
    span = next(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans if s.name == "embed")
    values = next(kv for kv in span.attributes if kv.key.endswith(".vector")).value.array_value.values
    values.add().string_value = "not a number"  # a mixed array: no exporter sends one, a hand-made body may
    mixed = decode_export_request(request.SerializeToString(), PROTOBUF, limits=LIMITS)
    embed = next(s for s in mixed.spans if s.name == "embed")
    assert "embedding.embeddings.0.embedding.vector" not in embed.attributes  # not a vector: dropped, counted
    assert mixed.rejected_embeddings == 1


@pytest.mark.parametrize("surrogate", [b"\\ud800", b"\xed\xa0\x80", b"\xed\xa0\xbd\xed\xb8\x80"])
def test_a_surrogate_in_json_is_a_clear_error_not_a_later_crash(surrogate):
    """A lone surrogate, escaped or as the UTF-8-style bytes that ``json.loads`` lets through
    (and a pair spelt that way, which no UTF-8 encoder writes), would fail when the spans are
    stored or forwarded; it is refused at decode with a message, in a key as in a value."""
    spans = _sdk_spans()
    body = json_body(spans)
    for target in (b'"input.value"', b'"How do I cancel?"'):
        assert target in body
        bad = body.replace(target, target[:-1] + surrogate + b'"', 1)
        with pytest.raises(OTLPDecodeError, match="surrogate"):
            decode_export_request(bad, JSON, limits=LIMITS)
    assert decode_export_request(body.replace(b"How do I", "Comment \U0001f600".encode(), 1), JSON, limits=LIMITS).rejected_spans == 0
