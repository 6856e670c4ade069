"""Implicit signals with a known relation to the blind verdicts: the oracle of ``review/signals.py``.

A simulated population of answered and refused queries, each with a hidden state: an answer is
unfaithful or not, incorrect or not (incorrect more often when unfaithful), a refusal appropriate
or not. Each signal is drawn from that state alone (``SIGNAL_MODEL``): some depend on it (a
thumbs-down with reason "wrong" on incorrect answers, a follow-up after an inappropriate refusal,
a longer dwell on unfaithful answers, fewer shares of unfaithful ones), others not at all (copy,
citation click, a thumbs-down "too long" whose rate is the same in every state). ``truth`` gives
the exact difference in verdict rates (or AUC) the estimator targets, from the model, not from a
draw. ``reviewed_sample`` draws a population and the review sample of the single-draw design
(base, thumbs-down and refusal strata, ``max`` of their rates), with the verdicts a blind reviewer
gives and the stored feedback events, as the store would hand them to ``signal_associations``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

from rag_monitor.record import QueryRecord
from rag_monitor.review.signals import OVERALL, SIGNALS
from rag_monitor.store.models import FeedbackEvent, Review, ReviewItem


@dataclass(frozen=True)
class State:
    refused: bool
    unfaithful: bool = False
    incorrect: bool = False
    inappropriate: bool = False


REASONS = ("wrong", "too long")


def _reason_probs(s: State) -> dict[str | None, float]:
    """P(reason | thumbs-down, state). "too long" x P(thumbs-down) is the same in every state: no relation."""
    bad = s.inappropriate if s.refused else s.incorrect
    too_long = 0.1 if bad else (0.5 if s.refused else 0.6)
    return {"wrong": 0.6 if bad else 0.1, "too long": too_long, None: 1 - (0.6 if bad else 0.1) - too_long}


def _thumbs_down(s: State) -> float:
    return (0.25 if s.inappropriate else 0.05) if s.refused else (0.30 if s.incorrect else 0.05)


SIGNAL_MODEL: dict[str, Callable[[State], float]] = {
    "thumbs_up": lambda s: 0.02 if s.refused else (0.04 if s.incorrect else 0.15),
    "thumbs_down": _thumbs_down,
    "regenerate": lambda s: (0.15 if s.inappropriate else 0.05) if s.refused else (0.10 if s.incorrect else 0.03),
    "copy": lambda s: 0.08,
    "follow_up": lambda s: (0.35 if s.inappropriate else 0.08) if s.refused else 0.06,
    "citation_click": lambda s: 0.10,
    "share": lambda s: 0.01 if s.refused else (0.02 if s.unfaithful else 0.06),
    "edit": lambda s: 0.01 if s.refused else (0.08 if s.incorrect else 0.02),
    **{f"thumbs_down:{r}": (lambda r: lambda s: _thumbs_down(s) * _reason_probs(s)[r])(r) for r in REASONS},
}
"""P(the item carries the signal | its state); dwell is ``DWELL_*`` below."""
DWELL_SHARE = 0.6
DWELL_MU, DWELL_SHIFT, DWELL_SIGMA = 3.0, 0.5, 0.8
"""log dwell seconds ~ Normal(mu + shift x unfaithful, sigma), on ``DWELL_SHARE`` of the queries."""
assert set(SIGNALS) - {"dwell"} <= set(SIGNAL_MODEL)


@dataclass(frozen=True)
class World:
    releases: dict[str, float]
    """Release -> P(unfaithful) of an answer; the releases get equal traffic."""
    refused: float = 0.1
    inappropriate: float = 0.3
    incorrect_if_unfaithful: float = 0.6
    incorrect_if_faithful: float = 0.15
    rates: tuple[float, float, float] = (0.1, 0.5, 0.5)
    """Sampling rates of the base, thumbs-down and refusal strata."""

    def states(self, release: str) -> list[tuple[State, float]]:
        u = self.releases[release]
        out = [(State(True, inappropriate=bad), self.refused * (self.inappropriate if bad else 1 - self.inappropriate))
               for bad in (False, True)]
        for unfaithful in (False, True):
            p_c = self.incorrect_if_unfaithful if unfaithful else self.incorrect_if_faithful
            for incorrect in (False, True):
                out.append((State(False, unfaithful, incorrect),
                            (1 - self.refused) * (u if unfaithful else 1 - u) * (p_c if incorrect else 1 - p_c)))
        return out


def _verdict(verdict: str, s: State) -> bool | None:
    if verdict == "refusal_inappropriate":
        return s.inappropriate if s.refused else None
    if s.refused:
        return None
    return s.unfaithful if verdict == "unfaithful" else s.incorrect


def _dwell_auc(positives: list[tuple[State, float]], negatives: list[tuple[State, float]]) -> float:
    """P(dwell of a positive > dwell of a negative) for the log-normal dwell model."""
    total = sum(p for _, p in positives) * sum(p for _, p in negatives)
    scale = DWELL_SIGMA * math.sqrt(2)
    return sum(pa * pb * NormalDist().cdf(DWELL_SHIFT * (a.unfaithful - b.unfaithful) / scale)
               for a, pa in positives for b, pb in negatives) / total


def truth(world: World, signal: str, verdict: str, release: str = OVERALL) -> float:
    """The population value ``signal_associations`` estimates: the difference in verdict rates with
    and without the signal, or the dwell AUC."""
    releases = list(world.releases) if release == OVERALL else [release]
    states = [(s, p / len(releases)) for r in releases for s, p in world.states(r) if _verdict(verdict, s) is not None]
    if signal == "dwell":  # dwell is drawn independently of being present: the AUC over those with one
        return _dwell_auc([x for x in states if _verdict(verdict, x[0])], [x for x in states if not _verdict(verdict, x[0])])
    model = SIGNAL_MODEL[signal]

    def rate(present: bool) -> float:
        weights = [(p * (model(s) if present else 1 - model(s)), _verdict(verdict, s)) for s, p in states]
        return sum(w for w, y in weights if y) / sum(w for w, _ in weights)

    return rate(True) - rate(False)


def reviewed_sample(world: World, seed: int, queries: int) -> tuple[list[tuple[ReviewItem, Review]], dict[str, list[FeedbackEvent]]]:
    """One population's review sample: ``(item, review)`` pairs and each trace's feedback events.

    Reviewed now: within every reader's window (``ReviewedCache`` counts reviews by their time)."""
    rng = random.Random(seed)
    now = time.time()
    names = list(world.releases)
    base, thumbs, refusal = world.rates
    reviewed, feedback = [], {}
    for k in range(queries):
        release = names[k % len(names)]
        states, probs = zip(*world.states(release))
        s = rng.choices(states, probs)[0]
        trace_id = f"{rng.getrandbits(128):032x}"
        events = []
        for signal in ("thumbs_up", "thumbs_down", "regenerate", "copy", "follow_up", "citation_click", "share", "edit"):
            if rng.random() < SIGNAL_MODEL[signal](s):
                reason = None
                if signal == "thumbs_down":
                    # P(reason | thumbs-down, state), with a reason text as users vary it
                    reason = rng.choices(list(_reason_probs(s)), list(_reason_probs(s).values()))[0]
                    reason = None if reason is None else rng.choice((reason, reason.capitalize() + ".", f" {reason.upper()} "))
                events.append(FeedbackEvent(trace_id, signal, float(k), reason, None, f"{signal}-{k}"))
        if rng.random() < DWELL_SHARE:
            seconds = math.exp(rng.gauss(DWELL_MU + DWELL_SHIFT * s.unfaithful, DWELL_SIGMA))
            events.append(FeedbackEvent(trace_id, "dwell", float(k), None, round(seconds, 3), f"dwell-{k}"))
        strata = [("base", base)]
        if any(e.kind == "thumbs_down" for e in events):
            strata.append(("thumbs_down", thumbs))
        if s.refused:
            strata.append(("refusal", refusal))
        stratum, p = max(strata, key=lambda x: x[1])
        if rng.random() >= p:
            continue
        labels = ({"refusal_appropriate": "no" if s.inappropriate else "yes"} if s.refused else
                  {"faithful": "no" if s.unfaithful else "yes", "correct": "no" if s.incorrect else "yes"})
        record = QueryRecord(trace_id, f"{k:016x}", k, k + 1, release=release, refused=s.refused).to_dict()
        item = ReviewItem(len(reviewed) + 1, "default", trace_id, stratum, p, 1 / p, None, record, None,
                          "reviewed", None, None, now, now)
        reviewed.append((item, Review(item.id, item.id, "sim", labels, now)))
        if events:
            feedback[trace_id] = events
    return reviewed, feedback
