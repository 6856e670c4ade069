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
import http.client
import json
import math
import os
import random
import sys
import time
import uuid
import zlib
from collections import Counter
from urllib.parse import urlsplit

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
# Small limits, so cheap cases reach every bound: pending traces, body size, attribute length,
# embedding dimension, spans per trace.
MAX_PENDING = 16
MAX_BODY = 256 * 1024
MAX_CHARS = 1024
MAX_DIM = 64
MAX_SPANS_PER_TRACE = 20


def fuzz_settings(examples: int):
    # derandomize: the same cases in CI every run (a failure reproduces); raise SCALE to explore.
    return settings(
        max_examples=max(1, int(examples * SCALE)), deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --- building blocks -----------------------------------------------------------------------------

# A Random for mutants, id picks and the like, evenly spread (the default st.randoms() leans
# towards its simplest values: every choice would be the first). Still reproducible under derandomize.
RANDOMS = st.randoms(use_true_random=True)

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # protobuf strings must be UTF-8
HUGE_TEXT = st.integers(MAX_CHARS + 1, 4 * MAX_CHARS).map(lambda n: "é" * n)  # over max_attribute_chars
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf]))
INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
NOW_NS = time.time_ns()
# Clock skew: now, the far past, the far future, zero and the uint64 extremes.
TIMESTAMPS = st.one_of(
    st.integers(NOW_NS - 10**12, NOW_NS + 10**12), st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]),
    st.integers(NOW_NS + 10**17, 2**64 - 1), UINT64,
)

# Pools of ids so spans collide: duplicate span ids, shared traces, parents that exist. More traces
# than MAX_PENDING, so pending traces are evicted. Picked with a drawn Random, not sampled_from,
# because hypothesis favours the first element and every span would share one trace.
TRACE_POOL = [bytes.fromhex(f"{i:032x}") for i in range(1, 201)]
SPAN_POOL = [bytes.fromhex(f"{i:016x}") for i in range(1, 9)]
BAD_TRACE_IDS = st.one_of(st.sampled_from([b"", b"\x00" * 16]), st.binary(max_size=20))
BAD_SPAN_IDS = st.one_of(st.sampled_from([b"", b"\x00" * 8]), st.binary(max_size=12))


def pick_id(draw, rnd, pool, bad, size: int, *, good_share: float = 0.85) -> bytes:
    """Mostly a valid id (pool or fresh), sometimes missing, zero or the wrong length."""
    roll = rnd.random()
    if roll < good_share * 0.8:
        return rnd.choice(pool)
    if roll < good_share:
        return rnd.randbytes(size)
    return draw(bad)

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


def any_values(leaves: int = 6):
    """Nested AnyValue-shaped Python values: scalars, arrays (mixed types too) and kvlists."""
    return st.recursive(
        SCALARS,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=4)),
        max_leaves=leaves,
    )


def vectors():
    """Embedding vectors: random dimension (within and past max_embedding_dim), NaN/inf mixed in."""
    return st.one_of(
        st.lists(st.floats(-1, 1), max_size=12),
        st.lists(FLOATS, min_size=1, max_size=8),
        st.integers(1, 3 * MAX_DIM).map(lambda n: [0.25] * n),
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
    rnd = draw(RANDOMS)
    for _ in range(draw(st.sampled_from([1, 1, 2, 0]))):  # mostly one resource, sometimes none
        resource_spans = request.resource_spans.add()
        for key, value in draw(attribute_lists(max_size=3)):
            kv = resource_spans.resource.attributes.add()
            kv.key = key
            set_value(kv.value, value)
        for _ in range(draw(st.sampled_from([1, 1, 0, 2]))):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = draw(TEXT)
            for _ in range(draw(st.integers(1, 5))):
                span = scope_spans.spans.add()
                span.trace_id = pick_id(draw, rnd, TRACE_POOL, BAD_TRACE_IDS, 16)
                span.span_id = pick_id(draw, rnd, SPAN_POOL, BAD_SPAN_IDS, 8)
                # mostly a parent (the trace waits for its root, pending traces pile up), else a root
                span.parent_span_id = b"" if rnd.random() < 0.2 else pick_id(draw, rnd, SPAN_POOL, BAD_SPAN_IDS, 8)
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


def mutate(body: bytes, rnd: random.Random) -> bytes:
    """Raw byte mutations of a valid body: flips, inserts, deletes, truncation, splices.

    Driven by a hypothesis-drawn ``Random``, so one example yields several mutants cheaply.
    """
    data = bytearray(body)
    for _ in range(rnd.randint(1, 6)):
        op = rnd.choice(["flip", "insert", "delete", "truncate", "splice", "byte"])
        pos = rnd.randint(0, len(data))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] ^= 1 << rnd.randrange(8)
        elif op == "byte" and data:
            data[min(pos, len(data) - 1)] = rnd.choice([0x00, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x22, 0x5B, 0x7B])
        elif op == "insert":
            data[pos:pos] = rnd.randbytes(rnd.randint(1, 8))
        elif op == "delete":
            del data[pos:pos + rnd.randint(1, 8)]
        elif op == "truncate":
            del data[pos:]
        elif op == "splice":
            start = rnd.randint(0, len(data))
            data[pos:pos] = data[start:start + rnd.randint(1, 32)]
    return bytes(data)


def gzip_variants(body: bytes, rnd: random.Random) -> list[tuple[bytes, str]]:
    """The body gzipped, gzip cut short, gzip with garbage after the header, deflate, plain garbage."""
    packed = gzip.compress(body, compresslevel=1)
    return [
        (packed, "gzip"),
        (packed[: rnd.randint(0, max(0, len(packed) - 1))], "gzip"),
        (packed[:10] + rnd.randbytes(rnd.randint(0, 40)), "gzip"),
        (zlib.compress(body, 1), "deflate"),
        (body, "gzip"),  # says gzip, is not
    ]


# --- JSON documents ----------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), TEXT)
ANY_JSON = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(TEXT, c, max_size=3)),
                        max_leaves=6)


def maybe_wrong(good):
    """Mostly the right shape, sometimes (1 in 8) any JSON value in its place: wrong types at every level."""
    return st.one_of(*[good] * 7, ANY_JSON)


def json_any_value():
    variants = st.sampled_from(["stringValue", "intValue", "doubleValue", "boolValue", "bytesValue", "string_value",
                                "int_value", "unknownValue"])
    oddities = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "12abc", "!!", "", str(2**63), str(2**64),
                                math.inf, -math.inf, math.nan, 10**400, 2**63, -(2**63) - 1, 1.5])
    scalar = st.builds(lambda k, v: {k: v}, variants, st.one_of(JSON_SCALARS, MEANINGFUL, oddities))
    return st.recursive(
        maybe_wrong(scalar),
        lambda c: st.one_of(
            st.builds(lambda vs: {"arrayValue": {"values": vs}}, maybe_wrong(st.lists(c, max_size=4))),
            st.builds(lambda kvs: {"kvlistValue": {"values": kvs}}, maybe_wrong(st.lists(json_kv(c), max_size=3))),
        ),
        max_leaves=6,
    )


def json_kv(values):
    return maybe_wrong(st.fixed_dictionaries({"key": maybe_wrong(KEYS), "value": values}))


def json_ids(pool, size):
    """Mostly valid (hex from the pool, or base64 as MessageToJson writes), else anything."""
    hex_ids = st.sampled_from(pool).map(bytes.hex)
    return st.one_of(hex_ids, hex_ids, hex_ids, st.sampled_from(pool).map(lambda b: base64.b64encode(b).decode()),
                     st.binary(min_size=size, max_size=size).map(bytes.hex), TEXT, st.just(""), ANY_JSON)


def json_times():
    return st.one_of(TIMESTAMPS.map(str), TIMESTAMPS,
                     st.sampled_from(["-1", "1e30", "NaN", "abc", str(2**80), -(10**25), math.inf, -math.inf, math.nan, 1e300]),
                     ANY_JSON)


@st.composite
def json_shapes(draw):
    """OTLP-JSON-shaped values built with wrong types at any level (most are refused outright)."""
    attrs = st.lists(json_kv(json_any_value()), max_size=5)
    span = st.fixed_dictionaries(
        {"traceId": json_ids(TRACE_POOL, 16), "spanId": json_ids(SPAN_POOL, 8), "name": maybe_wrong(MEANINGFUL)},
        optional={
            "parentSpanId": json_ids(SPAN_POOL, 8), "kind": maybe_wrong(st.sampled_from([1, 2, "SPAN_KIND_SERVER", 99, 2**40])),
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


WRONG_VALUES = [None, True, 0, -1, 1.5, math.inf, -math.inf, math.nan, 10**400, 2**63, 2**64, -(2**63) - 1, "", "x",
                "NaN", "Infinity", "1e400", "-5", str(2**64), [], {}, [1, "a"], {"values": 5}, {"stringValue": 7}]


TYPED_FIELDS = {"startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "intValue", "doubleValue", "boolValue",
                "stringValue", "bytesValue", "kind", "code", "key", "name", "message", "traceId", "spanId", "parentSpanId"}


def _slots(node, out):
    """Every (container, key) in a JSON tree: the places a wrong value can go."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        out.append((node, key))
        _slots(child, out)
    return out


@st.composite
def json_documents(draw):
    """Real OTLP JSON (a random request, hex ids as the spec wants) with a few values made wrong:
    wrong types, out-of-range numbers, deleted fields, extra attributes of any shape."""
    request = draw(export_requests())
    rnd = draw(RANDOMS)
    document = json_format.MessageToDict(request)
    for rs in document.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span and rnd.random() < 0.8:  # else keep MessageToJson's base64
                        span[key] = base64.b64decode(span[key]).hex()
                if rnd.random() < 0.15:
                    span.setdefault("attributes", []).append({"key": draw(KEYS), "value": draw(json_any_value())})
    for _ in range(rnd.choice([0, 0, 1, 1, 2, 3])):
        slots = _slots(document, [])
        # Half the time aim at the typed scalars (numbers, enums, keys, names): where JSON's
        # unbounded numbers and loose types meet fields protobuf would have bounded.
        typed = [(c, k) for c, k in slots if k in TYPED_FIELDS]
        if not slots:
            break
        container, key = rnd.choice(typed if typed and rnd.random() < 0.5 else slots)
        roll = rnd.random()
        if roll < 0.15 and isinstance(container, dict):
            del container[key]
        elif roll < 0.5:
            container[key] = rnd.choice(WRONG_VALUES)
        else:
            container[key] = draw(ANY_JSON)
    return document


def json_bytes(document) -> bytes:
    # allow_nan: NaN/Infinity literals, which Python's (and some exporters') JSON writes
    return json.dumps(document, allow_nan=True).encode()


def _dumps_deep(value) -> bytes:
    """json.dumps past the recursion limit (the encoder recurses once per level)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        return json.dumps(value).encode()
    finally:
        sys.setrecursionlimit(old)


def deep_json_bodies() -> list[bytes]:
    """Deep arrays (past json's recursion limit) and deep kvlists (through every stage, or past the decoder)."""
    bodies = [b'{"resourceSpans":' + b"[" * depth + b"]" * depth + b"}" for depth in (100, 1_000, 100_000)]
    for depth in (50, 300, 2_000):
        value = {"stringValue": "bottom"}
        for _ in range(depth):
            value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
        bodies.append(_dumps_deep({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": uuid.uuid4().hex, "spanId": SPAN_POOL[2].hex(), "name": "rag.query",
            "attributes": [{"key": sc.INPUT_VALUE, "value": value}]}]}]}]}))
    return bodies


INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf8\x88\x80\x80\x80"]


def splice_invalid_utf8(body: bytes, rnd: random.Random) -> bytes:
    pos = rnd.randint(0, len(body))
    return body[:pos] + rnd.choice(INVALID_UTF8) + body[pos:]


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
    counts["spans_accepted"] += result.accepted_spans
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
    pipeline = running.agent.pipeline
    assert pipeline.assembler.pending_traces <= MAX_PENDING
    body, trace_id = valid_query_request()
    result = pipeline.ingest(body, PROTOBUF)
    assert result.records == 1, result
    assert running.store.recent.get(trace_id) is not None
    # An exception swallowed inside assembly is a crash too, just a quiet one.
    assert running.metric("rag_agent_traces_dropped_total", {"reason": "assembly_error"}) in (None, 0.0), counts
    print(f"\nfuzz cases: {dict(counts)}")


@pytest.fixture
def fuzz_agent(start_agent, tmp_path):
    ingest = tmp_path / "ingest.yaml"
    ingest.write_text(f"limits:\n  max_embedding_dim: {MAX_DIM}\n  max_spans_per_trace: {MAX_SPANS_PER_TRACE}\n")
    return start_agent(ingest_config=str(ingest), max_pending_traces=MAX_PENDING, max_body_bytes=MAX_BODY,
                       max_attribute_chars=MAX_CHARS, root_timeout_s=600.0)  # traces wait: the bound is what stops them


def test_protobuf_requests_are_accepted_or_rejected_with_a_message(fuzz_agent):
    """Random-structure requests, their byte mutants and compressed forms, invalid UTF-8, deep nesting."""
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()
    assert pipeline.limits.max_embedding_dim == MAX_DIM  # the small limits are in force

    @fuzz_settings(250)
    @given(export_requests(), invalid_utf8_protobuf(), RANDOMS)
    def case(request, bad_utf8, rnd):
        body = request.SerializeToString()
        ingest_checked(pipeline, body, PROTOBUF, None, counts)
        for _ in range(3):
            ingest_checked(pipeline, mutate(body, rnd), PROTOBUF, None, counts)
        packed, encoding = rnd.choice(gzip_variants(body, rnd))
        ingest_checked(pipeline, packed, PROTOBUF, encoding, counts)
        ingest_checked(pipeline, bad_utf8, PROTOBUF, None, counts)
        ingest_checked(pipeline, rnd.randbytes(rnd.randint(0, 100)), PROTOBUF, None, counts)

    case()
    for depth in (20, 99, 101, 200, 1_000):  # around and past protobuf's recursion limit (100)
        ingest_checked(pipeline, deeply_nested_protobuf(depth), PROTOBUF, None, counts)
    assert counts["accepted"] and counts["rejected"] and counts["records"] and counts["spans_rejected"], counts
    m = fuzz_agent.metric_sum
    # the bad parts were really exercised, and counted rather than crashing anything
    assert m("rag_agent_attributes_truncated_total") and m("rag_agent_embeddings_rejected_total", reason="not_finite"), counts
    # A model's dimension is a vote over its recent vectors, so random traffic seldom makes a
    # rejection; tests/collectors/test_assembly.py checks that path with known vectors.
    assert m("rag_agent_traces_dropped_total", reason="evicted")
    assert_still_usable(fuzz_agent, counts)


def test_json_requests_are_accepted_or_rejected_with_a_message(fuzz_agent):
    """OTLP JSON with wrong types everywhere, canonical proto3 JSON, mutants, invalid UTF-8, deep nesting."""
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()

    @fuzz_settings(250)
    @given(json_documents(), st.sampled_from([JSON, "application/json; charset=utf-8", "APPLICATION/JSON"]),
           RANDOMS)
    def case(document, content_type, rnd):
        body = json_bytes(document)
        ingest_checked(pipeline, body, content_type, None, counts)
        for _ in range(2):
            ingest_checked(pipeline, mutate(body, rnd), content_type, None, counts)
        ingest_checked(pipeline, splice_invalid_utf8(body, rnd), content_type, None, counts)
        packed, encoding = rnd.choice(gzip_variants(body, rnd))
        ingest_checked(pipeline, packed, content_type, encoding, counts)
        ingest_checked(pipeline, b"\xef\xbb\xbf" + body, content_type, None, counts)  # a BOM

    @fuzz_settings(100)
    @given(export_requests(), RANDOMS)
    def canonical(request, rnd):  # what MessageToJson writes: base64 ids, int64 strings, "NaN"
        body = json_format.MessageToJson(request, indent=None).encode()
        ingest_checked(pipeline, body, JSON, None, counts)
        ingest_checked(pipeline, mutate(body, rnd), JSON, None, counts)

    @fuzz_settings(100)
    @given(st.one_of(json_shapes(), ANY_JSON))
    def any_shape(value):  # wrong types from the top down; not an object at all
        ingest_checked(pipeline, json_bytes(value), JSON, None, counts)

    case()
    canonical()
    any_shape()
    for body in deep_json_bodies():
        ingest_checked(pipeline, body, JSON, None, counts)
    assert counts["accepted"] and counts["rejected"] and counts["records"] and counts["spans_rejected"], counts
    assert_still_usable(fuzz_agent, counts)


def test_valid_bodies_with_wrong_headers_are_rejected_with_a_message(fuzz_agent):
    """Protobuf sent as JSON and back, unknown types and encodings: refused, never mistaken."""
    pipeline, counts = fuzz_agent.agent.pipeline, Counter()

    @fuzz_settings(150)
    @given(export_requests(), json_documents(),
           st.one_of(st.sampled_from([PROTOBUF, JSON, "text/plain", "", "application/x-protobuf; x=y", "*/*"]), TEXT),
           st.one_of(st.none(), st.sampled_from(["gzip", "identity", "compress", "GZIP", " gzip ", "br"]), TEXT))
    def case(request, document, content_type, encoding):
        ingest_checked(pipeline, request.SerializeToString(), content_type, encoding, counts)
        ingest_checked(pipeline, json_bytes(document), content_type, encoding, counts)

    case()
    assert counts["rejected"] and counts["accepted"], counts
    assert_still_usable(fuzz_agent, counts)


def post(running, body: bytes, content_type: str, encoding: str | None):
    """POST over a fresh connection; the receiver may answer 413 before reading an oversized body
    and close, so a broken pipe while sending is not the end: its answer is still there to read."""
    url = urlsplit(running.otlp_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    headers = {"Content-Type": content_type, **({"Content-Encoding": encoding} if encoding else {})}
    try:
        try:
            conn.request("POST", "/v1/traces", body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


@st.composite
def wire_requests(draw) -> tuple[bytes, str | None, str]:
    kind = draw(st.sampled_from(["protobuf", "protobuf", "json", "json", "mutant", "gzip", "too_large", "bomb", "type"]))
    if kind == "protobuf":
        return draw(export_requests()).SerializeToString(), None, PROTOBUF
    if kind == "json":
        return json_bytes(draw(json_documents())), None, JSON
    rnd = draw(RANDOMS)
    if kind == "mutant":
        body = draw(export_requests()).SerializeToString()
        return (mutate(body, rnd), None, PROTOBUF) if rnd.random() < 0.5 else (splice_invalid_utf8(json_bytes(draw(json_documents())), rnd), None, JSON)
    if kind == "gzip":
        return (*rnd.choice(gzip_variants(draw(export_requests()).SerializeToString(), rnd)), PROTOBUF)
    if kind == "too_large":  # refused on Content-Length, before the body is read
        return b"\x00" * draw(st.integers(MAX_BODY + 1, 4 * MAX_BODY)), None, PROTOBUF
    if kind == "bomb":  # small on the wire, over the limit once decompressed
        return GZIP_BOMB, "gzip", draw(st.sampled_from([PROTOBUF, JSON]))
    return rnd.randbytes(rnd.randint(0, 64)), None, draw(st.sampled_from(["text/plain", "application/xml", ""]))


GZIP_BOMB = gzip.compress(b"\x00" * (4 * MAX_BODY))


def test_over_http_every_answer_is_200_400_413_or_415(fuzz_agent):
    """A few hundred cases over the real receiver: never a 5xx, and every 400 explains itself."""
    counts = Counter()

    @fuzz_settings(300)
    @given(wire_requests())
    def case(wire):
        body, encoding, content_type = wire
        status, response_headers, payload = post(fuzz_agent, body, content_type, encoding)
        counts["cases"] += 1
        counts[status] += 1
        assert status in (200, 400, 413, 415), (status, payload[:300])
        if status != 200:  # a google.rpc.Status in the request's encoding, with a message
            if response_headers.get("Content-Type", "").startswith(PROTOBUF):
                message = status_pb2.Status.FromString(payload).message
            else:
                message = json.loads(payload)["message"]
            assert message.strip(), (status, payload)

    case()
    assert counts[200] and counts[400] and counts[413] and counts[415], counts
    assert fuzz_agent.metric_sum("rag_agent_ingest_errors_total", reason="malformed") == counts[400]
    assert_still_usable(fuzz_agent, counts)


def _json_span(**fields) -> bytes:
    span = {"traceId": uuid.uuid4().hex, "spanId": "ab" * 8, "name": "rag.query", **fields}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


@pytest.mark.parametrize("body, message", [
    # Each of these escaped as OverflowError/ValueError/AttributeError (a 500) before the fix.
    (_json_span(startTimeUnixNano=math.inf), "infinity"),
    (_json_span(endTimeUnixNano="-5"), "timestamp -5 is out of range"),
    (_json_span(startTimeUnixNano=str(2**64)), "out of range"),
    (b'{"resourceSpans": ' + b"1" * 5000 + b"}", "not valid JSON"),
    (_json_span(attributes=[{"key": "x", "value": {"intValue": str(10**30)}}]), "intValue"),
    (_json_span(attributes=[{"key": "x", "value": {"intValue": math.inf}}]), "infinity"),
    (_json_span(attributes=[{"key": "x", "value": {"doubleValue": 10**400}}]), "too large"),
    (_json_span(attributes=[{"key": 5, "value": {"stringValue": "x"}}]), "attribute key must be a string"),
    (_json_span(name=["rag.query"]), "span name must be a string"),
    (_json_span(kind=2**40), "enum value"),
])
def test_json_values_out_of_protobuf_range_are_refused_with_a_message(fuzz_agent, body, message):
    with pytest.raises(OTLPDecodeError, match=message):
        fuzz_agent.agent.pipeline.ingest(body, JSON)


def test_json_attribute_without_a_key_is_the_empty_key(fuzz_agent):
    """proto3 JSON omits default values, so ``{"value": ...}`` is a KeyValue with key "" (was a 400 "'key'")."""
    result = fuzz_agent.agent.pipeline.ingest(_json_span(attributes=[{"value": {"stringValue": "x"}}]), JSON)
    assert result.accepted_spans == 1 and result.rejected_spans == 0
