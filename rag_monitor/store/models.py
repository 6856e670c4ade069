"""Plain values the store returns and accepts (frozen dataclasses, no SQLAlchemy)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from rag_monitor.record import Feedback, QueryRecord

import orjson


def now_s() -> float:
    """The store's clock: UTC seconds since the epoch."""
    return time.time()


def dump_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be JSON-serialisable (finite numbers, str, list, dict): {e}") from None


def record_json(record: QueryRecord | dict[str, Any]) -> tuple[str, str]:
    """``(trace_id, JSON text)``; the text parses back to ``record.to_dict()`` (non-finite floats as null)."""
    if isinstance(record, QueryRecord):
        payload: Any = record
        trace_id = record.trace_id
    elif isinstance(record, dict) and isinstance(record.get("trace_id"), str):
        payload, trace_id = record, record["trace_id"]
    else:
        raise TypeError(f"expected a QueryRecord or its to_dict(), got {type(record).__name__}")
    try:
        # orjson serialises the dataclasses directly, several times faster than json on the
        # ingest path. A non-finite float becomes null: a NaN confidence is stored as unknown.
        text = orjson.dumps(payload).decode()
    except (TypeError, ValueError, orjson.JSONEncodeError) as e:
        raise ValueError(f"record {trace_id} is not JSON-serialisable (finite numbers, str, list, dict): {e}") from None
    return trace_id, text



@dataclass(frozen=True)
class ReviewItem:
    """A sampled query in the review queue."""

    id: int
    queue: str
    trace_id: str
    stratum: str
    inclusion_prob: float
    weight: float
    """``1 / inclusion_prob``: the item's weight in estimates over all traffic."""
    tenant: str | None
    record: dict[str, Any]
    """The redacted ``QueryRecord.to_dict()``."""
    pair_trace_id: str | None
    state: str
    claimed_by: str | None
    claim_expires_at: float | None
    created_at: float
    reviewed_at: float | None
    assigned_to: str | None = None
    """A reviewer's name or ``group:<name>``; None: anyone."""
    draft: dict[str, Any] | None = None
    """The claim holder's step-one (relevance) labels, until they submit."""
    pair_record: dict[str, Any] | None = None
    """A shadow pair's production half (its ``QueryRecord.to_dict()``), stored with the item."""
    counted_weight: float = 0.0
    """The weight the weighted counters used for this item (see ``ReviewQueue.enqueue``)."""
    score_prob: float | None = None
    """The probability the trace entered the scored sample (None before nested samples: the
    review probability)."""

    @property
    def score_weight(self) -> float:
        """``1 / score_prob``: the item's weight in the scored sample."""
        return 1.0 / (self.score_prob or self.inclusion_prob)

    @functools.cached_property
    def query_record(self) -> QueryRecord:
        """``record`` as a ``QueryRecord``, parsed once per item: the one way estimators read it
        (the review cache keeps items across refreshes, so each scrape does not parse them again)."""
        return QueryRecord.from_dict(self.record)

    @property
    def paired_record(self) -> QueryRecord | None:
        return QueryRecord.from_dict(self.pair_record) if self.pair_record is not None else None

    @classmethod
    def from_row(cls, row: Any) -> ReviewItem:
        m = row._mapping
        return cls(
            id=m["id"], queue=m["queue"], trace_id=m["trace_id"], stratum=m["stratum"],
            inclusion_prob=m["inclusion_prob"], weight=m["weight"], tenant=m["tenant"],
            record=json.loads(m["record"]), pair_trace_id=m["pair_trace_id"], state=m["state"],
            claimed_by=m["claimed_by"], claim_expires_at=m["claim_expires_at"],
            created_at=m["created_at"], reviewed_at=m["reviewed_at"],
            assigned_to=m.get("assigned_to"),
            draft=json.loads(m["draft"]) if m.get("draft") else None,
            pair_record=json.loads(m["pair_record"]) if m["pair_record"] is not None else None,
            counted_weight=m["counted_weight"],
            score_prob=m.get("score_prob"),
        )


@dataclass(frozen=True)
class Review:
    """A reviewer's labels for one item."""

    id: int
    item_id: int
    reviewer: str
    """A pseudonym, never a real identity."""
    labels: dict[str, Any]
    created_at: float


@dataclass(frozen=True)
class ReviewSession:
    """A logged-in reviewer's session, shared by every replica through the store."""

    reviewer: str
    csrf_token: str
    expires_at: float


@dataclass(frozen=True)
class FeedbackEvent:
    """A user signal about a query, as stored (time in UTC seconds)."""

    trace_id: str
    kind: str
    time: float
    reason: str | None = None
    value: float | str | None = None
    key: str | None = None
    """The event's identity within its trace (the feedback span's id): stored at most once."""

    @classmethod
    def from_feedback(cls, trace_id: str, feedback: Feedback) -> FeedbackEvent:
        """From the ``Feedback`` of an assembled ``QueryRecord``."""
        return cls(trace_id, feedback.kind, feedback.time_ns / 1e9, feedback.reason, feedback.value,
                   key=feedback.span_id or _content_key(feedback))


def _content_key(feedback: Feedback) -> str:
    """A deterministic key when the span id is unknown: the same event resent hashes the same."""
    text = json.dumps([feedback.kind, feedback.time_ns, feedback.reason, feedback.value])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Score:
    """One scorer's verdict on one trace. ``score`` is None when the answer has no claims."""

    trace_id: str
    scorer: str
    score: float | None
    scorer_version: str
    label: str | None = None
    computed_at: float | None = None
    """Defaults to the time of the upsert."""
    threshold: float | None = None
    """The threshold ``label`` was taken at (the scorer version's calibrated one by default)."""
    claims: str | None = None
    """Per-claim verdicts as JSON (``faithfulness.claims.claims_json``), where the scorer gives them."""

    def __post_init__(self) -> None:
        if self.score is not None and not math.isfinite(self.score):
            raise ValueError(f"score for {self.trace_id} by {self.scorer} must be finite or None, got {self.score}")


@dataclass(frozen=True)
class ReservoirItem:
    """One entry offered to a drift reservoir: a vector or a categorical value, not both."""

    trace_id: str
    vector: Any = None
    """A 1-D sequence of floats (stored as float32 bytes)."""
    value: str | None = None
    """A categorical value (intent, route)."""
    model: str | None = None
    """The embedding model that produced ``vector``."""
    added_at: float | None = None
    skipped_before: int = 0
    """Reference only: queries the feed passed over just before this one (they count in Algorithm R's total)."""
    keep_probability: float = 1.0
    """Reference only: the chance the feed kept this query before embedding it (at least Algorithm R's
    ``capacity / position``); the store keeps it with the rest of Algorithm R's chance."""


@dataclass(frozen=True)
class ReservoirInfo:
    signal: str
    window: str
    version: int
    model: str | None
    source: str | None
    kind: str | None
    """``vector`` or ``categorical`` once the first item arrived."""
    dim: int | None
    seen: int
    """Items offered since the version began (Algorithm R's n)."""
    size: int
    created_at: float


@dataclass(frozen=True)
class ReservoirWindow:
    """One drift window read back: values, their trace ids and times, and its version."""

    values: Any
    """An ``(n, dim)`` float32 array (embedding signals) or a list of values (categorical)."""
    trace_ids: list[str]
    times: Any
    """``(n,)`` float64 Unix times (``added_at``)."""
    version: int


@dataclass(frozen=True)
class DriftRun:
    id: int
    profile: str
    scheduled_for: float
    signal: str | None
    detector: str | None
    holder: str
    attempts: int
    lease_expires_at: float
    started_at: float
    finished_at: float | None
    status: str
    """``running``, ``ok`` or ``failed``."""
    result: dict[str, Any] | None


@dataclass(frozen=True)
class Release:
    service: str
    release: str
    first_seen: float
