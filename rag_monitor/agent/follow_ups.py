"""Detected follow-ups: a query that doubts the session's previous answer ("are you sure?").

The patterns are the operator's (``follow_up_patterns`` in ``rag_monitor/defaults/detectors/sampling.yaml``, with
defaults in several languages); they are searched in the query's text lower-cased, with accents
and typographic apostrophes folded (``normalise``), so ``¿Estás seguro?`` matches
``estas seguro``. The regeneration detector, which already compares each session's query with
the one before it in the shared store, finds them (``RegenerationDetector``); each detected
follow-up becomes ``follow_up`` feedback on the previous query, the answer being doubted, with
reason ``detected`` and the follow-up's own trace as its identity, and enters the review queue
like one the app marked.

    matcher = FollowUpMatcher(config.follow_up_patterns, config.follow_up_window_s)
    matcher.matches("But what about roaming?")   # True

Every query of a session is searched, so the search is on the ingest budget: with ``google-re2``
installed (the ``agent`` extra) an ASCII text (most queries, once folded) is searched by RE2, a
DFA that reads the text once, several times faster than ``re``'s backtracking through every
alternative at every position. For the ASCII texts it runs, RE2's
``\b``, ``\w``, ``\s`` and ``\d`` are ``re``'s. Other texts, patterns RE2 refuses (lookarounds,
backreferences) or reads otherwise (``$``, ``[[:alpha:]]``), and an install without it use ``re``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from rag_monitor import semconv
from rag_monitor.record import Feedback

try:
    import re2
except ImportError:  # an install without the agent extra: re alone
    re2 = None

DETECTED = "detected"
"""The ``reason`` of a follow-up the agent detected (one the app marks has its own, or none)."""

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u00b4": "'", "`": "'"})


def normalise(text: str) -> str:
    """Lower-cased (casefold), accents removed, typographic apostrophes made plain."""
    if text.isascii():  # most queries: nothing to decompose, and casefold is lower (a third of the cost)
        return text.lower().translate(_APOSTROPHES)
    decomposed = unicodedata.normalize("NFKD", text.casefold().translate(_APOSTROPHES))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


class FollowUpMatcher:
    def __init__(self, patterns: Iterable[str], window_s: float):
        patterns = [normalise(p) for p in patterns]
        joined = "|".join(f"(?:{p})" for p in patterns)
        self._pattern = re.compile(joined) if patterns else None
        self._ascii_pattern = _re2(joined) if patterns else None
        """RE2's compilation of the same patterns, for ASCII texts; None: ``re`` for every text."""
        self.window_ns = int(window_s * 1e9)

    @property
    def enabled(self) -> bool:
        return self._pattern is not None and self.window_ns > 0

    def matches(self, text: str) -> bool:
        if self._pattern is None:
            return False
        folded = normalise(text)
        if self._ascii_pattern is not None and folded.isascii():
            return self._ascii_pattern.search(folded) is not None
        return self._pattern.search(folded) is not None

    def follows_up(self, text: str, gap_ns: int) -> bool:
        """``text``, asked ``gap_ns`` after the session's previous query, follows that query up."""
        return self.enabled and 0 < gap_ns <= self.window_ns and self.matches(text)


def _re2(pattern: str):
    # "$": re also matches before a final newline, RE2 only at the end; "[:": RE2's POSIX classes.
    if re2 is None or "$" in pattern or "[:" in pattern:
        return None
    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses is no error: re runs it
    options.never_capture = True  # only whether it matches is asked
    try:
        return re2.compile(pattern, options)
    except re2.error:  # a feature RE2 does not have (lookarounds, backreferences)
        return None


def detected_feedback(follow_up_trace_id: str, follow_up_start_ns: int) -> Feedback:
    """The ``follow_up`` feedback a detected follow-up puts on the doubted query: keyed by the
    follow-up's trace, so the same detection stored twice (a retried job) is one event."""
    return Feedback(semconv.FEEDBACK_FOLLOW_UP, follow_up_start_ns, reason=DETECTED,
                    span_id=f"follow-up:{follow_up_trace_id}")
