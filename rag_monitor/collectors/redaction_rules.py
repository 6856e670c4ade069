"""The PII rules the redactor applies: built-in kinds with their validators, and operator rules.

Built-in kinds: e-mail, phone (international ``+CC ...`` and US formats with consistent
separators; bare digit runs such as years, prices and document ids are left alone), payment
cards (13-19 digits, spaces or dashes allowed, Luhn-checked: a number that fails Luhn stays),
IBAN (mod-97 checked), IPv4 and IPv6 (validated with ``ipaddress``). Every pattern is compiled
once and guarded by a cheap test (an ``@``, a digit, a colon) so clean text costs little.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BUILTIN_RULES", "MIN_PII_CHARS", "NUMBER_HINT", "RedactionRule", "decode_escapes", "has_number", "iban_valid", "luhn_valid"]


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
MIN_PII_CHARS = 6
_IBAN_HINT = re.compile(r"[A-Z]{2}\d{2}")
_CARD_HINT = re.compile(r"\d{3}[ -]?\d{3}")
_IPV4_HINT = re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d")
_US_PHONE_HINT = re.compile(r"\d{3}[ .-]\d{4}")
# Starts with a plain \d so the engine scans for digits in C before trying the alternatives.
NUMBER_HINT = re.compile(r"\d(?:\d\d[ .-]?\d{3}|\.\d{1,3}\.\d{1,3}\.\d)")
# The same test on ASCII text with every digit folded to "0": the pattern then starts with a
# literal, which the engine finds with a fast scan instead of a Unicode class test per character
# (about 3x faster on document-sized text).
_FOLD_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_FOLDED_NUMBER_HINT = re.compile(rb"0(?:00[ .-]?000|\.0{1,3}\.0{1,3}\.0)")


def has_number(text: str) -> bool:
    """``NUMBER_HINT.search(text) is not None``, faster on ASCII text."""
    if text.isascii():
        return _FOLDED_NUMBER_HINT.search(text.encode("ascii").translate(_FOLD_DIGITS)) is not None
    return NUMBER_HINT.search(text) is not None


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
        requires="@",
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
        requires=":",
        needs=lambda t: "::" in t or t.count(":") >= 3,
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
        requires="+",
    ),
    RedactionRule(
        "phone",  # US: (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567 (one separator kind)
        re.compile(r"(?<![\w(])(?:1[ .-]?)?(?:\(\d{3}\) ?\d{3}[ .-]|\d{3}([ .-])\d{3}\1)\d{4}(?![\w-]|\.\d)"),
        "<PHONE>",
        needs=lambda t: _US_PHONE_HINT.search(t) is not None,
        needs_number=True,
    ),
)

# ``\u0040``-style escapes (any number of backslashes: JSON inside JSON) can hide PII from the
# rules; text that is not valid JSON (cut short) is read with them decoded. Surrogates stay
# escaped: a lone one cannot be encoded again.
_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")


def decode_escapes(text: str) -> str:
    """``text`` with its ``\\uXXXX`` escapes decoded (surrogates left escaped)."""

    def char(match: re.Match[str]) -> str:
        code = int(match.group(1), 16)
        return match.group(0) if 0xD800 <= code <= 0xDFFF else chr(code)

    return _ESCAPE.sub(char, text)
