"""Implicit signals against blind review through the real store: queued items with their
inclusion probabilities, stored feedback, reviews submitted by a reviewer; then the scrape the
agent serves and the `rag-monitor review report` a person reads (text and HTML)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rag_monitor.estimators import rate_difference, weighted_rate
from rag_monitor.review.collector import ReviewMetricsCollector
from rag_monitor.review.signals import cell, signal_associations
from rag_monitor.simulate.signals import World, reviewed_sample
from rag_monitor.store import open_store
from rag_monitor.store.models import FeedbackEvent

WORLD = World({"r1": 0.2, "r2": 0.3}, rates=(0.2, 0.6, 0.6))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A simulated review sample, written to a SQLite store the way the agent and reviewers do."""
    url = f"sqlite:///{tmp_path_factory.mktemp('signals') / 'store.db'}"
    store = open_store(url)
    reviewed, feedback = reviewed_sample(WORLD, seed=7, queries=1500)
    labels = {}
    for item, review in reviewed:
        store.queue.enqueue(item.record, stratum=item.stratum, inclusion_prob=item.inclusion_prob)
        labels[item.trace_id] = review.labels
    store.feedback.add(e for events in feedback.values() for e in events)
    # A reason with contact details never becomes a label value: it counts as "other".
    first = reviewed[0][0].trace_id
    store.feedback.add([FeedbackEvent(first, "thumbs_down", 1.0, "wrong, call me at 555 0100", None, "contact")])
    feedback[first] = [*feedback.get(first, []), FeedbackEvent(first, "thumbs_down", 1.0, "wrong, call me at 555 0100")]
    while (item := store.review.claim("alice", 60)) is not None:
        store.review.save_draft(item.id, "alice", {})
        store.review.submit_review(item.id, "alice", labels[item.trace_id])
    yield url, store, signal_associations(reviewed, feedback)
    store.close()


def scraped(store) -> dict:
    registry = CollectorRegistry()
    registry.register(ReviewMetricsCollector(store))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples
            if s.name.startswith("rag_signal_")}


def test_the_scrape_exports_each_signal_with_its_interval_items_and_direction(stored):
    _, store, expected = stored
    metrics = scraped(store)

    def value(name, **labels):
        return metrics.get((name, tuple(sorted(labels.items()))))

    assert len(expected) > 100
    for a in expected:
        cell_labels = dict(signal=a.signal, verdict=a.verdict, release=a.release)
        assert value("rag_signal_items", **cell_labels) == a.items
        assert value("rag_signal_items_with_signal", **cell_labels) == a.with_signal
        for bound, v in (("estimate", a.value), ("lower", a.low), ("upper", a.high)):
            got = value("rag_signal_association", **cell_labels, bound=bound)
            assert got == (None if v is None else pytest.approx(v)), (a, bound)
        if a.release == "all":
            assert value("rag_signal_direction", signal=a.signal, verdict=a.verdict) == a.direction
    # What the oracle relates strongly is established here too; the SDK's newer kinds are listed, not established.
    assert value("rag_signal_direction", signal="thumbs_down", verdict="incorrect") == 1
    assert value("rag_signal_direction", signal="thumbs_down:wrong", verdict="incorrect") == 1
    assert value("rag_signal_direction", signal="thumbs_down:other", verdict="incorrect") == 0
    assert not any("555" in labels for _, ls in metrics for labels in dict(ls).values())


def test_the_estimate_is_the_weighted_difference_of_the_two_groups(stored):
    """By hand from the store's own items: thumbs-down vs none, incorrect, over all releases."""
    _, store, _ = stored
    reviewed = store.queue.reviewed()
    feedback = store.feedback.for_traces(i.trace_id for i, _ in reviewed)
    judged = [(i.weight, r.labels["correct"] == "no", any(e.kind == "thumbs_down" for e in feedback.get(i.trace_id, [])))
              for i, r in reviewed if "correct" in r.labels]
    with_ = weighted_rate([w for w, _, s in judged if s], [y for _, y, s in judged if s])
    without = weighted_rate([w for w, _, s in judged if not s], [y for _, y, s in judged if not s])
    d = rate_difference(with_, without)
    m = scraped(store)
    key = tuple(sorted(dict(signal="thumbs_down", verdict="incorrect", release="all", bound="estimate").items()))
    assert m[("rag_signal_association", key)] == pytest.approx(d.value)
    assert with_.value > 2 * without.value  # the stratum oversamples thumbs-down: weights matter, and so does the signal


def test_review_report_prints_and_renders_each_signal_with_its_direction(stored, tmp_path):
    url, _, expected = stored
    html = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "review", "report", "--store-url", url,
                           "--baseline", "r1", "--candidate", "r2", "--out", str(html)],
                          capture_output=True, text=True, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("thumbs_down ", "citation_click ", "dwell "))]
    by = {(a.signal, a.verdict, a.release): a for a in expected}
    (td,) = [line for line in lines if line.split()[:2] == ["thumbs_down", "incorrect"]]
    for release in ("r1", "r2", "all"):
        assert cell(by[("thumbs_down", "incorrect", release)]) in td
    assert td.endswith("goes with more incorrect answers")
    (click,) = [line for line in lines if line.split()[:2] == ["citation_click", "unfaithful"]]
    assert cell(by[("citation_click", "unfaithful", "all")]) in click
    assert click.endswith("direction not established" if not by[("citation_click", "unfaithful", "all")].direction else "answers")
    (dwell,) = [line for line in lines if line.split()[:2] == ["dwell", "unfaithful"]]
    assert dwell.endswith("longer dwell goes with more unfaithful answers")
    page = html.read_text()
    assert "Implicit signals against blind review" in page and "goes with more incorrect answers" in page
    assert "555" not in done.stdout + page
