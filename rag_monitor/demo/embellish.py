"""The bad release's second bug: a generator that adds detail its context does not hold.

A prompt change in r2 lets the generator "helpfully" extend a share of its answers with one
sentence the delivered documents do not support, of three kinds a faithfulness scorer must
catch:

- an invented number ("This usually takes 9 business days.");
- an invented step ("Then confirm the change in the Account Center under Security Settings.");
- a contradiction: its first sentence again, negated ("You cannot request a refund ...").

Which answers and which kind is decided by a hash of the question and the user, so a run is
reproducible. The demo reviewer labels these answers unfaithful, as a human would.

Usage::

    text = embellish(text, question, user_id, context_text, share=0.5)
"""

from __future__ import annotations

import re
import zlib

INVENTED_STEPS = (
    "Then confirm the change in the Account Center under Security Settings.",
    "After that, call the Premium Hotline and quote your Customer Reference.",
    "Finally, approve the request in the Admin Console within one hour.",
)
_NEGATABLE = ((" can ", " cannot "), (" will ", " will not "), (" must ", " must not "), (" is ", " is not "),
              (" are ", " are not "), (" may ", " may not "), (" do ", " do not "))
_CITATION = re.compile(r"\s*\[\d+\]\s*$")


def _bucket(question: str, user_id: str, salt: str) -> int:
    return zlib.crc32(f"{salt}|{user_id}|{question}".encode()) % 1000


def invented_number(context: str, seed: int) -> str:
    """A duration whose number appears nowhere in the context."""
    for days in [3, 5, 7, 9, 11, 12, 21, 45][seed % 8:] + [3, 5, 7, 9, 11, 12, 21, 45]:
        if str(days) not in context:
            return f"This usually takes {days} business days."
    return "This usually takes 97 business days."


def negated(sentence: str) -> str | None:
    """The sentence with its first auxiliary negated, or None when it has none."""
    bare = _CITATION.sub("", sentence)
    for plain, negative in _NEGATABLE:
        if plain in f" {bare} " and negative not in f" {bare} ":
            return (f" {bare} ".replace(plain, negative, 1)).strip()
    return None


def embellish(text: str, question: str, user_id: str, context: str, share: float) -> str:
    """``text`` with one unsupported sentence appended for ``share`` of (question, user) pairs."""
    if share <= 0 or not text or _bucket(question, user_id, "embellish") >= share * 1000:
        return text
    kind = _bucket(question, user_id, "kind") % 3
    citation = re.search(r"\[\d+\]", text)
    cite = f" {citation.group(0)}" if citation else ""
    if kind == 2:
        contradiction = negated(text.split(" [")[0])
        if contradiction is not None:
            return f"{text} {contradiction}{cite}"
        kind = 0
    if kind == 0:
        return f"{text} {invented_number(context, _bucket(question, user_id, 'n'))}{cite}"
    return f"{text} {INVENTED_STEPS[_bucket(question, user_id, 'step') % len(INVENTED_STEPS)]}{cite}"
