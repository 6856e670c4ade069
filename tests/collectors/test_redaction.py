from __future__ import annotations

import random
from collections import Counter

import pytest

from rag_monitor.collectors import Redactor, Span
from rag_monitor.collectors.redaction import iban_valid, luhn_valid
from rag_monitor.config_files import shipped_path
from rag_monitor.record import Document, Feedback, QueryRecord

R = Redactor()

POSITIVE = [
    ("write to jo.doe+rag@mail.example.co.uk today", "email", "<EMAIL>"),
    ("call +44 20 7946 0958 now", "phone", "<PHONE>"),
    ("call +1 (415) 555-2671 now", "phone", "<PHONE>"),
    ("call (555) 123-4567 now", "phone", "<PHONE>"),
    ("call 555-123-4567 now", "phone", "<PHONE>"),
    ("call 555.123.4567 now", "phone", "<PHONE>"),
    ("card 4111 1111 1111 1111 ok", "card", "<CARD>"),
    ("card 5500-0000-0000-0004 ok", "card", "<CARD>"),
    ("card 378282246310005 ok", "card", "<CARD>"),
    ("iban DE89 3704 0044 0532 0130 00 ok", "iban", "<IBAN>"),
    ("iban GB82WEST12345698765432 ok", "iban", "<IBAN>"),
    ("from 192.168.10.254 ok", "ip", "<IP>"),
    ("from 2001:db8:85a3::8a2e:370:7334 ok", "ip", "<IP>"),
    ("from ::1 ok", "ip", "<IP>"),
]

NEGATIVE = [
    "card 4111 1111 1111 1112 fails Luhn",
    "iban DE89 3704 0044 0532 0130 01 fails mod-97",
    "in 2024 and 1999 the price was $1,299.00 or 15.5%",
    "order 123456789 shipped; doc-2024-11-30 and ticket #4521",
    "dates 2024-11-30, 30.11.2024 and 10:30:00",
    "version 1.2.3 and 3.11.4-rc1, ISBN 978-3-16-148410-0",
    "account 12345678901234 (not Luhn)",
    "256.1.1.1 is not an address, nor is 1.2.3",
]


@pytest.mark.parametrize("text,kind,token", POSITIVE)
def test_each_kind_redacted(text, kind, token):
    redacted, counts = R.redact_text(text)
    assert token in redacted and counts == {kind: 1}, redacted
    assert redacted.split()[0] == text.split()[0] and redacted.split()[-1] == text.split()[-1]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_numbers_kept(text):
    assert R.redact_text(text) == (text, {})


def test_checksums():
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert iban_valid("GB82WEST12345698765432") and not iban_valid("GB82WEST12345698765433")


def _luhn_complete(prefix: str) -> str:
    for d in "0123456789":
        if luhn_valid(prefix + d):
            return prefix + d
    raise AssertionError


def test_seeded_corpus():
    """Random sentences with planted PII: every plant found, nothing else touched."""
    rng = random.Random(20261130)
    words = "the refund policy covers orders in 2023 priced at 49.99 under plan 12 for users".split()
    expected = {"email": 0, "card": 0, "phone": 0, "ip": 0}
    for _ in range(200):
        sentence = [rng.choice(words) for _ in range(8)]
        kind = rng.choice([*expected, None])
        if kind == "email":
            sentence.insert(3, f"user{rng.randrange(999)}@example{rng.randrange(9)}.com")
        elif kind == "card":
            sentence.insert(3, _luhn_complete("4" + "".join(rng.choice("0123456789") for _ in range(14))))
        elif kind == "phone":
            sentence.insert(3, f"({rng.randrange(200, 999)}) {rng.randrange(200, 999)}-{rng.randrange(1000, 9999)}")
        elif kind == "ip":
            sentence.insert(3, ".".join(str(rng.randrange(1, 255)) for _ in range(4)))
        if kind:
            expected[kind] += 1
        text = " ".join(sentence)
        redacted, counts = R.redact_text(text)
        assert dict(counts) == ({kind: 1} if kind else {}), text
        if kind:
            assert redacted.split()[3].startswith("<") and redacted.split()[:3] == sentence[:3]
    assert all(expected.values())


def test_custom_rule_from_yaml(tmp_path):
    shipped = Redactor.load(shipped_path("redaction_rules"))
    assert shipped.redact_text("mail a@b.io") == ("mail <EMAIL>", {"email": 1})
    path = tmp_path / "r.yaml"
    path.write_text("rules:\n  - name: us_ssn\n    pattern: '\\b\\d{3}-\\d{2}-\\d{4}\\b'\n    replacement: '<SSN>'\n    requires: '-'\n")
    ssn = Redactor.load(path)
    assert ssn.redact_text("ssn 123-45-6789") == ("ssn <SSN>", {"us_ssn": 1})
    assert ssn.redact_text("ssn 123 45 6789") == ("ssn 123 45 6789", {})  # no '-': the regex never runs
    path.write_text("disable_builtin: [ip]\nrules:\n  - name: employee\n    pattern: 'emp-\\d{4}'\n    replacement: '<EMP>'\n    ignore_case: true\n")
    custom = Redactor.load(path)
    assert custom.redact_text("EMP-1234 from 10.0.0.1") == ("<EMP> from 10.0.0.1", {"employee": 1})
    path.write_text("rules:\n  - name: broken\n    pattern: '('\n")
    with pytest.raises(ValueError, match="broken"):
        Redactor.load(path)


def test_presidio_is_optional():
    try:
        import presidio_analyzer  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="presidio"):
            Redactor(use_presidio=True)
    else:
        pytest.skip("presidio installed: the ImportError path cannot be checked")


def test_redact_span_every_string_ids_become_pseudonyms():
    span = Span("1" * 32, "2" * 16, None, "rag.query", 1, 1, 2, attributes={
        "input.value": "mail me at a@b.io", "tags": ["x", "ip 10.1.2.3"], "retrieval.documents.0.document.id": "a@b.io",
        "session.id": "4111111111111111", "n": 4111111111111111, "nested": {"k": "call 555-123-4567"},
        "retrieval.documents.1.document.id": "doc-1", "llm.model_name": "gpt-4o-2024-08-06",
    })
    counts = R.redact_span(span)
    assert counts == {"email": 2, "ip": 1, "phone": 1, "card": 1}
    a = span.attributes
    assert a["input.value"] == "mail me at <EMAIL>" and a["tags"] == ["x", "ip <IP>"] and a["nested"] == {"k": "call <PHONE>"}
    # identifiers with PII: one keyed pseudonym per value, the same wherever the value appears
    assert a["retrieval.documents.0.document.id"] == R.pseudonym("a@b.io") != R.pseudonym("4111111111111111")
    assert a["session.id"] == R.pseudonym("4111111111111111") and a["session.id"].startswith("pii-")
    assert a["retrieval.documents.1.document.id"] == "doc-1" and a["llm.model_name"] == "gpt-4o-2024-08-06"
    assert a["n"] == 4111111111111111 and span.trace_id == "1" * 32


def test_pseudonyms_are_keyed():
    one, same, other = Redactor(pseudonym_key=b"k1"), Redactor(pseudonym_key=b"k1"), Redactor(pseudonym_key=b"k2")
    assert one.pseudonym("jane@example.com") == same.pseudonym("jane@example.com") != other.pseudonym("jane@example.com")
    assert not Redactor().redact_text(one.pseudonym("4111111111111111"))[1]  # a pseudonym is never PII itself


def test_redact_record():
    doc = Document("d1", "contact a@b.io")
    record = QueryRecord("1" * 32, "2" * 16, 0, 1, query="I am x@y.org", answer="call +44 20 7946 0958", user_id="u@corp.com",
                         retrieved=[doc], delivered=[doc], feedback=[Feedback("thumbs_down", 1, reason="card 4111-1111-1111-1111")])
    counts = R.redact_record(record)
    assert counts == {"email": 3, "phone": 1, "card": 1}  # the shared document counted once
    assert (record.query, record.answer, doc.content, record.feedback[0].reason) == ("I am <EMAIL>", "call <PHONE>", "contact <EMAIL>", "card <CARD>")
    assert record.user_id == R.pseudonym("u@corp.com")


def test_records_assembled_from_redacted_spans_are_clean():
    """The agent's order: decode, redact every span, assemble. No second pass on the record."""
    from rag_monitor.collectors import TraceAssembler

    spans = [
        Span("1" * 32, "3" * 16, "2" * 16, "retrieve", 1, 2, 3, attributes={
            "rag.stage": "retrieve", "retrieval.documents.0.document.id": "d1",
            "retrieval.documents.0.document.content": "Ask jo@corp.com or call (555) 123-4567."}),
        Span("1" * 32, "2" * 16, None, "rag.query", 1, 1, 4, attributes={
            "input.value": "my card 4111 1111 1111 1111 was charged", "output.value": "Refund sent to DE89 3704 0044 0532 0130 00.",
            "user.id": "jo@corp.com"}),
    ]
    counts = sum((R.redact_span(s) for s in spans), start=Counter())
    record = TraceAssembler().add(spans).records[0]
    assert counts == {"email": 2, "phone": 1, "card": 1, "iban": 1}
    assert record.query == "my card <CARD> was charged" and record.answer == "Refund sent to <IBAN>."
    assert record.delivered[0].content == "Ask <EMAIL> or call <PHONE>." and record.user_id == R.pseudonym("jo@corp.com")
    assert R.redact_record(record) == {}  # nothing left to find


def test_number_hint_fast_path_agrees_with_the_regex():
    from rag_monitor.collectors.redaction_rules import NUMBER_HINT, has_number

    rng = random.Random(5)
    alphabet = "0123456789 .-x:é٣"  # separators, a letter, non-ASCII text and an Arabic-Indic digit
    samples = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))) for _ in range(20_000)]
    samples += ["1.2.3.4", "123 456", "123-456", "12345", "١٢٣٤٥٦", "10.0.0", "ip 10.0.0.1 here"]
    for text in samples:
        assert has_number(text) == (NUMBER_HINT.search(text) is not None), text


def test_clean_text_is_remembered_and_pii_never_is():
    from rag_monitor.collectors import redaction

    redactor = Redactor()
    clean = "refunds arrive within 5 business days since 2024"
    dirty = "write to jo@example.com or call +44 20 7946 0958"
    counts = Counter()
    for _ in range(3):
        assert redactor._redact(clean, counts) == clean
        assert redactor._redact(dirty, counts) == "write to <EMAIL> or call <PHONE>"
    assert counts == {"email": 3, "phone": 3}  # every occurrence is counted, not only the first
    assert clean in redactor._clean and dirty not in redactor._clean
    assert not any("@" in text or "7946" in text for text in redactor._clean)

    for i in range(redaction.CLEAN_CACHE_ENTRIES + 10):
        redactor._redact(f"clean text number {i:06d}x", counts)
    assert len(redactor._clean) <= redaction.CLEAN_CACHE_ENTRIES  # bounded: cleared whole when full
    redactor._redact("y" * (redaction.CLEAN_CACHE_MAX_CHARS + 1), counts)
    assert "y" * (redaction.CLEAN_CACHE_MAX_CHARS + 1) not in redactor._clean


def test_attribute_keys_and_kvlist_keys_are_redacted_like_values():
    from rag_monitor.collectors.otlp.spans import SpanEvent

    span = Span("1" * 32, "2" * 16, None, "rag.query", 1, 1, 2, attributes={
        "feedback jo@example.com": "thumbs_down", "input.value": "fine",
        "app.context": {"ops@corp.example.org": {"card 4111 1111 1111 1111": "x"}, "plain.key": "call 555-123-4567"},
        "vote b@c.io": 1, "vote d@c.io": 2,  # two keys that redact alike both stay
    })
    span.events.append(SpanEvent("retry", 1, {"for x@y.io": "1"}))
    counts = R.redact_span(span)
    assert counts == {"email": 5, "card": 1, "phone": 1}
    assert list(span.attributes) == ["feedback <EMAIL>", "input.value", "app.context", "vote <EMAIL>", "vote <EMAIL>#2"]
    assert span.attributes["app.context"] == {"<EMAIL>": {"card <CARD>": "x"}, "plain.key": "call <PHONE>"}
    assert span.attributes["vote <EMAIL>"] == 1 and span.attributes["vote <EMAIL>#2"] == 2
    assert span.events[0].attributes == {"for <EMAIL>": "1"}
    # Clean keys are remembered apart from texts: a second span costs a lookup per key.
    assert "input.value" in R._clean_keys and not any("@" in k for k in R._clean_keys)


def test_document_metadata_keys_are_redacted():
    doc = Document("d1", "text", metadata={"owner jo@example.com": {"card 4111 1111 1111 1111": True}})
    record = QueryRecord("1" * 32, "2" * 16, 0, 1, retrieved=[doc])
    assert R.redact_record(record) == {"email": 1, "card": 1}
    assert doc.metadata == {"owner <EMAIL>": {"card <CARD>": True}}


@pytest.mark.parametrize("text", [
    '{"to": "jo\\u0040example.com", "body": "cut sho',          # JSON cut short
    '[{"q": "card 4111\\u00201111\\u00201111\\u00201111"}, {"x',  # an escaped separator
    'log line: sent to jo\\u0040example.com, done',             # not JSON at all
    '"{\\"to\\": \\"jo\\\\u0040example.com\\"',                 # JSON inside a JSON string, cut short
])
def test_pii_behind_escapes_in_text_that_is_not_valid_json_is_redacted(text):
    redactor = Redactor()
    for _ in range(2):  # and the text is never remembered as clean
        redacted, counts = redactor.redact_text(text)
        assert counts and "example.com" not in redacted and "4111" not in redacted
        assert "<EMAIL>" in redacted or "<CARD>" in redacted
    span = Span("1" * 32, "2" * 16, None, "n", 1, 1, 2, attributes={"output.value": text, "session.id": text})
    redactor.redact_span(span)
    assert "example.com" not in span.attributes["output.value"] and span.attributes["session.id"] == redactor.pseudonym(text)


def test_escaped_surrogates_and_clean_escaped_text_are_left_alone():
    text = '{"a": "\\ud83d\\ude00 caf\\u00e9 in 2024", "b": "cut'
    assert R.redact_text(text) == (text, {})
