"""Every metric family with a ``release`` label folds releases alike (one ``ReleaseLabels.label``).

Two services deploy three releases each, more than ``top_releases`` keeps per service; then every
release serves again, and every query is reviewed. Read from the agent's /metrics exposition (not
a hand list of families): every family with a ``release`` label names the same releases, the two
newest of each service, and folds the same queries into ``other``.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rag_monitor.review.auth import hash_token
from rag_monitor.review.blind import candidates
from rag_monitor.review.signals import OVERALL
from tests.review.test_review_api import Client
from tests.services import wait_until
from tests.traces import body, child_spans, root_span, trace_id_of

pytestmark = pytest.mark.integration

KEEP = 2
RELEASES = [("search", "s1"), ("chat", "c1"), ("search", "s2"), ("chat", "c2"), ("search", "s3"), ("chat", "c3")]
"""In the order first seen. Kept: each service's two newest. Newest two across services would be c3, s3."""
KEPT = {"s2", "s3", "c2", "c3"}
FOLDED = {"s1", "c1"}


def release_samples(text: str) -> dict[str, tuple[str, dict[tuple, float]]]:
    """Family -> (type, {sample key: value}) for every family with a ``release`` label in the exposition."""
    out: dict[str, tuple[str, dict[tuple, float]]] = {}
    for family in text_string_to_metric_families(text):
        # ``*_created`` (a counter's creation time) is a timestamp, not a count.
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples
                   if "release" in s.labels and not s.name.endswith("_created")}
        if samples:
            out[family.name] = (family.type, samples)
    return out


def releases_moved(before: dict[tuple, float], after: dict[tuple, float]) -> set[str]:
    """Release label values whose samples changed (counters and histograms: where new traffic went)."""
    return {dict(key[1])["release"] for key, v in after.items() if v != before.get(key, 0.0)}


def send(agent, start: int) -> int:
    for i, (service, release) in enumerate(RELEASES):
        trace_id = trace_id_of(start + i)
        spans = child_spans(trace_id, service=service) + [root_span(trace_id, release=release, service=service)]
        assert agent.post(body(spans))[0] == 200
    return start + len(RELEASES)


def test_every_release_family_folds_alike(start_agent, tmp_path):
    sampling = tmp_path / "sampling.yaml"
    sampling.write_text("base_rate: 1.0\n")
    agent = start_agent(top_releases=KEEP, sampling_config=str(sampling),
                        review_tokens=f"alice:reviewer:{hash_token('alice-token')}")
    scored = lambda: agent.store.scores.backlog(agent.agent.scoring.scorer.name) == 0  # noqa: E731
    # First sightings, in order: each release counted while it was among its service's newest.
    n = send(agent, 0)
    wait_until(scored, timeout=60, what="the first round scored")
    before = release_samples(agent.scrape())
    # Every release serves again, now that all six are known.
    n = send(agent, n)
    wait_until(scored, timeout=60, what="the second round scored")
    alice = Client(agent.http_url)
    assert alice.login("alice-token") == 200
    for _ in range(n):
        status, view = alice.api("POST", "/api/review/claim")
        assert status == 200, view
        item = agent.store.queue.get_item(json.loads(view)["item"])
        relevant = [c.key for c in candidates(item.id, item.query_record)[0] if c.document_id == "doc-1"]
        assert alice.api("POST", f"/api/review/items/{item.id}/relevance", {"relevant": relevant})[0] == 200
        assert alice.api("POST", f"/api/review/items/{item.id}/labels", {"faithful": "yes", "correct": "yes"})[0] == 200
    after = release_samples(agent.scrape())

    named: dict[str, set[str]] = {}
    for family, (kind, samples) in after.items():
        if kind in ("counter", "histogram"):
            # A counter's old series stay (they counted while named): the second round shows the fold now.
            moved = releases_moved(before.get(family, ("", {}))[1], samples)
            if moved:
                named[family] = moved
        else:  # gauges computed when scraped: over every stored review, folded now
            # (the signal associations' overall row, release="all", is an aggregate, not a release)
            named[family] = {dict(key[1])["release"] for key in samples} - {OVERALL}
    # The families this traffic reaches, found in the exposition: queries, stages, filters, scores,
    # reviews, false exclusions, unsupported rates, release info.
    for expected in ("rag_queries", "rag_query_duration_seconds", "rag_review_judged_ratio", "rag_filter_false_exclusion_eligible",
                     "rag_unsupported_rate_human", "rag_release_info"):
        assert expected in named, sorted(named)
    for family, releases in named.items():
        assert releases - {"other"} == KEPT, family
    info = {"rag_release_info", "rag_release_first_seen_timestamp_seconds"}
    for family, releases in named.items():
        assert ("other" in releases) == (family not in info), family  # the folded releases' queries, in every family
    # The same queries fold: two per folded release were reviewed, one per folded release served again.
    assert agent.metric("rag_filter_false_exclusion_eligible", {"release": "other"}) == 2 * len(FOLDED)
    assert agent.metric_sum("rag_queries_total", release="other") == len(FOLDED)
