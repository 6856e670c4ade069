"""PII redaction before anything is stored or forwarded.

    redactor = Redactor.load("rag_monitor/defaults/collectors/redaction.yaml", pseudonym_key=key)  # built-ins + the operator's rules
    text, counts = redactor.redact_text("mail jo@example.com")   # "mail <EMAIL>", {"email": 1}
    counts = redactor.redact_spans(spans)     # every string of every span, in place
    counts = redactor.redact_record(record)   # for records built any other way than from spans

What a span carries is covered whole: its name, status message, every attribute value at any
nesting and whatever its type (strings, every element of an array, kvlists, bytes that hold
text, JSON inside a string), its events' names and attributes, its links' attributes, and the
attributes of its resource and instrumentation scope. Free text gets tokens (``<EMAIL>``);
identifiers (``session.id``, ``user.id``, tenant, document ids, ``excluded_ids``, citations)
that contain PII are replaced whole by a keyed pseudonym (``pseudonyms.py``), so they still join
within the agent but never reveal the value. Controlled vocabulary (model names, span kinds,
stages) is left as it is. The rules are in ``redaction_rules.py``.

Presidio (``presidio_analyzer``) adds NER-based detection of names and addresses when
``use_presidio=True`` (or ``presidio: true`` in the YAML). It is OFF by default: it needs spaCy
models and is two orders of magnitude slower than the regexes.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rag_monitor.collectors.otlp import Span
from rag_monitor.collectors.pseudonyms import Pseudonyms
from rag_monitor.collectors.redaction_keys import (
    ID_KEYS as _ID_KEYS,
    ID_SUFFIX as _ID_SUFFIX,
    JSON_ID_KEYS as _JSON_ID_KEYS,
    VECTOR_SUFFIX as _VECTOR_SUFFIX,
    VOCABULARY_KEYS as _VOCABULARY_KEYS,
    rename_keys,
)
from rag_monitor.collectors.redaction_rules import (
    BUILTIN_RULES,
    MIN_PII_CHARS,
    RedactionRule,
    decode_escapes,
    has_number,
    iban_valid,
    luhn_valid,
)
from rag_monitor.record import Document, QueryRecord

__all__ = ["RedactionRule", "Redactor", "iban_valid", "luhn_valid"]

# Texts found clean are remembered, by value: RAG traffic repeats its text (a chunk retrieved
# for many queries, the reranker's copy of the retriever's documents, span names), and scanning
# is most of redaction's cost. Only clean text is kept, so the cache never holds PII; it is
# bounded by entries and by length, and cleared whole when full (atomic under the GIL).
CLEAN_CACHE_ENTRIES = 4096
CLEAN_CACHE_MAX_CHARS = 4096


class Redactor:
    """Replaces PII with tokens such as ``<EMAIL>`` (identifiers with pseudonyms) and counts it, by kind.

    ``pseudonym_key``: the HMAC key of identifier pseudonyms; None draws a random one (pseudonyms
    then join only within this instance: the agent always passes its configured or kept key).
    """

    def __init__(
        self,
        rules: Iterable[RedactionRule] = (),
        *,
        builtins: bool = True,
        use_presidio: bool = False,
        presidio_entities: Iterable[str] = ("PERSON", "LOCATION"),
        pseudonym_key: bytes | None = None,
    ):
        self.pseudonym = Pseudonyms(pseudonym_key or secrets.token_bytes(32))
        self.rules: tuple[RedactionRule, ...] = (*(BUILTIN_RULES if builtins else ()), *rules)
        # Custom rules may match short text (a 4-letter code); the built-ins need >= 6 chars.
        self._min_chars = MIN_PII_CHARS if all(r in BUILTIN_RULES for r in self.rules) else 1
        self._presidio = None
        self._presidio_entities = list(presidio_entities)
        # When every rule needs a number or a substring (every built-in does), text with neither
        # skips all of them after a few fast scans: most text, document chunks included.
        self._gated = not use_presidio and all(r.needs_number or r.requires for r in self.rules)
        self._gate_substrings = tuple(sorted({r.requires for r in self.rules if r.requires and not r.needs_number}))
        self._clean: dict[str, None] = {}
        self._clean_keys: dict[str, None] = {}
        """Attribute keys found clean: few and repeated, kept apart so document texts never evict them."""
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
    def load(cls, path: str | Path, *, pseudonym_key: bytes | None = None) -> Redactor:
        """Built-in rules plus ``rules:`` from a YAML file (see ``rag_monitor/defaults/collectors/redaction.yaml``)."""
        import yaml

        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping with 'rules:', got {type(data).__name__}")
        disabled = set(data.get("disable_builtin", []) or [])
        unknown = disabled - {r.name for r in BUILTIN_RULES}
        if unknown:
            raise ValueError(f"{path}: disable_builtin names unknown kinds {sorted(unknown)}")
        return cls(
            [*(r for r in BUILTIN_RULES if r.name not in disabled),
             *(RedactionRule.from_config(item) for item in data.get("rules", []) or [])],
            builtins=False,
            use_presidio=bool(data.get("presidio", False)),
            pseudonym_key=pseudonym_key,
        )

    def redact_text(self, text: str) -> tuple[str, Counter[str]]:
        """Free text as a span's strings are redacted (JSON inside walked, escapes decoded)."""
        counts: Counter[str] = Counter()
        return self._string(text, counts), counts

    def _redact(self, text: str, counts: Counter[str]) -> str:
        if len(text) < self._min_chars or text in self._clean:
            return text
        number: bool | None = None
        if self._gated:
            for substring in self._gate_substrings:
                if substring in text:
                    break
            else:
                number = has_number(text)
                if not number:
                    self._remember_clean(text)
                    return text
        before = sum(counts.values()) if counts else 0
        redacted = self._apply_rules(text, counts, number)
        if redacted == text and (sum(counts.values()) if counts else 0) == before:
            self._remember_clean(text)
        return redacted

    def _remember_clean(self, text: str) -> None:
        # Text with escapes is decoded by ``_string`` even when the raw text looks clean: never
        # remembered, so a remembered text is clean for every caller.
        if len(text) <= CLEAN_CACHE_MAX_CHARS and "\\u" not in text:
            if len(self._clean) >= CLEAN_CACHE_ENTRIES:
                self._clean.clear()
            self._clean[text] = None

    def _apply_rules(self, text: str, counts: Counter[str], number: bool | None = None) -> str:
        for rule in self.rules:
            if rule.requires is not None and rule.requires not in text:
                continue
            if rule.needs_number:
                if number is None:
                    number = has_number(text)
                if not number:
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

    # --- spans ------------------------------------------------------------------------------

    def redact_spans(self, spans: Iterable[Span]) -> Counter[str]:
        """Redact every span in place; shared resources and scopes are cleaned once."""
        counts: Counter[str] = Counter()
        seen: set[int] = set()
        for span in spans:
            self._redact_span(span, counts, seen)
        return counts

    def redact_span(self, span: Span) -> Counter[str]:
        """Redact one span in place: name, status, attributes, events, links, resource, scope."""
        counts: Counter[str] = Counter()
        self._redact_span(span, counts, set())
        return counts

    def _redact_span(self, span: Span, counts: Counter[str], seen: set[int]) -> None:
        span.name = self._string(span.name, counts)
        if span.status_message:
            span.status_message = self._string(span.status_message, counts)
        self._attributes(span.attributes, counts)
        for event in span.events:
            event.name = self._string(event.name, counts)
            self._attributes(event.attributes, counts)
        for link in span.links:
            self._attributes(link.attributes, counts)
        if id(span.resource) not in seen:
            seen.add(id(span.resource))
            self._attributes(span.resource, counts)
        scope = span.scope
        if scope is not None and id(scope) not in seen:
            seen.add(id(scope))
            scope.name = self._string(scope.name, counts)
            scope.version = self._string(scope.version, counts)
            self._attributes(scope.attributes, counts)

    def _attributes(self, attrs: dict[str, Any], counts: Counter[str]) -> None:
        min_chars, clean, clean_keys = self._min_chars, self._clean, self._clean_keys
        renamed: dict[str, str] | None = None
        for key, value in attrs.items():
            if key not in clean_keys and len(key) >= min_chars:  # keys repeat: almost always known clean
                cleaned_key = self._key(key, counts)
                if cleaned_key != key:
                    renamed = renamed or {}
                    renamed[key] = cleaned_key
            kind = type(value)
            if kind is str:
                if len(value) < min_chars or key in _VOCABULARY_KEYS or value in clean:
                    continue
                cleaned = self._identifier(value, counts) if key in _ID_KEYS or key.endswith(_ID_SUFFIX) else self._string(value, counts)
            elif kind is int or kind is float or kind is bool or value is None or key.endswith(_VECTOR_SUFFIX):
                continue  # vectors were checked numeric and finite at decode
            elif key in _ID_KEYS:
                cleaned = self._identifier(value, counts)
            else:
                cleaned = self._value(value, counts)
            if cleaned is not value:
                attrs[key] = cleaned
        if renamed:
            rename_keys(attrs, renamed)

    def _key(self, key: str, counts: Counter[str]) -> str:
        """An attribute or JSON object key, redacted like free text (clean keys remembered apart)."""
        if key in self._clean_keys or len(key) < self._min_chars:
            return key
        found: Counter[str] = Counter()
        cleaned = self._string(key, found)
        if not found:
            if len(self._clean_keys) >= CLEAN_CACHE_ENTRIES:
                self._clean_keys.clear()
            if "\\u" not in key:
                self._clean_keys[key] = None
            return key
        counts.update(found)
        return cleaned

    def _value(self, value: Any, counts: Counter[str]) -> Any:
        """A redacted copy of any attribute value (or the value itself when it is clean)."""
        kind = type(value)
        if kind is str:
            return self._string(value, counts)
        if kind is list or kind is tuple:
            items = [self._value(v, counts) for v in value]
            return items if any(a is not b for a, b in zip(items, value)) else value
        if kind is dict:
            self._attributes(value, counts)
            return value
        if kind is bytes:  # bytes are often text: clean them when they decode as UTF-8
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return value
            cleaned = self._string(text, counts)
            return value if cleaned is text else cleaned.encode("utf-8")
        return value

    def _string(self, text: str, counts: Counter[str]) -> str:
        """Free text; a JSON document inside it is walked, so ids and escaped text are covered too."""
        if len(text) < self._min_chars:
            return text
        if "\\u" in text:  # escapes that could hide PII
            return self._escaped(text, counts)
        if text[:1] not in "{[":
            return self._redact(text, counts)
        found: Counter[str] = Counter()
        redacted = self._redact(text, found)
        if found:  # read it as JSON, so identifiers inside become pseudonyms
            walked = self._json(text, counts)
            if walked is not None:
                return walked
        counts.update(found)
        return redacted

    def _escaped(self, text: str, counts: Counter[str]) -> str:
        """Text with ``\\uXXXX`` escapes: walked as JSON when it is; otherwise (JSON cut short, a
        log line) read with the escapes decoded, and returned decoded and redacted if that finds PII."""
        if text[:1] in "{[":
            walked = self._json(text, counts)
            if walked is not None:
                return walked
        found: Counter[str] = Counter()
        redacted = self._redact(decode_escapes(text), found)
        if not found:
            return text
        counts.update(found)
        return redacted

    def _json(self, text: str, counts: Counter[str]) -> str | None:
        try:
            document = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(document, (dict, list)):
            return None
        found: Counter[str] = Counter()
        document = self._json_value(document, found)
        # A second pass over the result catches what the walk cannot see (text in object keys).
        cleaned = self._redact(json.dumps(document, ensure_ascii=False), found)
        counts.update(found)
        return cleaned if found else text

    def _json_value(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, dict):
            return {
                self._key(k, counts) if type(k) is str else k:
                    self._identifier(v, counts) if k in _JSON_ID_KEYS else self._json_value(v, counts)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._json_value(v, counts) for v in value]
        if isinstance(value, str):
            return self._string(value, counts)
        return value

    def _identifier(self, value: Any, counts: Counter[str]) -> Any:
        """An id (or a list of ids) that contains PII becomes its pseudonym, whole."""
        if type(value) is str:
            if len(value) < self._min_chars or value in self._clean:
                return value
            found: Counter[str] = Counter()
            self._string(value, found)
            if not found:
                return value
            counts.update(found)
            return self.pseudonym(value)
        if type(value) is list or type(value) is tuple:
            items = [self._identifier(v, counts) for v in value]
            return items if any(a is not b for a, b in zip(items, value)) else value
        return self._value(value, counts)

    # --- records ----------------------------------------------------------------------------

    def redact_record(self, record: QueryRecord) -> Counter[str]:
        """Redact a record in place: its texts get tokens, its identifiers pseudonyms.

        A record assembled from spans that went through ``redact_spans`` is already clean: this
        is for records built or edited any other way.
        """
        counts: Counter[str] = Counter()
        text = lambda value: self._string(value, counts) if value else value  # noqa: E731
        ident = lambda value: self._identifier(value, counts) if value else value  # noqa: E731
        record.query, record.answer, record.error = text(record.query), text(record.answer), text(record.error)
        record.session_id, record.user_id, record.tenant = ident(record.session_id), ident(record.user_id), ident(record.tenant)
        record.citations = ident(record.citations)
        seen: set[int] = set()  # retrieved and delivered often share Document objects
        documents = [*record.retrieved, *record.delivered, *(d for f in record.filters for d in f.excluded_documents)]
        for document in documents:
            if id(document) not in seen:
                seen.add(id(document))
                self._document(document, counts)
        for applied in record.filters:
            applied.predicate = text(applied.predicate)
            applied.excluded_ids = ident(applied.excluded_ids)
        for stage in record.stages:
            stage.error = text(stage.error)
        for feedback in record.feedback:
            feedback.reason = text(feedback.reason)
            if isinstance(feedback.value, str):
                feedback.value = text(feedback.value)
        return counts

    def _document(self, document: Document, counts: Counter[str]) -> None:
        if document.id:
            document.id = self._identifier(document.id, counts)
        if document.content:
            document.content = self._string(document.content, counts)
        document.metadata = self._json_value(document.metadata, counts)

