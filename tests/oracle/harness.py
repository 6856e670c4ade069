"""Drive simulated traffic through real agent processes and collect everything they exported.

Shared by ``tests/oracle/test_oracle.py`` (short) and ``benchmarks/oracle.py`` (many seeds).
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import sqlalchemy as sa
import yaml

from rag_monitor.simulate import Traffic
from rag_monitor.estimators import ht_ratio_se, weighted_rate
from rag_monitor.settings import AgentSettings
from rag_monitor.simulate.oracle import Samples, compare
from rag_monitor.simulate.wire import Batch
from tests.services import free_port, wait_until

SAMPLING = {"base_rate": 0.2, "thumbs_down_rate": 1.0, "low_confidence_rate": 0.4, "low_confidence_below": 0.3,
            "refusal_rate": 0.5, "shadow_pair_rate": 0.6, "salt": "oracle",
            # The scorer labels more than the reviewers (a nested sample); no budget, so the design is exact.
            "score_rate": 0.35, "score_budget": 0}
RECENT_TTL_S = 36.0
"""The truth counts 'late' feedback (two export requests after its query) as arriving within the
agent's recent-records TTL, and phase 1 as arriving after it. The simulator's traces started
months before the wall clock, so the store files each in the slot of ``now - ttl/2``
(``RecentRecords.slot_of``) and may drop it ttl/2 after it was stored: the premise checked is
"within half the TTL". Phase 0 waits for each replica's
regeneration check after every run of roots, so two requests can take seconds of wall-clock time
on a loaded machine (8 s ran out for the last queries of the two-replica run on CI: their late
thumbs-down found no live record and a late regenerate named no query). The phase-1 wait is
counted from the moment every query was counted, so a long TTL costs less than it adds."""


class OtlpSink:
    """A small OTLP/HTTP receiver standing in for Phoenix: keeps every body it is sent."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def do_GET(self):  # noqa: N802 - Phoenix's client probes; nothing to say
                self.send_response(404)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def text(self) -> str:
        from google.protobuf.json_format import MessageToJson
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        out = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
                out.append(MessageToJson(request, ensure_ascii=False))
            except Exception:  # noqa: BLE001 - JSON or gzip: search the raw bytes
                out.append(body.decode("utf-8", "replace"))
        return "\n".join(out)

    def close(self):
        self.server.shutdown()


def post(url: str, body: bytes) -> None:
    """POST one OTLP body, retrying 503s as an exporter would."""
    for _ in range(50):
        request = urllib.request.Request(f"{url}/v1/traces", data=body, method="POST",
                                         headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                r.read()
                return
        except urllib.error.HTTPError as e:
            if e.code not in (429, 503):
                raise AssertionError(f"agent answered {e.code}: {e.read()[:300]!r}") from e
        time.sleep(0.2)
    raise AssertionError("agent kept answering 503")


def _same_false_exclusion_ratios(texts: list[str]) -> bool:
    """Every replica exports the ratios, the same ones: they read one store, so a difference is a
    replica whose scrape cache has not yet taken in the latest reviews."""
    def ratios(text: str) -> dict[frozenset, float]:
        return {labels: v for (name, labels), v in Samples([text]).values.items()
                if name == "rag_filter_false_exclusion_ratio"}

    found = [ratios(text) for text in texts]
    return bool(found[0]) and all(other == found[0] for other in found[1:])


def scrape(agent) -> str:
    if hasattr(agent, "settle"):  # in-process: what the requests fanned out is counted first
        agent.settle()
    with urllib.request.urlopen(f"{agent.http_url}/metrics", timeout=10) as r:
        return r.read().decode()


@dataclass
class Run:
    traffic: Traffic
    texts: list[str] = field(default_factory=list)
    items: list[dict] = field(default_factory=list)
    dump: str = ""


def _regeneration_check_at(agent) -> float:
    return agent.metric_sum("rag_agent_job_last_success_timestamp_seconds", job="regeneration")


def regeneration_checked(agents: list) -> None:
    """Wait until each agent's regeneration job has checked the queries it acknowledged so far.

    The job runs off the request path, on whatever its queue holds at a tick: were the next batch
    sent first, a replica could check a session's later query before another replica had stored
    the earlier one in the shared session windows (an order real traffic, minutes apart, never
    has, but the oracle replays days in seconds). Two completed ticks after the post: the first
    may have taken its queue before the post arrived.
    """
    for agent in agents:  # in-process: the regeneration sink has offered the queries to the job's queue
        if hasattr(agent, "settle"):
            agent.settle()
    posted = time.time()
    for agent in agents:
        wait_until(lambda a=agent: _regeneration_check_at(a) > posted, timeout=30,
                   what="a regeneration check after the batch", interval=0.02)
        first = _regeneration_check_at(agent)
        wait_until(lambda a=agent: _regeneration_check_at(a) > first, timeout=30,
                   what="a second regeneration check after the batch", interval=0.02)


def _runs(batch, replicas: int) -> list[tuple[int, list]]:
    """The batch's spans routed by trace id (as a load-balancing Collector does), cut into runs of
    consecutive spans for one replica: roots come in query order, so a session's earlier query
    reaches the shared session windows before its re-ask, whichever replica each went to."""
    runs: list[tuple[int, list]] = []
    for span in batch.spans:
        replica = span.context.trace_id % replicas
        if runs and runs[-1][0] == replica:
            runs[-1][1].append(span)
        else:
            runs.append((replica, [span]))
    return runs


class LateClock:
    """The longest wall-clock time from a query's acknowledged root to a later request carrying
    spans of its trace (its late feedback): the truth assumes the record is still live then."""

    def __init__(self):
        self.rooted: dict[int, float] = {}  # trace id -> when its root was acknowledged
        self.longest = 0.0

    def post(self, url: str, spans: list, body: bytes) -> None:
        sent_at = time.time()
        # The first request after the root's: the late feedback (a resent copy comes later still
        # and needs no live record: it is counted once either way).
        later = {s.context.trace_id for s in spans if s.context.trace_id in self.rooted}
        self.longest = max([self.longest, *(sent_at - self.rooted.pop(t) for t in later)])
        post(url, body)
        self.rooted.update((s.context.trace_id, time.time()) for s in spans
                           if s.parent is None and s.context.trace_id not in later)


def _has_root(spans: list) -> bool:
    return any(span.parent is None for span in spans)


def hold_back(posts: list[tuple[int, list]]) -> list[tuple[int, list, bool]]:
    """``(replica, spans, wait after)`` for each post: the harness waits after a post carrying
    roots (``regeneration_checked``). A trace's spans posted before such a wait and rooted after
    it are held back into a post of their own just before their root's, still a separate request
    (assembly across requests stays tested), so no trace waits for its root over a harness wait:
    on a loaded machine that wait can pass the oracle's root timeout and turn a query partial."""
    root_post = {span.context.trace_id: i for i, (_, spans) in enumerate(posts) for span in spans
                 if span.parent is None}
    waits_before = [0]  # waits_before[i]: waits after posts 0..i-1
    for _, spans in posts:
        waits_before.append(waits_before[-1] + _has_root(spans))
    held: dict[int, list] = defaultdict(list)
    out: list[tuple[int, list, bool]] = []
    for i, (replica, spans) in enumerate(posts):
        if held.get(i):
            out.append((replica, held.pop(i), False))
        stay = []
        for span in spans:
            j = root_post.get(span.context.trace_id, i)
            (held[j] if j > i and waits_before[j] > waits_before[i] else stay).append(span)
        if stay:
            out.append((replica, stay, _has_root(stay)))
    return out


def send(traffic: Traffic, agents: list) -> float:
    """Phase 0 (traffic), then, once the recent-records TTL has passed, phase 1 (late feedback).
    Returns the longest late-feedback delay (``LateClock``)."""
    n = len(agents)
    late = LateClock()
    posts = [(replica, spans) for batch in traffic.phases[0] for replica, spans in _runs(batch, n)]
    for replica, spans, wait in hold_back(posts):
        late.post(agents[replica].otlp_url, spans, Batch(spans).body())
        if wait:  # roots: queries to check for re-asks
            regeneration_checked([agents[replica]])
    finish(traffic, agents)
    return late.longest


def finish(traffic: Traffic, agents: list, counted_elsewhere: int = 0) -> None:
    """After phase 0: every query counted (``counted_elsewhere`` by replicas no longer running),
    checked for re-asks; then, once the recent-records TTL has passed, phase 1 (late feedback)."""
    n = len(agents)
    truth = traffic.truth
    expected_queries = len(truth.records) - counted_elsewhere
    try:
        wait_until(lambda: sum(a.metric_sum("rag_queries_total") for a in agents) >= expected_queries, timeout=60,
                   what=f"{expected_queries} queries counted")
    except TimeoutError as missing:  # say where the rest went
        found = {name: sum(a.metric_sum(name, **labels) for a in agents) for name, labels in [
            ("rag_queries_total", {}), ("rag_agent_traces_partial_total", {}),
            ("rag_agent_spans_dropped_total", {"reason": "late_span"})]}
        raise TimeoutError(f"{missing}: {found}") from None
    counted_at = time.time()
    # Inferred regenerations are counted by each agent's regeneration job, off the request path.
    wait_until(lambda: all(a.metric_sum("rag_agent_job_last_success_timestamp_seconds", job="regeneration") > counted_at
                           for a in agents), timeout=30, what="a regeneration check after the last query")
    time.sleep(max(0.0, counted_at + RECENT_TTL_S + 1.0 - time.time()))  # every record stored is past the TTL
    for batch in traffic.phases[1]:
        for replica, body in batch.split(n).items():
            post(agents[replica].otlp_url, body)


def settle(traffic: Traffic, agents: list, store_url: str, timeout: float = 60, partial_traces: int | None = None) -> None:
    """Wait for every sampled item to be scored and partial traces (``partial_traces``: the
    truth's unless given) to be expired."""
    engine = sa.create_engine(store_url)
    partial_wanted = traffic.truth.partial_traces if partial_traces is None else partial_traces

    def scored() -> bool:
        with engine.connect() as c:
            items = c.execute(sa.text("SELECT count(*) FROM review_items")).scalar()
        done = sum(a.metric_sum("rag_faithfulness_scored_total") for a in agents)
        partial = sum(a.metric_sum("rag_agent_traces_partial_total") for a in agents)
        return items > 0 and done >= items and partial >= partial_wanted

    try:
        wait_until(scored, timeout=timeout, what="every sampled answer scored and partial traces expired")
    except Exception:  # noqa: BLE001 - the oracle reports what is missing, check by check
        pass
    engine.dispose()


REVIEWER_TOKEN = "oracle-reviewer-token"


def _gold_keys(traffic: Traffic):
    by_content = {d.content: d.id for q in traffic.scenario.queries
                  for d in [*q.retrieved, *q.delivered, *(x for f in q.filters for x in f.excluded)]}
    gold = {q.trace_hex: set(q.gold) for q in traffic.scenario.queries}
    return by_content, gold


def review(traffic: Traffic, store) -> int:
    """Label every queued item as a careful blind reviewer would (through the store): the
    documents whose content is a gold document's are relevant."""
    by_content, gold = _gold_keys(traffic)
    done = 0
    while (item := store.review.claim("oracle-reviewer", 600)) is not None:
        record = item.query_record
        shown = [*record.delivered, *record.retrieved, *(d for f in record.filters for d in f.excluded_documents)]
        relevant = {d.id for d in shown if d.id and d.content and by_content.get(d.content) in gold.get(item.trace_id, ())}
        store.review.submit_review(item.id, "oracle-reviewer", {"relevant_documents": sorted(relevant), "faithful": "yes"})
        done += 1
    return done


class ReviewClient:
    """The review API as the page uses it: a session cookie, then the CSRF token on writes."""

    def __init__(self, base: str, token: str, reviewer: str = "oracle"):
        import http.cookiejar

        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        status, page = self.call("POST", "/review/login", urllib.parse.urlencode({"reviewer": reviewer, "token": token}).encode(),
                                 {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 200, f"review login: {status}"
        marker = b'name="csrf-token" content="'
        start = page.index(marker) + len(marker)
        self.csrf = page[start:page.index(b'"', start)].decode()

    def call(self, method: str, path: str, data: bytes | None = None, headers: dict | None = None):
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        try:
            with self.opener.open(request, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def api(self, method: str, path: str, body=None):
        data = json.dumps(body).encode() if body is not None else None
        return self.call(method, path, data, {"X-CSRF-Token": self.csrf, "Content-Type": "application/json"})


def review_through_api(traffic: Traffic, agent) -> tuple[int, str]:
    """Blind review of every queued item through the review API; returns (items, what it showed)."""
    by_content, gold = _gold_keys(traffic)
    client = ReviewClient(agent.http_url, REVIEWER_TOKEN)
    all_gold = set().union(*gold.values())
    shown, done = [], 0
    while True:
        status, body = client.api("POST", "/api/review/claim")
        if status == 204:
            return done, "\n".join(shown)
        assert status == 200, (status, body[:300])
        view = json.loads(body)
        shown.append(body.decode())
        # Documents are numbered per query, so a gold document's content names it wherever it shows.
        keys = [c["key"] for c in view["candidates"] if by_content.get(c["content"]) in all_gold]
        # Two steps, as the page: relevance on the shuffled candidates, then the answer.
        status, body = client.api("POST", f"/api/review/items/{view['item']}/relevance", {"relevant": keys})
        assert status == 200, (status, body[:300])
        status, body = client.api("POST", f"/api/review/items/{view['item']}/labels", {"faithful": "yes"})
        assert status == 200, (status, body[:300])
        done += 1


def dump_store(store_url: str) -> str:
    """Every row of every table, as text."""
    engine = sa.create_engine(store_url)
    meta = sa.MetaData()
    meta.reflect(engine)
    out = []
    with engine.connect() as c:
        for table in meta.sorted_tables:
            for row in c.execute(sa.select(table)):
                out.append(f"{table.name}: {json.dumps([str(v) for v in row], ensure_ascii=False)}")
    engine.dispose()
    return "\n".join(out)


def sampled_items(store_url: str) -> list[dict]:
    engine = sa.create_engine(store_url)
    with engine.connect() as c:
        # A pair's production half is scored under "<scorer>:pair-half" for the shadow report only.
        rows = c.execute(sa.text("SELECT i.trace_id, i.queue, i.stratum, i.inclusion_prob, i.score_prob, i.weight, i.counted_weight, i.pair_trace_id, "
                                 "s.label FROM review_items i LEFT JOIN scores s ON s.trace_id = i.trace_id "
                                 "AND s.scorer NOT LIKE :pair_half"), {"pair_half": "%:pair-half"}).mappings().all()
    engine.dispose()
    return [dict(r) for r in rows]


def estimates(traffic: Traffic, items: list[dict], variant: str) -> dict:
    """The weighted unsupported rate from the scored sample, with its 95% interval, and the truth.

    The faithfulness counters can only grow, so each item counts with the weight of the decision
    in force when it was scored (``counted_weight``: a thumbs-down after that adds no second
    weight). Every item's expected contribution is still its value: unbiased (see the sampler).
    """
    variants = {q.trace_hex: q.variant for q in traffic.scenario.queries}
    pairs = [(r["counted_weight"], r["label"] == "unsupported") for r in items
             if variants.get(r["trace_id"]) == variant and r["label"] in ("supported", "unsupported")]
    return _estimate(variant, pairs, traffic.truth.unsupported_rate(variant))


def _estimate(variant: str, pairs: list[tuple[float, bool]], true: float | None) -> dict:
    """The estimate with two 95% intervals: the linearised Horvitz-Thompson one, and Wilson's at
    the Kish effective size (what the agent exports for judged rates, ``review/rates.py``)."""
    rate, se = ht_ratio_se([w for w, _ in pairs], [flag for _, flag in pairs])
    covered = rate is not None and true is not None and abs(rate - true) <= 1.96 * se
    kish = weighted_rate([w for w, _ in pairs], [flag for _, flag in pairs])
    covered_wilson = kish is not None and true is not None and kish.low <= true <= kish.high
    return {"variant": variant, "estimate": rate, "se": se, "truth": true, "n": len(pairs), "covered": covered,
            "covered_wilson": covered_wilson}


def pii_leaks(needles: set[str], sinks: dict[str, str]) -> dict[str, list[str]]:
    return {name: sorted(n for n in needles if n in text) for name, text in sinks.items() if any(n in text for n in needles)}


__all__ = ["SAMPLING", "OtlpSink", "Run", "compare", "dump_store", "estimates", "pii_leaks", "review",
           "sampled_items", "scrape", "send", "settle"]


@dataclass
class Outcome:
    checks: list
    leaks: dict
    estimates: list
    reviewed: int
    frozen: list = field(default_factory=list)
    """Killed replicas' last scrapes (counters and histograms)."""


@dataclass
class Delivery:
    """How the traffic was delivered, for what the checks expect."""

    longest_late: float
    agents: list
    """The replicas still running at the end."""
    frozen: list[str] = field(default_factory=list)
    """Counters and histograms of killed replicas, as last scraped (Prometheus keeps what it scraped)."""
    spans_resent: int = 0
    """Spans sent twice (exporter retries): every receiver counts what it accepts."""
    partial_may_miss: int = 0
    """Root-lost traces only a killed replica held: they may have died with it."""
    checks: list = field(default_factory=list)
    """The delivery's own checks (e.g. the duplicates each replica found)."""


def frozen_sum(texts: list[str], name: str) -> float:
    return Samples(texts).sum(name) if texts else 0.0


def counters_only(text: str) -> str:
    """A scrape's counter and histogram families: what Prometheus still has of a replica once it is gone."""
    kept = {line.split(" ")[2] for line in text.splitlines()
            if line.startswith("# TYPE ") and line.split(" ")[3] in ("counter", "histogram")}
    stems = kept | {k.removesuffix("_total") for k in kept}

    def family(line: str) -> str:
        return line.split(" ")[2] if line.startswith("# ") else re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0)

    def keep(name: str) -> bool:
        return name in kept or any(name.startswith(stem + "_") for stem in stems)

    return "".join(line + "\n" for line in text.splitlines() if line and keep(family(line)))


def run_oracle(traffic: Traffic, agents: list, store_url: str, sink: OtlpSink, logs: list, *,
               sampling: dict | None = None, deliver=None) -> Outcome:
    """Send (``deliver(traffic, agents) -> Delivery``; by default ``send``), settle, review, then
    compare every exported quantity and search every sink for PII."""
    from dataclasses import replace

    from rag_monitor.review.golden import golden_rows
    from rag_monitor.review.sampler import Sampler, SamplingConfig
    from rag_monitor.simulate.oracle import Check
    from rag_monitor.store import open_store

    sampling = SAMPLING if sampling is None else sampling
    delivery = deliver(traffic, agents) if deliver is not None else Delivery(send(traffic, agents), agents)
    agents = delivery.agents
    truth = replace(traffic.truth, spans_sent=traffic.truth.spans_sent + delivery.spans_resent)
    partial_done = frozen_sum(delivery.frozen, "rag_agent_traces_partial_total")
    settle(traffic, agents, store_url,
           partial_traces=max(0, int(truth.partial_traces - delivery.partial_may_miss - partial_done)))
    feedback_total = sum(truth.feedback.values()) - frozen_sum(delivery.frozen, "rag_feedback_total")
    try:
        wait_until(lambda: sum(a.metric_sum("rag_feedback_total") for a in agents) >= feedback_total, timeout=20,
                   what="every feedback event counted")
    except Exception:  # noqa: BLE001 - reported by the feedback checks
        pass
    reviewed, review_api = review_through_api(traffic, agents[0])
    store = open_store(store_url)
    try:
        golden = json.dumps(golden_rows(store), default=str, ensure_ascii=False)
    finally:
        store.close()
    try:  # the review statistics are cached at scrape time: until every replica has taken in every review
        wait_until(lambda: _same_false_exclusion_ratios([scrape(a) for a in agents]), timeout=30,
                   what="every replica's false-exclusion ratios computed from all the reviews")
    except Exception:  # noqa: BLE001 - reported by the false-exclusion checks
        pass
    texts = [scrape(a) for a in agents] + delivery.frozen
    checks = compare(truth, texts, single_agent=len(texts) == 1)
    if delivery.partial_may_miss:  # those only a killed replica held may be lost with it
        found = Samples(texts).sum("rag_agent_traces_partial_total")
        low = truth.partial_traces - delivery.partial_may_miss
        checks = [Check("partial traces (a killed replica's own may be lost)", f"{low}..{truth.partial_traces}", found,
                        low <= found <= truth.partial_traces) if c.name == "partial traces" else c for c in checks]
    checks += delivery.checks
    # The truth's premise, not the agent's doing: were it broken, the late-feedback checks below
    # fail for the harness's pace, and this line says so.
    checks.append(Check("late feedback sent within half the recent-records TTL (s)", f"< {RECENT_TTL_S / 2}",
                        round(delivery.longest_late, 1), delivery.longest_late < RECENT_TTL_S / 2))
    with tempfile.TemporaryDirectory(prefix="oracle-rules-") as workdir:  # the rate a user reads
        checks += regeneration_rate_checks(truth, texts, Path(workdir))

    # Sampling: exactly the queries the single-draw design chooses, each with its probability.
    items = sampled_items(store_url)
    review_items = [r for r in items if r["queue"] == "default"]
    sampler = Sampler(SamplingConfig(**sampling))
    want = {t: p for t, (_s, p) in truth.sample(sampling, sampler.uniform).items()}
    got = {r["trace_id"]: r["inclusion_prob"] for r in review_items}
    checks.append(Check("sampled traces", len(want), len(got), set(want) == set(got)))
    wrong = {t: (want[t], got[t]) for t in set(want) & set(got) if abs(want[t] - got[t]) > 1e-12}
    checks.append(Check("inclusion probabilities", {}, dict(list(wrong.items())[:5]), not wrong))
    # The scored sample contains the review sample, each trace with its scoring probability.
    want_scored = truth.score_sample(sampling, sampler.uniform)
    got_scored: dict[str, float] = {}
    for r in items:
        got_scored[r["trace_id"]] = max(got_scored.get(r["trace_id"], 0.0), r["score_prob"] or r["inclusion_prob"])
    wrong = {t: (want_scored.get(t), got_scored.get(t)) for t in set(want_scored) | set(got_scored)
             if abs(want_scored.get(t, -1.0) - got_scored.get(t, -2.0)) > 1e-12}
    checks.append(Check("scored sample and its probabilities", {}, dict(list(wrong.items())[:5]), not wrong))
    # Verdicts of the scored sample: the truth's for every item whose verdict is defined.
    by_trace = {q.trace_hex: q for q in truth.records}
    bad = {}
    for r in items:
        q = by_trace.get(r["trace_id"])
        verdict = truth.verdict(q) if q else "?"
        if verdict is not None and r["label"] != verdict:
            bad[r["trace_id"]] = (verdict, r["label"])
    checks.append(Check("verdicts of sampled answers", {}, dict(list(bad.items())[:5]), not bad))

    # The exported weighted rates are the Horvitz-Thompson sums of the scored sample.
    m = Samples(texts)
    found = []
    for variant in ("production", "shadow"):
        est = estimates(traffic, items, variant)
        found.append(est)
        weighted = {v: m.sum("rag_faithfulness_weighted_total", variant=variant, verdict=v) for v in ("supported", "unsupported")}
        exported = weighted["unsupported"] / sum(weighted.values()) if sum(weighted.values()) else None
        same = (exported is None and est["estimate"] is None) or (
            exported is not None and est["estimate"] is not None and abs(exported - est["estimate"]) < 1e-9)
        checks.append(Check(f"weighted unsupported rate {variant}", est["estimate"], exported, same))
    # False exclusions from the reviews: the exported ratio is the weighted share, per release, of
    # the queries users were served (a shadow pair's filters served nobody).
    # Releases past the agents' newest `top_releases` fold into `other`, as in every family.
    weights = {r["trace_id"]: r["weight"] for r in review_items if not r["pair_trace_id"]}
    labelled = set(truth.newest_releases(AgentSettings.top_releases))
    per_release: dict[str, list[float]] = {}
    for trace_id, w in weights.items():
        q = by_trace.get(trace_id)
        verdict = truth.false_exclusion(q) if q else None
        if verdict is not None:
            c = per_release.setdefault(q.release if q.release in labelled else "other", [0.0, 0.0])
            c[0] += w
            c[1] += w * verdict
    for release, (eligible, excluded) in sorted(per_release.items()):
        present = any(n == "rag_filter_false_exclusion_ratio" and dict(lb).get("release") == release for n, lb in m.values)
        # Every replica reports the shared store's value: the sum over replicas is n times it.
        exported = m.sum("rag_filter_false_exclusion_ratio", release=release) / len(agents) if present else None
        ok = exported is not None and abs(exported - excluded / eligible) < 1e-9
        checks.append(Check(f"false-exclusion ratio {release}", excluded / eligible, exported, ok))
    found.append(_false_exclusion_estimate(traffic, review_items))

    sinks = {"store": dump_store(store_url), "forwarded spans": sink.text(), "metrics": "\n".join(texts),
             "golden export": golden, "review API": review_api, "logs": "\n".join(open(p, encoding="utf-8", errors="replace").read() for p in logs)}
    return Outcome(checks, pii_leaks(traffic.scenario.pii.needles(), sinks), found, reviewed, delivery.frozen)


RATE_COUNTERS = ("rag_regenerated_queries_total", "rag_queries_total")


def regeneration_rate_checks(truth, texts: list[str], workdir: Path, promtool: str | None = None) -> list:
    """``rag:regeneration_ratio`` as Prometheus computes it from what the replicas exported, against
    the truth's regenerated queries over queries, per variant.

    The shipped recording rule (regenerated with a 2 s window) runs under ``promtool test rules``
    on each replica's counters as series that rise from 0 to their final value in one step: the
    window holds the whole scenario, and rate()'s extrapolation scales every series alike (by 1/2,
    exactly), so the rule's value is the exact ratio and promtool compares it bit for bit.
    """
    from prometheus_client.parser import text_string_to_metric_families

    from rag_monitor.demo.services import find_binary, write_rules
    from rag_monitor.simulate.oracle import Check

    promtool = promtool or find_binary("promtool")
    if promtool is None:
        return [Check("regeneration rate (recording rule)", "promtool on PATH", None, False)]
    rules = [p for p in write_rules(workdir / "rules", {"regeneration.window": "2s"}) if p.name == "regeneration.yml"]
    series = []
    for replica, text in enumerate(texts):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in RATE_COUNTERS:
                    labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted({**sample.labels, "instance": f"replica-{replica}"}.items()))
                    series.append({"series": f"{sample.name}{{{labels}}}", "values": f"0 {sample.value:.0f}"})
    expected = {v: truth.regeneration_rate(v) for v in ("production", "shadow")}
    exp_samples = [{"labels": f'rag:regeneration_ratio{{variant="{v}"}}', "value": rate}
                   for v, rate in expected.items() if rate is not None]
    test = {"rule_files": [str(rules[0])], "evaluation_interval": "1s", "tests": [{
        "interval": "1s", "input_series": series,
        "promql_expr_test": [{"expr": "rag:regeneration_ratio", "eval_time": "1s", "exp_samples": exp_samples}]}]}
    path = workdir / "regeneration_rate.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    got = re.findall(r"got: (.*)", result.stdout + result.stderr)
    return [Check("regeneration rate (recording rule rag:regeneration_ratio)", expected,
                  "as expected" if result.returncode == 0 else (got or (result.stdout + result.stderr)[-500:]), result.returncode == 0)]


def _false_exclusion_estimate(traffic: Traffic, items: list[dict]) -> dict:
    by_trace = {q.trace_hex: q for q in traffic.truth.records}
    pairs = []
    for r in items:
        q = by_trace.get(r["trace_id"])
        verdict = traffic.truth.false_exclusion(q) if q else None
        if verdict is not None:
            pairs.append((r["weight"], verdict))
    return _estimate("false_exclusion", pairs, traffic.truth.false_exclusion_rate())
