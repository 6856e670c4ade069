"""PII redaction before anything is stored or forwarded.

    redactor = Redactor.load("collectors/redaction.yaml")     # built-ins + the operator's rules
    text, counts = redactor.redact_text("mail jo@example.com")   # "mail <EMAIL>", {"email": 1}
    counts = redactor.redact_span(span)       # every string attribute, in place
    counts = redactor.redact_record(record)   # query, answer, documents, feedback reasons

Built-in kinds: e-mail, phone (international ``+CC ...`` and US formats with consistent
separators; bare digit runs such as years, prices and document ids are left alone), payment
cards (13-19 digits, spaces or dashes allowed, Luhn-checked: a number that fails Luhn stays),
IBAN (mod-97 checked), IPv4 and IPv6 (validated with ``ipaddress``). Every pattern is compiled
once and guarded by a cheap test (an ``@``, a digit, a colon) so clean text costs little.

Presidio (``presidio_analyzer``) adds NER-based detection of names and addresses when
``use_presidio=True`` (or ``presidio: true`` in the YAML). It is OFF by default: it needs spaCy
models and is two orders of magnitude slower than the regexes.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import Span
from rag_monitor.record import QueryRecord

__all__ = ["RedactionRule", "Redactor", "luhn_valid", "iban_valid"]


def luhn_valid(digits: str) -> bool:
    """Luhn checksum of a string of digits (payment card numbers)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        d = ord(char) - 48
        if position % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """ISO 13616 mod-97 check on an IBAN without spaces."""
    iban = iban.upper()
    if not 15 <= len(iban) <= 34 or not iban[:2].isalpha() or not iban[2:4].isdigit():
        return False
    rearranged = iban[4:] + iban[:4]
    try:
        number = int("".join(str(int(c, 36)) for c in rearranged))
    except ValueError:
        return False
    return number % 97 == 1


@dataclass(frozen=True, slots=True)
class RedactionRule:
    """A pattern, its replacement token, and an optional validator (the match stays if it says no)."""

    name: str
    pattern: re.Pattern[str]
    replacement: str
    validate: Callable[[str], bool] | None = None
    needs: Callable[[str], bool] | None = None
    """Cheap pre-check: skip the regex entirely when this says the text cannot match."""
    needs_number: bool = False
    """Skip text with no run of 6+ digits (single separators allowed) and no dotted quad:
    tested once per text for all such rules (cards, IBANs, IPv4, US phones)."""
    requires: str | None = None
    """A substring every match contains (``@``, ``-``): text without it skips the regex."""
    locate: Callable[[str], tuple[int, int] | None] | None = None
    """Instead of ``validate``: the (start, end) of the real thing inside the match, or None."""

    @classmethod
    def from_config(cls, item: dict[str, Any]) -> RedactionRule:
        try:
            name, pattern = str(item["name"]), str(item["pattern"])
        except KeyError as exc:
            raise ValueError(f"redaction rule {item!r} lacks {exc.args[0]!r} (need name, pattern, replacement)") from None
        flags = re.IGNORECASE if item.get("ignore_case") else 0
        try:
            compiled = re.compile(pattern, flags)
        except re.error as exc:
            raise ValueError(f"redaction rule {name!r}: invalid regex {pattern!r}: {exc}") from None
        requires = item.get("requires")
        return cls(name, compiled, str(item.get("replacement", f"<{name.upper()}>")), requires=str(requires) if requires else None)


# Pre-checks: patterns that start with a digit or letter class, which the regex engine scans
# for quickly, and that every real match contains.
# "a@b.io" is the shortest built-in match worth redacting (a bare "::1" is loopback, not
# personal); shorter strings are skipped.
_MIN_PII_CHARS = 6
_IBAN_HINT = re.compile(r"[A-Z]{2}\d{2}")
_CARD_HINT = re.compile(r"\d{3}[ -]?\d{3}")
_IPV4_HINT = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")
_US_PHONE_HINT = re.compile(r"\d{3}[ .-]\d{4}")
# Starts with a plain \d so the engine scans for digits in C before trying the alternatives.
_NUMBER_HINT = re.compile(r"\d(?:\d\d[ .-]?\d{3}|\.\d{1,3}\.\d{1,3}\.\d)")


def _card_valid(match: str) -> bool:
    digits = match.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _card_span(match: str) -> tuple[int, int] | None:
    """Where in ``match`` a Luhn-valid card number is, cut at separators, or None.

    A run like "49 4111 1111 1111 1111 12" is a card between two ordinary numbers.
    """
    if _card_valid(match):
        return 0, len(match)
    bounds = [0] + [i for i, c in enumerate(match) if c in " -"] + [len(match)]
    candidates = [(b - a, a, b) for i, a in enumerate(bounds) for b in bounds[i + 1 :]]
    for _, start, end in sorted(candidates, reverse=True):
        start += start > 0 and match[start] in " -"
        if _card_valid(match[start:end]):
            return start, end
    return None


def _phone_valid(match: str) -> bool:
    return 7 <= sum(c.isdigit() for c in match) <= 15


def _ipv6_valid(match: str) -> bool:
    try:
        ipaddress.IPv6Address(match)
    except ValueError:
        return False
    return True


BUILTIN_RULES: tuple[RedactionRule, ...] = (
    RedactionRule(
        "email",
        re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
        "<EMAIL>",
        needs=lambda t: "@" in t,
    ),
    RedactionRule(
        "iban",
        re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"),
        "<IBAN>",
        validate=lambda m: iban_valid(m.replace(" ", "")),
        needs=lambda t: _IBAN_HINT.search(t) is not None,
        needs_number=True,
    ),
    RedactionRule(
        "card",
        re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d])"),
        "<CARD>",
        locate=_card_span,
        needs=lambda t: _CARD_HINT.search(t) is not None,
        needs_number=True,
    ),
    RedactionRule(
        "ip",  # IPv6 first: an IPv4-mapped v6 address contains a v4 one
        re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])"),
        "<IP>",
        validate=_ipv6_valid,
        needs=lambda t: ":" in t and ("::" in t or t.count(":") >= 3),
    ),
    RedactionRule(
        "ip",
        re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\.?\d)"),
        "<IP>",
        needs=lambda t: "." in t and _IPV4_HINT.search(t) is not None,
        needs_number=True,
    ),
    RedactionRule(
        "phone",  # international: +CC then 2-5 groups; 7-15 digits in all (E.164)
        re.compile(r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?!\d)"),
        "<PHONE>",
        validate=_phone_valid,
        needs=lambda t: "+" in t,
    ),
    RedactionRule(
        "phone",  # US: (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567 (one separator kind)
        re.compile(r"(?<![\w(])(?:1[ .-]?)?(?:\(\d{3}\) ?\d{3}[ .-]|\d{3}([ .-])\d{3}\1)\d{4}(?![\w-]|\.\d)"),
        "<PHONE>",
        needs=lambda t: _US_PHONE_HINT.search(t) is not None,
        needs_number=True,
    ),
)


class Redactor:
    """Replaces PII in text with tokens such as ``<EMAIL>`` and counts what it replaced, by kind."""

    def __init__(
        self,
        rules: Iterable[RedactionRule] = (),
        *,
        builtins: bool = True,
        use_presidio: bool = False,
        presidio_entities: Iterable[str] = ("PERSON", "LOCATION"),
    ):
        self.rules: tuple[RedactionRule, ...] = (*(BUILTIN_RULES if builtins else ()), *rules)
        # Custom rules may match short text (a 4-letter code); the built-ins need >= 6 chars.
        self._min_chars = _MIN_PII_CHARS if self.rules == BUILTIN_RULES else 1
        self._presidio = None
        self._presidio_entities = list(presidio_entities)
        if use_presidio:
            try:
                from presidio_analyzer import AnalyzerEngine
            except ImportError as exc:
                raise ImportError(
                    "use_presidio=True needs presidio-analyzer and a spaCy model: "
                    "pip install presidio-analyzer && python -m spacy download en_core_web_lg"
                ) from exc
            self._presidio = AnalyzerEngine()

    @classmethod
    def load(cls, path: str | Path) -> Redactor:
        """Built-in rules plus ``rules:`` from a YAML file (see ``collectors/redaction.yaml``)."""
        import yaml

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping with 'rules:', got {type(data).__name__}")
        disabled = set(data.get("disable_builtin", []) or [])
        unknown = disabled - {r.name for r in BUILTIN_RULES}
        if unknown:
            raise ValueError(f"{path}: disable_builtin names unknown kinds {sorted(unknown)}")
        redactor = cls(
            [RedactionRule.from_config(item) for item in data.get("rules", []) or []],
            use_presidio=bool(data.get("presidio", False)),
        )
        redactor.rules = tuple(r for r in redactor.rules if r not in BUILTIN_RULES or r.name not in disabled)
        return redactor

    def redact_text(self, text: str) -> tuple[str, Counter[str]]:
        counts: Counter[str] = Counter()
        return self._redact(text, counts), counts

    def _redact(self, text: str, counts: Counter[str]) -> str:
        if len(text) < self._min_chars:
            return text
        has_number: bool | None = None
        for rule in self.rules:
            if rule.requires is not None and rule.requires not in text:
                continue
            if rule.needs_number:
                if has_number is None:
                    has_number = _NUMBER_HINT.search(text) is not None
                if not has_number:
                    continue
            if rule.needs is not None and not rule.needs(text):
                continue
            if rule.validate is None and rule.locate is None:
                text, n = rule.pattern.subn(rule.replacement, text)
                if n:
                    counts[rule.name] += n
            elif rule.pattern.search(text) is not None:
                text = rule.pattern.sub(self._validated(rule, counts), text)
        if self._presidio is not None and text:
            text = self._redact_presidio(text, counts)
        return text

    @staticmethod
    def _validated(rule: RedactionRule, counts: Counter[str]) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            text = match.group(0)
            if rule.locate is not None:
                where = rule.locate(text)
                if where is None:
                    return text
                counts[rule.name] += 1
                return text[: where[0]] + rule.replacement + text[where[1] :]
            if rule.validate(text):  # type: ignore[misc]
                counts[rule.name] += 1
                return rule.replacement
            return text

        return replace

    def _redact_presidio(self, text: str, counts: Counter[str]) -> str:
        results = self._presidio.analyze(text=text, language="en", entities=self._presidio_entities)  # type: ignore[union-attr]
        for result in sorted(results, key=lambda r: r.start, reverse=True):
            text = text[: result.start] + f"<{result.entity_type}>" + text[result.end :]
            counts[result.entity_type.lower()] += 1
        return text

    # Identifiers and controlled vocabulary, never free text: left as they are (and skipped
    # cheaply: every span passes through here).
    _ID_KEYS = frozenset(
        {
            sc.SESSION_ID, sc.RAG_CITATIONS, sc.RAG_CONTEXT_DOCUMENT_IDS, sc.RAG_FILTER_EXCLUDED_IDS, sc.RAG_SHADOW_OF,
            sc.OPENINFERENCE_SPAN_KIND, sc.RAG_STAGE, sc.RAG_VARIANT, sc.RAG_RELEASE, sc.RAG_FILTER_KIND,
            sc.LLM_MODEL_NAME, sc.LLM_PROVIDER, sc.EMBEDDING_MODEL_NAME, sc.RERANKER_MODEL_NAME, sc.GEN_AI_REQUEST_MODEL,
            sc.GEN_AI_RESPONSE_MODEL, sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_SYSTEM, sc.GEN_AI_PROVIDER_NAME,
            sc.INPUT_MIME_TYPE, sc.OUTPUT_MIME_TYPE,
        }
    )

    def redact_span(self, span: Span) -> Counter[str]:
        """Redact every string attribute value (and strings in arrays) of a span, in place."""
        counts: Counter[str] = Counter()
        self._redact_attributes(span.attributes, counts)
        for event in span.events:
            self._redact_attributes(event.attributes, counts)
        return counts

    def _redact_attributes(self, attrs: dict[str, Any], counts: Counter[str]) -> None:
        id_keys = self._ID_KEYS
        for key, value in attrs.items():
            if key in id_keys or key.endswith(".document.id"):
                continue
            if type(value) is str:
                if len(value) >= self._min_chars:
                    redacted = self._redact(value, counts)
                    if redacted is not value:
                        attrs[key] = redacted
            elif type(value) is list:
                if value and type(value[0]) is str:
                    attrs[key] = [self._redact(v, counts) if type(v) is str else v for v in value]
            elif type(value) is dict:
                self._redact_attributes(value, counts)

    def redact_record(self, record: QueryRecord) -> Counter[str]:
        """Redact the query, answer, user id, documents' content and feedback reasons, in place.

        A record assembled from spans that went through ``redact_span`` is already clean: this
        is for records built or edited any other way.
        """
        counts: Counter[str] = Counter()
        record.query = self._redact(record.query, counts)
        record.answer = self._redact(record.answer, counts)
        if record.user_id:  # an e-mail address is a common user id
            record.user_id = self._redact(record.user_id, counts)
        seen: set[int] = set()  # retrieved and delivered often share Document objects
        for document in (*record.retrieved, *record.delivered):
            if id(document) not in seen:
                seen.add(id(document))
                document.content = self._redact(document.content, counts)
        for feedback in record.feedback:
            if feedback.reason:
                feedback.reason = self._redact(feedback.reason, counts)
        return counts
