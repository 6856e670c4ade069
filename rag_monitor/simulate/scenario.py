"""The simulated production: who asks what, on which release, and what happens to each query.

Everything is drawn from one ``random.Random(seed)``, so a seed is a reproducible day of
traffic. The draws are the ground truth: a ``SimQuery`` says what the app did (stages and
their times, model calls and tokens, filters and what they removed, the answer and whether
the delivered context supports it, the feedback the user gave and when it was sent), never
what an agent made of it.

Shape of the traffic (``Scenario`` knobs): ``releases`` releases deployed one after another
over ``days``, each first as a canary beside the current release (two live at once), then
alone; a shadow variant answering a share of production queries on another model; more
tenants and intents than the agent's label caps; sessions that re-ask; four dialects. Queries
arrive evenly, or (``burst``) in bursts of about that many queries within one second, quiet
between bursts, as a busy app's traffic does (a batch job, a page everyone reloads).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from rag_monitor.simulate.pii import PII

DIALECTS = ("sdk", "langchain", "llamaindex", "genai")
DIALECT_WEIGHTS = (0.55, 0.15, 0.15, 0.15)
FEEDBACK_TIMINGS = ("early", "late", "after_ttl")
"""In the query's own request; in a later request within the recent-records TTL; after it."""

ROUTER_MODEL = "gpt-4o-mini"
GENERATOR_MODELS = ("gpt-4o", "gpt-4.1-mini")  # alternate by release
SHADOW_MODEL = "claude-3-5-haiku-20241022"
EMBEDDING_MODEL = "text-embedding-3-small"

_UNSUPPORTED = "Zebras {n} quietly juggle violet marmalade across Saturnine lighthouses."
_MS = 1_000_000


@dataclass
class SimDoc:
    id: str
    content: str


@dataclass
class SimFilter:
    kind: str
    """``entitlement`` or ``relevance``."""
    candidates_in: int
    candidates_out: int
    excluded: list[SimDoc]
    report: str
    """How the app reports what it removed: ``ids``, ``documents`` or ``both``."""


@dataclass
class SimCall:
    kind: str
    """``llm`` or ``embedding``."""
    model: str
    input_tokens: int
    output_tokens: int = 0
    cached_input_tokens: int = 0


@dataclass
class SimStage:
    name: str
    start_ns: int
    end_ns: int
    error: str | None = None
    """An exception the app caught in this stage (recorded on its span, message with PII)."""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass
class SimFeedback:
    kind: str
    timing: str
    """One of ``FEEDBACK_TIMINGS``."""
    duplicated: bool = False
    """The exporter sends the same span twice (a retry): counted once."""
    reason: str | None = None
    span_id: int = 0


@dataclass
class SimQuery:
    trace_id: int
    dialect: str
    service: str
    release: str
    variant: str
    tenant: str | None
    intent: str | None
    session_id: str
    user_id: str
    start_ns: int
    end_ns: int
    query: str
    answer: str
    stages: list[SimStage] = field(default_factory=list)
    calls: list[SimCall] = field(default_factory=list)
    filters: list[SimFilter] = field(default_factory=list)
    retrieved: list[SimDoc] = field(default_factory=list)
    delivered: list[SimDoc] = field(default_factory=list)
    gold: list[str] = field(default_factory=list)
    """Ids of the documents a reviewer marks relevant."""
    supported: bool | None = None
    """Whether the delivered context supports the answer; None when not scorable."""
    refused: bool = False
    confidence: float | None = None
    hidden: bool = False
    """The app hides query, answer and document content (``CaptureConfig``)."""
    error: str | None = None
    """The root span's error status message (the query failed)."""
    shadow_of: int | None = None
    feedback: list[SimFeedback] = field(default_factory=list)
    root_lost: bool = False
    """The root span never reaches the agent: a partial trace, not a query."""
    requests: int = 1
    """How many OTLP requests the trace's spans are split over."""
    regeneration: bool = False
    """A near-duplicate re-ask of the session's previous query within the window."""
    ttft_s: float | None = None

    @property
    def trace_hex(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class Scenario:
    seed: int
    queries: list[SimQuery]
    releases: list[str]
    """In deployment order (first seen first)."""
    pii: PII
    service: str = "support-bot"


def _doc(rng: random.Random, pii: PII, n: int) -> SimDoc:
    # A few document ids carry PII (a path with an e-mail in it): they must be pseudonymised.
    doc_id = f"kb/{pii.email(rng)}/policy-{n}" if rng.random() < 0.1 else f"kb-{n}"
    words = " ".join(rng.choice(_WORDS) for _ in range(6))
    return SimDoc(doc_id, f"Policy {n} says refunds take {n % 29 + 2} days and cover {words}.")


_WORDS = ("annual plans", "gift cards", "shipping", "damaged parcels", "exchanges", "vouchers", "insurance",
          "roaming", "upgrades", "devices", "accessories", "warranty", "loyalty points", "invoices")


def generate(seed: int, queries: int = 300, releases: int = 16, days: float = 3.0, tenants: int = 30,
             intents: int = 28, service: str = "support-bot", burst: int = 0) -> Scenario:
    """Draw ``queries`` production queries (plus their shadows) over ``days`` simulated days;
    ``burst``: in bursts of 1 to 2 x ``burst`` queries within a second each (0: evenly)."""
    rng = random.Random(seed)
    pii = PII(seed)
    names = [f"2026.11.{i + 1:02d}" for i in range(releases)]
    t0 = 1_790_000_000 * 10**9  # a fixed simulated epoch: spans carry simulated times
    span_ns = int(days * 86400e9)
    slot = span_ns // releases
    out: list[SimQuery] = []
    doc_counter = 0
    session_last: dict[str, SimQuery] = {}
    sessions = [f"s-{seed}-{i}" if i % 7 else pii.email(rng) for i in range(max(4, queries // 3))]
    arrivals = _bursts(rng, queries, t0, span_ns, burst) if burst else None
    for k in range(queries):
        # Time advances evenly with jitter; release k is a canary in the last third of slot k-1.
        t = arrivals[k] if arrivals else t0 + k * span_ns // queries + rng.randrange(0, span_ns // queries // 2)
        current = min((t - t0) // slot, releases - 1)
        release = names[current]
        if current + 1 < releases and (t - t0) % slot > 2 * slot // 3 and rng.random() < 0.3:
            release = names[current + 1]  # the canary: the next release, on part of the traffic
        dialect = rng.choices(DIALECTS, DIALECT_WEIGHTS)[0]
        session = rng.choice(sessions)
        previous = session_last.get(session)
        if previous is not None and t - previous.start_ns <= 130 * 10**9:
            t = previous.start_ns + 131 * 10**9 + rng.randrange(0, 10**9)  # outside the window
        hidden = dialect == "sdk" and rng.random() < 0.06
        if hidden:
            session = f"hidden-{seed}-{k}"  # its own session: two hidden asks within the window
        q = _query(rng, pii, k, t, dialect, release, service, session, None, hidden, tenants, intents, doc_counter)
        doc_counter += 10
        out.append(q)
        session_last[session] = q
        if rng.random() < (0.5 if hidden else 0.12):  # the same question again within the window
            again = _query(rng, pii, k, t + rng.randrange(5, 60) * 10**9, dialect, release, service, session,
                           q, hidden, tenants, intents, doc_counter)
            doc_counter += 10
            out.append(again)
            session_last[session] = again
        if dialect == "sdk" and not hidden and not q.refused and q.error is None and rng.random() < 0.1:
            out.append(_shadow(rng, pii, q))
    out.sort(key=lambda q: q.start_ns)
    _split_and_lose(rng, out)
    return Scenario(seed, out, names, pii, service)


def _bursts(rng: random.Random, queries: int, t0: int, span_ns: int, burst: int) -> list[int]:
    """Start times in bursts: each burst's queries within one second of its start, the bursts'
    starts spread over the span with jitter, quiet in between. Sorted."""
    sizes = []
    while sum(sizes) < queries:
        sizes.append(rng.randrange(burst, 2 * burst + 1))
    gap = span_ns // len(sizes)
    out = []
    for b, size in enumerate(sizes):
        start = t0 + b * gap + rng.randrange(0, max(1, gap - 10**9) // 2)
        out.extend(start + rng.randrange(0, 10**9) for _ in range(size))
    return sorted(out)[:queries]


def _query(rng, pii, k, t, dialect, release, service, session, reasked, hidden, tenants, intents, docs_from) -> SimQuery:
    n_intents = rng.randrange(intents)
    q = SimQuery(
        trace_id=rng.getrandbits(128) or 1, dialect=dialect, service=service, release=release,
        variant="production", tenant=f"tenant-{rng.randrange(tenants)}", intent=f"intent-{n_intents}",
        session_id=session, user_id=pii.email(rng) if rng.random() < 0.3 else f"u-{rng.randrange(10**6)}",
        start_ns=t, end_ns=t, query="", answer="",
    )
    q.hidden = hidden
    if dialect != "sdk":  # only the SDK sends tenant, intent, refusals and confidence
        q.tenant = q.intent = None
    if reasked is not None:
        q.query, q.regeneration, q.tenant, q.intent = reasked.query, not hidden, reasked.tenant, reasked.intent
    else:
        q.query = f"Question {k}: how long do refunds take for order {rng.randrange(10**5)}? " + pii.sentence(rng)
    q.retrieved = [_doc(rng, pii, docs_from + i) for i in range(rng.randrange(3, 6))]
    no_context = rng.random() < 0.06
    q.delivered = [] if no_context else q.retrieved[: rng.randrange(1, len(q.retrieved) + 1)]
    if no_context:
        q.retrieved = []
    elif dialect != "sdk":  # no context stage: the generator gets what was retrieved
        q.delivered = list(q.retrieved)
    q.refused = dialect == "sdk" and not hidden and rng.random() < 0.07
    q.confidence = round(rng.random(), 3) if dialect == "sdk" else None
    if rng.random() < 0.02:
        # The query fails before it answers: no refusal, no confidence.
        q.error, q.refused, q.confidence = f"upstream failure for {pii.email(rng)}", False, None
    if q.refused:  # a refusal carries no answer confidence (the SDK's refuse() takes none)
        q.answer, q.supported, q.confidence = "I cannot help with that request.", None, None
    elif q.error is not None:
        q.answer, q.supported = "", None
    elif q.delivered:
        q.supported = rng.random() < 0.8
        q.answer = q.delivered[0].content if q.supported else _UNSUPPORTED.format(n=k)
    else:
        q.answer = _UNSUPPORTED.format(n=k)
    if hidden:
        q.supported = None
    q.gold = [d.id for d in q.retrieved[:1]]
    if dialect == "sdk":
        q.filters = _filters(rng, pii, q, docs_from)
    _timeline(rng, pii, q)
    q.feedback = _feedback(rng, pii, q)
    return q


def _filters(rng, pii, q: SimQuery, docs_from: int) -> list[SimFilter]:
    filters = []
    for kind, p in (("entitlement", 0.3), ("relevance", 0.45)):
        if rng.random() >= p:
            continue
        report = rng.choice(("ids", "documents", "both"))
        removed = [_doc(rng, pii, docs_from + 6 + len(filters) * 2 + i) for i in range(rng.randrange(0, 3))]
        cin = rng.randrange(5, 40)
        emptied = kind == "relevance" and rng.random() < 0.15
        if emptied and not removed:
            removed = [_doc(rng, pii, docs_from + 9)]
        filters.append(SimFilter(kind, cin, 0 if emptied else cin - len(removed), removed, report))
    # A relevance filter that removed the gold document: a false exclusion a reviewer can see.
    relevance = [f for f in filters if f.kind == "relevance" and f.excluded]
    if relevance and rng.random() < 0.5:
        q.gold = [relevance[0].excluded[0].id]
    return filters


def _timeline(rng, pii, q: SimQuery) -> None:
    """Stages back to back from the query's start; durations in whole microseconds plus 137 ns
    so no value sits on a histogram bucket boundary."""
    t = q.start_ns + rng.randrange(1, 5) * _MS

    def stage(name: str, low_ms: int, high_ms: int, error: str | None = None) -> None:
        nonlocal t
        duration = rng.randrange(low_ms * 1000, high_ms * 1000) * 1000 + 137
        q.stages.append(SimStage(name, t, t + duration, error))
        t += duration + rng.randrange(0, 3) * _MS

    words = len(q.query.split())
    q.calls.append(SimCall("embedding", EMBEDDING_MODEL, 0 if q.dialect == "llamaindex" else words * 2))
    stage("embed", 5, 40)
    if q.error is not None:  # the query fails at retrieval: no documents, no answer
        q.retrieved, q.delivered, q.filters = [], [], []
        stage("retrieve", 20, 150)
        q.end_ns = t + rng.randrange(1, 4) * _MS
        return
    for _ in q.filters:
        stage("filter", 1, 6)
    stage("retrieve", 20, 150)
    if q.dialect == "sdk" and rng.random() < 0.5:
        stage("rerank", 10, 60, error=f"reranker timeout for {pii.phone(rng)}" if rng.random() < 0.2 else None)
    if q.dialect == "sdk":
        stage("context", 1, 3)
    if rng.random() < 0.5 and q.dialect != "llamaindex":
        q.calls.append(SimCall("llm", ROUTER_MODEL, rng.randrange(200, 1500), rng.randrange(3, 20)))
        stage("generate", 50, 300)
    generator = GENERATOR_MODELS[int(q.release.rsplit(".", 1)[1]) % 2]
    prompt = rng.randrange(500, 4000)
    cached = rng.randrange(0, prompt // 2) // 64 * 64 if rng.random() < 0.4 else 0
    q.calls.append(SimCall("llm", generator, prompt, rng.randrange(20, 400), cached))
    stage("generate", 200, 2500)
    if q.dialect == "sdk" and rng.random() < 0.5:
        q.ttft_s = round(rng.uniform(0.1, 0.9), 3)
    q.end_ns = t + rng.randrange(1, 4) * _MS


def _feedback(rng, pii, q: SimQuery) -> list[SimFeedback]:
    out = []
    for kind, p in (("thumbs_up", 0.1), ("thumbs_down", 0.1), ("regenerate", 0.04), ("copy", 0.05)):
        if rng.random() < p:
            timing = rng.choices(FEEDBACK_TIMINGS, (0.4, 0.4, 0.2))[0]
            reason = f"wrong, call me at {pii.phone(rng)}" if kind == "thumbs_down" and rng.random() < 0.5 else None
            out.append(SimFeedback(kind, timing, rng.random() < 0.2, reason, rng.getrandbits(64) or 1))
    return out


def _shadow(rng, pii, production: SimQuery) -> SimQuery:
    """The shadow variant answers the same question on another model; users never see it."""
    s = SimQuery(
        trace_id=rng.getrandbits(128) or 1, dialect="sdk", service=production.service, release=production.release,
        variant="shadow", tenant=production.tenant, intent=production.intent,
        session_id=f"shadow-{production.trace_id:x}", user_id=production.user_id,
        start_ns=production.start_ns + 1000, end_ns=production.start_ns, query=production.query, answer="",
        shadow_of=production.trace_id,
    )
    s.retrieved, s.delivered, s.gold = list(production.retrieved), list(production.delivered), list(production.gold)
    s.confidence = round(rng.uniform(0.5, 1.0), 3)
    if s.delivered:
        s.supported = rng.random() < 0.7
        s.answer = s.delivered[-1].content if s.supported else _UNSUPPORTED.format(n=production.trace_id % 997)
    else:
        s.answer = _UNSUPPORTED.format(n=1)
    _timeline(rng, pii, s)
    s.calls = [c if c.model not in GENERATOR_MODELS else SimCall("llm", SHADOW_MODEL, c.input_tokens, c.output_tokens)
               for c in s.calls]
    return s


def _split_and_lose(rng, queries: list[SimQuery]) -> None:
    seen_releases: set[str] = set()
    for q in queries:
        q.requests = rng.choice((1, 1, 2, 3))
        # A trace loses its root only on a release already seen (so first-seen order stays the
        # deployment order), never one with feedback or a shadow (the truth stays simple).
        q.root_lost = (q.release in seen_releases and not q.feedback and q.variant == "production"
                       and not q.hidden and rng.random() < 0.03)
        if not q.root_lost:
            seen_releases.add(q.release)
    shadowed = {q.shadow_of for q in queries if q.shadow_of}
    for q in queries:
        if q.trace_id in shadowed:
            q.root_lost = False
