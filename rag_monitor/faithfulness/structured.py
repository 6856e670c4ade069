"""Structured contexts (a JSON record) made checkable by the word-level scorers.

A data-to-text answer paraphrases a record: ``"OutdoorSeating": false`` becomes "it offers no
outdoor seating", ``"17:0-21:0"`` becomes "5 pm to 9 pm". Matched as raw JSON text, the keys'
camel case and the 24-hour clock make correct statements look invented. ``flatten_record``
turns the record into ``key words: value`` lines and adds the 12-hour forms of its times, and
``attribute_conflicts`` counts answer sentences that assert an attribute the record sets to
false (or deny one it sets to true): the error RAGTruth's annotators flag most on such answers.

Usage::

    record = parse_record('{"attributes": {"OutdoorSeating": false}}')
    flatten_record(record)                                           # "Outdoor Seating: False"
    attribute_conflicts(record, ["It offers outdoor seating."])      # 1
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_TIME = re.compile(r"\b(\d{1,2}):\d{1,2}\b")
_NEGATION = re.compile(r"\b(?:not|no|never|none|nor|without|lacks?|cannot)\b|n't\b", re.IGNORECASE)
_GENERIC_KEY_WORDS = frozenset({"restaurants", "business", "good", "for", "accepts", "by", "has"})
"""Prefixes of Yelp-style keys ("RestaurantsGoodForGroups") that answers do not repeat."""
_FALSE_STRINGS = frozenset({"false", "no", "none"})


def parse_record(context: str) -> dict[str, Any] | None:
    """The JSON object a context holds, or None for plain text (or JSON that is not an object)."""
    text = context.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _key_words(key: str) -> list[str]:
    return [w.lower() for w in _CAMEL.sub(" ", key).replace("_", " ").split() if w.lower() not in _GENERIC_KEY_WORDS]


def _leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, (*path, str(key)))
    elif isinstance(value, list):
        for child in value:
            yield from _leaves(child, path)
    else:
        yield path, value


def flatten_record(record: dict[str, Any]) -> str:
    """``parent key, key: value`` lines (keys split into words), then the 12-hour forms of its times."""
    lines = []
    for path, value in _leaves(record):
        keys = " ".join(" ".join(_CAMEL.sub(" ", k).replace("_", " ").split()) for k in path[-2:])
        lines.append(f"{keys}: {value}")
    text = "\n".join(lines)
    hours = sorted({str(int(h) % 12 or 12) for h in _TIME.findall(text)}, key=int)
    return text + ("\n" + " ".join(hours) if hours else "")


def _truth(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        bare = value.strip("u'\" ").lower()  # Yelp writes "u'no'"
        return False if bare in _FALSE_STRINGS else True if bare == "true" else None
    return None


def attribute_conflicts(record: dict[str, Any], sentences: Sequence[str]) -> list[str]:
    """The sentences that assert a false attribute of ``record["attributes"]`` without a negation,
    or negate a true one (one entry per attribute and sentence)."""
    found: list[str] = []
    attributes = record.get("attributes")
    for path, value in _leaves(attributes if isinstance(attributes, dict) else {}):
        truth, words = _truth(value), _key_words(path[-1])
        if truth is None or not words:
            continue
        mention = re.compile(r"\b" + r"[\s-]*".join(map(re.escape, words)) + r"s?\b", re.IGNORECASE)
        parent = _key_words(path[-2])[-1:] if len(path) > 1 else []
        for sentence in sentences:
            if not mention.search(sentence):
                continue
            if len("".join(words)) < 4 and parent and parent[0] not in sentence.lower():
                continue  # "lot" alone is "a lot of"; "parking lot" is the attribute
            if truth == bool(_NEGATION.search(sentence)):
                found.append(f"{' '.join(words)} is {'true' if truth else 'false'} in the record")
    return found
