"""Bad input at the OTLP receiver: property-based fuzzing with hypothesis (issue 8, item 3).

Property: ``IngestPipeline.ingest`` either returns an ``IngestResult`` (accepted, possibly with
spans/attributes/embeddings dropped and counted) or raises ``OTLPDecodeError`` with a message;
no other exception, and afterwards the agent still assembles a valid query. The bulk runs
in-process against one real agent's pipeline (real decoder, assembler, SQLite store); a smaller
sample goes over real HTTP, where every answer must be 200/400/413/415 and a 400 carries a
``google.rpc.Status`` message.

``RAG_MONITOR_FUZZ_SCALE`` multiplies the example counts (e.g. 10 for a long local run).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import time
import uuid
from collections import Counter

import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from rag_monitor import semconv as sc
from rag_monitor.agent.pipeline import IngestResult
from rag_monitor.collectors.otlp import OTLPDecodeError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SCALE = float(os.environ.get("RAG_MONITOR_FUZZ_SCALE", "1"))
MAX_PENDING = 64  # small, so the fuzz batch really pushes against the pending-trace bound
MAX_BODY = 256 * 1024


def fuzz_settings(examples: int):
    # derandomize: the same cases in CI every run (a failure reproduces); raise SCALE to explore.
    return settings(
        max_examples=max(1, int(examples * SCALE)), deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --- building blocks -----------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # protobuf strings must be UTF-8
HUGE_TEXT = st.integers(40_000, 120_000).map(lambda n: "x" * n)  # over max_attribute_chars (32 Ki)
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf]))
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
NOW_NS = time.time_ns()
# Clock skew: now, the far past, the far future, zero and the uint64 extremes.
TIMESTAMPS = st.one_of(
    st.integers(NOW_NS - 10**12, NOW_NS + 10**12), st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(NOW_NS + 10**17, 2**64 - 1), UINT64,
)

# A small pool of ids so spans collide: duplicate span ids, shared traces, parents that exist.
TRACE_POOL = [bytes.fromhex(f"{i:032x}") for i in range(1, 6)]
SPAN_POOL = [bytes.fromhex(f"{i:016x}") for i in range(1, 9)]
TRACE_IDS = st.one_of(st.sampled_from(TRACE_POOL), st.binary(min_size=16, max_size=16),
                      st.sampled_from([b"", b"\x00" * 16]), st.binary(max_size=20))
SPAN_IDS = st.one_of(st.sampled_from(SPAN_POOL), st.binary(min_size=8, max_size=8),
                     st.sampled_from([b"", b"\x00" * 8]), st.binary(max_size=12))
PARENTS = st.one_of(st.just(b""), st.sampled_from(SPAN_POOL), SPAN_IDS)

# Keys the dialects read (so wrong types reach build_record), and arbitrary ones.
KNOWN_KEYS = [
    sc.INPUT_VALUE, sc.OUTPUT_VALUE, sc.SESSION_ID, sc.USER_ID, sc.METADATA, sc.OPENINFERENCE_SPAN_KIND,
    sc.RAG_STAGE, sc.RAG_RELEASE, sc.RAG_VARIANT, sc.RAG_TENANT, sc.RAG_INTENT, sc.RAG_ROUTE,
    sc.RAG_ANSWER_REFUSED, sc.RAG_ANSWER_CONFIDENCE, sc.RAG_CITATIONS, sc.RAG_SHADOW_OF,
    sc.RAG_FILTER_KIND, sc.RAG_FILTER_PREDICATE, sc.RAG_FILTER_CANDIDATES_IN, sc.RAG_FILTER_CANDIDATES_OUT,
    sc.RAG_FILTER_EXCLUDED_IDS, sc.RAG_FILTER_EXCLUDED_DOCUMENTS, sc.RAG_CONTEXT_DOCUMENT_IDS,
    sc.RAG_CONTEXT_TOKENS, sc.RAG_FEEDBACK_KIND, sc.RAG_FEEDBACK_VALUE, sc.RAG_FEEDBACK_REASON,
    sc.RAG_TIME_TO_FIRST_TOKEN, sc.LLM_MODEL_NAME, sc.LLM_TOKEN_COUNT_PROMPT, sc.LLM_TOKEN_COUNT_COMPLETION,
    sc.EMBEDDING_MODEL_NAME, sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_USAGE_INPUT_TOKENS,
    sc.GEN_AI_RETRIEVAL_DOCUMENTS, sc.GEN_AI_RETRIEVAL_QUERY_TEXT, sc.SERVICE_NAME, sc.SERVICE_VERSION,
    "retrieval.documents.0.document.id", "retrieval.documents.0.document.content",
    "retrieval.documents.0.document.score", "retrieval.documents.1.document.metadata",
    "reranker.output_documents.0.document.id", "llm.input_messages.0.message.content",
]
KEYS = st.one_of(st.sampled_from(KNOWN_KEYS), TEXT)
# Values that mean something to the dialects, in the right and the wrong places.
MEANINGFUL = st.sampled_from([
    "rag.query", "retrieve", "generate", "RETRIEVER", "LLM", "EMBEDDING", "CHAIN", "chat", "retrieval",
    "embeddings", "thumbs_down", "thumbs_up", "shadow", "production", '{"query": "q"}', "[1, 2", "{",
    '[{"id": 1, "score": "x"}]', '{"id": null}', "doc-1",
])
SCALARS = st.one_of(TEXT, MEANINGFUL, INT64, FLOATS, st.booleans(), st.binary(max_size=16), st.none())


def any_values(leaves: int = 12):
    """Nested AnyValue-shaped Python values: scalars, arrays (mixed types too) and kvlists."""
    return st.recursive(
        SCALARS,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)),
        max_leaves=leaves,
    )


def vectors():
    """Embedding vectors: random dimension (0..40, plus over max_embedding_dim), NaN/inf mixed in."""
    return st.one_of(
        st.lists(st.floats(-1, 1), max_size=40),
        st.lists(FLOATS, min_size=1, max_size=8),
        st.integers(8193, 9000).map(lambda n: [0.5] * n),
    )


def set_value(target: AnyValue, value) -> None:
    if value is None:
        return  # an empty AnyValue
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, bytes):
        target.bytes_value = value
    elif isinstance(value, list):
        target.array_value.SetInParent()
        for item in value:
            set_value(target.array_value.values.add(), item)
    else:
        target.kvlist_value.SetInParent()
        for k, v in value.items():
            kv = target.kvlist_value.values.add()
            kv.key = k
            set_value(kv.value, v)


@st.composite
def attribute_lists(draw, max_size: int = 8):
    pairs = draw(st.lists(st.tuples(KEYS, any_values()), max_size=max_size))
    if draw(st.booleans()):
        pairs.append((draw(KEYS), draw(HUGE_TEXT)))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, 3))
        pairs.append((f"{sc.EMBEDDING_EMBEDDINGS}.{i}.{sc.EMBEDDING_VECTOR}", draw(vectors())))
        pairs.append((sc.EMBEDDING_MODEL_NAME, draw(st.sampled_from(["m1", "m2"]))))
    return pairs  # duplicate keys are possible on purpose


@st.composite
def export_requests(draw) -> ExportTraceServiceRequest:
    """Random-structure ExportTraceServiceRequests: good and bad ids, odd attributes, skewed clocks."""
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 3))):
        resource_spans = request.resource_spans.add()
        for key, value in draw(attribute_lists(max_size=3)):
            kv = resource_spans.resource.attributes.add()
            kv.key = key
            set_value(kv.value, value)
        for _ in range(draw(st.integers(0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(TEXT)
            for _ in range(draw(st.integers(0, 5))):
                span = scope_spans.spans.add()
                span.trace_id = draw(TRACE_IDS)
                span.span_id = draw(SPAN_IDS)
                span.parent_span_id = draw(PARENTS)
                span.name = draw(st.one_of(MEANINGFUL, TEXT, st.just("rag.feedback")))
                span.kind = draw(st.integers(0, 5))
                span.start_time_unix_nano = draw(TIMESTAMPS)
                # end before start as often as not
                span.end_time_unix_nano = draw(st.one_of(TIMESTAMPS, st.just(span.start_time_unix_nano)))
                span.status.code = draw(st.integers(0, 2))
                span.status.message = draw(TEXT)
                for key, value in draw(attribute_lists()):
                    kv = span.attributes.add()
                    kv.key = key
                    set_value(kv.value, value)
                for _ in range(draw(st.integers(0, 2))):
                    event = span.events.add()
                    event.name = draw(TEXT)
                    event.time_unix_nano = draw(TIMESTAMPS)
                    for key, value in draw(attribute_lists(max_size=3)):
                        kv = event.attributes.add()
                        kv.key = key
                        set_value(kv.value, value)
    return request


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (for hand-built bodies the protobuf API refuses to write)."""
    length, out = len(payload), bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([(number << 3) | 2]) + bytes(out) + payload


@st.composite
def invalid_utf8_protobuf(draw) -> bytes:
    """A span whose name (a proto3 string) is not UTF-8: the parser must refuse it."""
    bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80abc"]))
    span = _field(1, TRACE_POOL[0]) + _field(2, SPAN_POOL[0]) + _field(5, draw(st.binary(max_size=4)) + bad)
    return _field(1, _field(2, _field(2, span)))


def deeply_nested_protobuf(depth: int) -> bytes:
    """A kvlist nested ``depth`` levels deep (past protobuf's recursion limit when deep enough)."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = TRACE_POOL[1], SPAN_POOL[1], "rag.query"
    kv = span.attributes.add()
    kv.key = "nested"
    value = kv.value
    for _ in range(depth):
        inner = value.kvlist_value.values.add()
        inner.key = "k"
        value = inner.value
    value.string_value = "bottom"
    return request.SerializeToString()


@st.composite
def mutated_bytes(draw, body: bytes) -> bytes:
    """Raw byte mutations of a valid body: flips, inserts, deletes, truncation, splices."""
    data = bytearray(body)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        pos = draw(st.integers(0, len(data))) if data else 0
        if op == "flip" and data:
            pos = min(pos, len(data) - 1)
            data[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[pos:]
        elif op == "splice":
            data[pos:pos] = data[: draw(st.integers(0, 32))]
    return bytes(data)


# --- JSON documents ----------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXT)
ANY_JSON = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(TEXT, c, max_size=3)),
                        max_leaves=8)


def maybe_wrong(good):
    """Mostly the right shape, sometimes any JSON value in its place (wrong types at every level)."""
    return st.one_of(good, good, good, ANY_JSON)


def json_any_value():
    variants = st.sampled_from(["stringValue", "intValue", "doubleValue", "boolValue", "bytesValue", "string_value"])
    scalar = st.builds(lambda k, v: {k: v}, variants, st.one_of(JSON_SCALARS, MEANINGFUL,
                       st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "12abc", "!!", str(2**64)])))
    return st.recursive(
        maybe_wrong(scalar),
        lambda c: st.one_of(
            st.builds(lambda vs: {"arrayValue": {"values": vs}}, maybe_wrong(st.lists(c, max_size=4))),
            st.builds(lambda kvs: {"kvlistValue": {"values": kvs}}, maybe_wrong(st.lists(json_kv(c), max_size=3))),
        ),
        max_leaves=10,
    )


def json_kv(values):
    return maybe_wrong(st.fixed_dictionaries({"key": maybe_wrong(KEYS), "value": values}))


def json_ids(pool, size):
    return st.one_of(st.sampled_from(pool).map(bytes.hex), st.sampled_from(pool).map(lambda b: base64.b64encode(b).decode()),
                     st.binary(min_size=size, max_size=size).map(bytes.hex), TEXT, st.just(""), ANY_JSON)


def json_times():
    return st.one_of(TIMESTAMPS.map(str), TIMESTAMPS, st.sampled_from(["-1", "1e30", "NaN", "abc", str(2**80), -(10**25)]),
                     st.floats(allow_nan=True, allow_infinity=True), ANY_JSON)


@st.composite
def json_documents(draw):
    """OTLP JSON trace exports with wrong types anywhere, as Python values."""
    attrs = st.lists(json_kv(json_any_value()), max_size=5)
    span = st.fixed_dictionaries(
        {"traceId": json_ids(TRACE_POOL, 16), "spanId": json_ids(SPAN_POOL, 8), "name": maybe_wrong(MEANINGFUL)},
        optional={
            "parentSpanId": json_ids(SPAN_POOL, 8), "kind": maybe_wrong(st.sampled_from([1, 2, "SPAN_KIND_SERVER", 99])),
            "startTimeUnixNano": json_times(), "endTimeUnixNano": json_times(), "attributes": maybe_wrong(attrs),
            "status": maybe_wrong(st.fixed_dictionaries({}, optional={"code": maybe_wrong(st.sampled_from([0, 2, "STATUS_CODE_ERROR"])),
                                                                       "message": maybe_wrong(TEXT)})),
            "events": maybe_wrong(st.lists(maybe_wrong(st.fixed_dictionaries(
                {"name": maybe_wrong(TEXT)}, optional={"timeUnixNano": json_times(), "attributes": maybe_wrong(attrs)})), max_size=2)),
        },
    )
    scope = st.fixed_dictionaries({"spans": maybe_wrong(st.lists(maybe_wrong(span), max_size=4))})
    resource = st.fixed_dictionaries({"resource": maybe_wrong(st.fixed_dictionaries({"attributes": maybe_wrong(attrs)})),
                                      "scopeSpans": maybe_wrong(st.lists(maybe_wrong(scope), max_size=2))})
    key = draw(st.sampled_from(["resourceSpans", "resource_spans"]))
    return {key: draw(maybe_wrong(st.lists(maybe_wrong(resource), max_size=2)))}


def json_bytes(document) -> bytes:
    # allow_nan: JSON with NaN/Infinity literals is what some exporters really send
    return json.dumps(document, allow_nan=True).encode()


@st.composite
def raw_json_bodies(draw) -> bytes:
    """JSON bodies that are broken below the document level."""
    kind = draw(st.sampled_from(["utf8", "deep_array", "deep_kvlist", "not_object", "mutated", "bom"]))
    if kind == "utf8":  # invalid UTF-8 spliced into a real document
        body = json_bytes(draw(json_documents()))
        pos = draw(st.integers(0, len(body)))
        return body[:pos] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"])) + body[pos:]
    if kind == "deep_array":
        depth = draw(st.sampled_from([100, 1_000, 10_000, 100_000]))
        return b'{"resourceSpans":' + b"[" * depth + b"]" * depth + b"}"
    if kind == "deep_kvlist":  # deep enough to recurse through every stage, or to overflow the decoder
        depth = draw(st.sampled_from([50, 300, 2_000]))
        value = {"stringValue": "bottom"}
        for _ in range(depth):
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
        body = {"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": TRACE_POOL[2].hex(), "spanId": SPAN_POOL[2].hex(), "name": "rag.query",
            "attributes": [{"key": sc.INPUT_VALUE, "value": value}]}]}]}]}
        return _dumps_deep(body)
    if kind == "not_object":
        return json_bytes(draw(ANY_JSON.filter(lambda v: not isinstance(v, dict))))
    if kind == "bom":
        return b"\xef\xbb\xbf" + json_bytes(draw(json_documents()))
    return draw(mutated_bytes(json_bytes(draw(json_documents()))))


def _dumps_deep(value) -> bytes:
    """json.dumps without the recursion limit (the encoder recurses once per level)."""
    import sys

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        return json.dumps(value).encode()
    finally:
        sys.setrecursionlimit(old)


# --- bodies as the wire carries them -------------------------------------------------------------

@st.composite
def protobuf_bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["structured", "structured", "mutated", "utf8", "deep", "garbage"]))
    if kind == "structured":
        return draw(export_requests()).SerializeToString()
    if kind == "mutated":
        return draw(mutated_bytes(draw(export_requests()).SerializeToString()))
    if kind == "utf8":
        return draw(invalid_utf8_protobuf())
    if kind == "deep":
        return deeply_nested_protobuf(draw(st.sampled_from([20, 60, 99, 101, 200, 1_000])))
    return draw(st.binary(max_size=200))


@st.composite
def json_wire_bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["wrong_types", "wrong_types", "canonical", "raw"]))
    if kind == "wrong_types":
        return json_bytes(draw(json_documents()))
    if kind == "canonical":  # what MessageToJson writes for a random request: base64 ids, int64 strings
        return json_format.MessageToJson(draw(export_requests())).encode()
    return draw(raw_json_bodies())


@st.composite
def encoded(draw, bodies) -> tuple[bytes, str | None]:
    """Optionally gzip/deflate the body, or send garbage that claims to be gzip."""
    body = draw(bodies)
    encoding = draw(st.sampled_from([None, None, None, "gzip", "gzip-garbage", "gzip-truncated", "deflate", "br", ""]))
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=1), "gzip"
    if encoding == "gzip-garbage":
        return draw(st.one_of(st.binary(max_size=64), st.just(b"\x1f\x8b\x08\x00garbage"), st.just(body))), "gzip"
    if encoding == "gzip-truncated":
        packed = gzip.compress(body, compresslevel=1)
        return packed[: draw(st.integers(0, max(0, len(packed) - 1)))], "gzip"
    if encoding == "deflate":
        import zlib

        return zlib.compress(body, 1), "deflate"
    return body, encoding


# --- the property ------------------------------------------------------------------------------------------

def ingest_checked(pipeline, body: bytes, content_type: str, encoding: str | None, counts: Counter) -> None:
    """One case: an IngestResult or an OTLPDecodeError with a message; any other exception fails the test."""
    counts["cases"] += 1
    try:
        result = pipeline.ingest(body, content_type, encoding)
    except OTLPDecodeError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        counts["rejected"] += 1
        return
    assert isinstance(result, IngestResult)
    assert result.accepted_spans >= 0 and result.rejected_spans >= 0 and result.records >= 0
    assert bool(result.rejected_spans) == bool(result.error_message), result  # a rejection always says why
    counts["accepted"] += 1
    counts["records"] += result.records
    counts["spans_rejected"] += result.rejected_spans


def valid_query_request() -> tuple[bytes, str]:
    """A well-formed SDK-style query (a root ``rag.query`` span): what must still work after the fuzz."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    trace_id = uuid.uuid4().hex
    span.trace_id, span.span_id, span.name = bytes.fromhex(trace_id), bytes.fromhex("ab" * 8), sc.RAG_QUERY_SPAN_NAME
    span.start_time_unix_nano, span.end_time_unix_nano = NOW_NS, NOW_NS + 1_000_000
    for key, value in [(sc.INPUT_VALUE, "How do I cancel?"), (sc.OUTPUT_VALUE, "Under Settings.")]:
        kv = span.attributes.add()
        kv.key, kv.value.string_value = key, value
    return request.SerializeToString(), trace_id


def assert_still_usable(running, counts: Counter) -> None:
    agent = running.agent
    assert agent.pipeline.assembler.pending_traces <= MAX_PENDING
    body, trace_id = valid_query_request()
    result = agent.pipeline.ingest(body, PROTOBUF)
    assert result.records == 1, result
    assert running.store.get_recent(trace_id) is not None
    # An exception swallowed inside assembly is a crash too, just a quiet one.
    assert running.metric("rag_agent_traces_dropped_total", {"reason": "assembly_error"}) in (None, 0.0), counts
    print(f"\nfuzz cases: {dict(counts)}")


@pytest.fixture
def fuzz_agent(start_agent):
    return start_agent(max_pending_traces=MAX_PENDING, max_body_bytes=MAX_BODY)


def test_protobuf_requests_are_accepted_or_rejected_with_a_message(fuzz_agent):
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()

    @fuzz_settings(1500)
    @given(encoded(protobuf_bodies()))
    def case(wire):
        ingest_checked(pipeline, wire[0], PROTOBUF, wire[1], counts)

    case()
    assert counts["accepted"] and counts["rejected"] and counts["records"], counts  # both outcomes exercised
    assert_still_usable(fuzz_agent, counts)


def test_json_requests_are_accepted_or_rejected_with_a_message(fuzz_agent):
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()

    @fuzz_settings(1500)
    @given(encoded(json_wire_bodies()), st.sampled_from([JSON, "application/json; charset=utf-8", "APPLICATION/JSON"]))
    def case(wire, content_type):
        ingest_checked(pipeline, wire[0], content_type, wire[1], counts)

    case()
    assert counts["accepted"] and counts["rejected"] and counts["records"], counts
    assert_still_usable(fuzz_agent, counts)


def test_valid_bodies_with_wrong_headers_are_rejected_with_a_message(fuzz_agent):
    """Protobuf sent as JSON and back, unknown types and encodings: refused, never mistaken."""
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()

    @fuzz_settings(300)
    @given(st.one_of(protobuf_bodies(), json_wire_bodies()),
           st.one_of(st.sampled_from([PROTOBUF, JSON, "text/plain", "", "application/x-protobuf; x=y", "*/*"]), TEXT),
           st.one_of(st.none(), st.sampled_from(["gzip", "identity", "compress", "GZIP", " gzip "]), TEXT))
    def case(body, content_type, encoding):
        ingest_checked(pipeline, body, content_type, encoding, counts)

    case()
    assert counts["rejected"], counts
    assert_still_usable(fuzz_agent, counts)


def test_over_http_every_answer_is_200_400_413_or_415(fuzz_agent):
    """A few hundred cases over the real receiver: never a 5xx, and every 400 explains itself."""
    counts = Counter()

    @fuzz_settings(300)
    @given(st.one_of(encoded(protobuf_bodies()).map(lambda w: (*w, PROTOBUF)),
                     encoded(json_wire_bodies()).map(lambda w: (*w, JSON)),
                     st.binary(min_size=MAX_BODY + 1, max_size=MAX_BODY + 1).map(lambda b: (b, None, PROTOBUF)),
                     st.tuples(st.binary(max_size=64), st.none(), st.sampled_from(["text/plain", "application/xml"]))))
    def case(wire):
        body, encoding, content_type = wire
        headers = {"Content-Encoding": encoding} if encoding else {}
        status, response_headers, payload = fuzz_agent.post(body, content_type, headers)
        counts["cases"] += 1
        counts[status] += 1
        assert status in (200, 400, 413, 415), (status, payload[:300])
        if status != 200:
            if response_headers.get("Content-Type", "").startswith(PROTOBUF):
                message = status_pb2.Status.FromString(payload).message
            else:
                message = json.loads(payload)["message"]
            assert message.strip(), (status, payload)

    case()
    assert counts[200] and counts[400], counts
    assert fuzz_agent.metric_sum("rag_agent_ingest_errors_total", reason="malformed") == counts[400]
    assert_still_usable(fuzz_agent, counts)
