"""``encode_record`` builds the referenced payload straight from the record: the blob must be the
one the JSON round trip (``record_json`` -> walk -> dumps) wrote, byte for byte, so replicas of
either version read and write the same rows."""

from __future__ import annotations

import zlib

import orjson
import pytest
import zstandard

from rag_monitor.record import Document, Feedback, FilterApplied, StageTiming
from rag_monitor.store.hot import MIN_SHARED, _walk, decode_record, encode_record
from rag_monitor.store.models import record_json
from tests.store.conftest import make_record

LONG = "To cancel, open Settings, then Billing, then Cancel plan. Refunds in 5 days."
assert len(LONG) >= MIN_SHARED


def _round_trip(record) -> tuple[bytes, dict[str, str]]:
    """The encoding as the store first wrote it (the reference this one must match)."""
    payload = orjson.loads(record_json(record)[1])
    contents: dict[str, str] = {}
    _walk(payload, contents)
    return orjson.dumps(payload), contents


RECORDS = {
    "plain": make_record(1),
    "documents": make_record(2, retrieved=[Document("d1", LONG, 0.5, {"lang": "de"}), Document("d2", "short", 0.1)],
                             delivered=[Document("d1", LONG, 0.5, {"lang": "de"})]),
    "no id, non-finite": make_record(3, confidence=float("nan"), retrieved=[Document(None, LONG + "!", float("inf"))]),
    "filter documents": make_record(
        4, stages=[StageTiming("retrieve", "a" * 16, 1, 2)], feedback=[Feedback("copy", 5, value="x")],
        filters=[FilterApplied("relevance", "p", 10, 0, ["d1"]), FilterApplied("entitlement", "q", 3, 2, [],
                                                                                  [Document("d9", LONG * 2, 0.2)])]),
    "metadata holds a document": make_record(
        5, retrieved=[Document("d1", "short", 0.3, {"parent": {"id": "p", "content": LONG}, "n": [1, {"id": 2, "content": LONG}]})]),
    "vectors": make_record(6, query_embedding=[0.1, -0.25], document_embeddings=[[1.0, 2.0]],
                           cache={"embedding": {"hit": 2, "miss": 1}}),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_blob_is_the_round_trips_byte_for_byte(name):
    record = RECORDS[name]
    before = record.to_dict()
    text, contents = _round_trip(record)
    blob, got = encode_record(record, compress=False)
    assert blob == b"j" + text and got == contents
    blob, got = encode_record(record)
    assert blob[:1] == b"s" and zstandard.ZstdDecompressor().decompress(blob[1:]) == text and got == contents
    assert record.to_dict() == before  # the record itself is never rewritten
    assert decode_record(blob, contents).to_dict() == orjson.loads(orjson.dumps(before))
    # what earlier versions wrote (zlib) still reads, next to what this one writes
    assert decode_record(b"z" + zlib.compress(text, 1), contents).to_dict() == orjson.loads(orjson.dumps(before))


def test_a_dict_record_encodes_as_its_record_does():
    record = RECORDS["documents"]
    assert encode_record(record.to_dict()) == encode_record(record)


def test_a_record_that_is_not_json_names_itself():
    record = make_record(7, retrieved=[Document("d1", LONG, 0.5, {"bad": object()})])
    with pytest.raises(ValueError, match=record.trace_id):
        encode_record(record)
