"""Probe runs against a real HTTP retrieval hook and a real store: known overlaps, counted errors."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from rag_monitor.agent.probes import (
    HttpRetriever, Probe, ProbeError, ProbeExporter, ProbeRunner, ProbeSetError, load_probe_set, parse_documents,
)
from rag_monitor.alerts.metrics import AgentMetrics
from tests.probe_hook import RetrievalHook
from tests.store.conftest import store, store_url  # noqa: F401 - both backends, as every store test

INDEX = {
    "refund window": ["a", "b", "c", "d"],
    "delivery address": ["e", "f", "g", "h"],
}
PROBES = [Probe("refund", "refund window", 4), Probe("delivery", "delivery address", 4)]


@pytest.fixture
def hook():
    h = RetrievalHook({q: list(ids) for q, ids in INDEX.items()})
    yield h
    h.stop()


class Harness:
    def __init__(self, store, url, timeout_s=5.0):
        self.registry = CollectorRegistry()
        self.metrics = AgentMetrics(self.registry)
        self.retriever = HttpRetriever(url, timeout_s=timeout_s)
        self.runner = ProbeRunner(store.probes, PROBES, self.retriever, concurrency=2,
                                  on_query=self.metrics.probe_queries.inc,
                                  on_error=lambda reason: self.metrics.probe_errors.labels(reason).inc())
        self.exporter = ProbeExporter(store.probes, self.metrics)

    def run(self):
        summary = self.runner.run("test")
        self.exporter.export()
        return summary

    def value(self, name, **labels):
        return self.registry.get_sample_value(name, labels)


def test_first_run_pins_then_a_reshuffle_drops_the_overlap_to_known_values(store, hook):
    h = Harness(store, hook.url)
    first = h.run()
    assert (first.pinned, first.compared, first.errors) == (2, 2, {})
    assert h.value("rag_probe_topk_overlap", measure="jaccard") == 1.0
    assert h.value("rag_probe_topk_overlap", measure="rbo") == 1.0
    assert {b.pinned_by for b in store.probes.baselines().values()} == {"auto"}

    # The index is rebuilt: "refund" loses c and d to x and y; "delivery" swaps its top two.
    hook.index["refund window"] = ["a", "b", "x", "y"]
    hook.index["delivery address"] = ["f", "e", "g", "h"]
    second = h.run()
    assert (second.pinned, second.compared) == (0, 2)
    # Jaccard: refund 2/6, delivery 1 -> mean 2/3. RBO (p = 0.9, padded to depth 4):
    # refund agreements 1, 1, 2/3, 2/4; delivery 0, 1, 1, 1.
    p = 0.9
    rbo_refund = (1 - p) / p * (p + p**2 + 2 / 3 * p**3 + 0.5 * p**4) + 0.5 * p**4
    rbo_delivery = (1 - p) / p * (p**2 + p**3 + p**4) + p**4
    assert h.value("rag_probe_topk_overlap", measure="jaccard") == pytest.approx((1 / 3 + 1) / 2)
    assert h.value("rag_probe_topk_overlap", measure="rbo") == pytest.approx((rbo_refund + rbo_delivery) / 2)
    assert h.value("rag_probe_topk_overlap_min", measure="jaccard") == pytest.approx(1 / 3)
    assert h.value("rag_probe_changed_probes") == 2
    assert h.value("rag_probe_compared_probes") == 2
    assert h.value("rag_probe_queries_total") == 4

    # An intended change: re-pin, and the next run agrees with the new baseline.
    pinned, failed = h.runner.pin()
    assert (pinned, failed) == (2, {})
    h.run()
    assert h.value("rag_probe_topk_overlap", measure="jaccard") == 1.0
    assert h.value("rag_probe_topk_overlap", measure="rbo") == 1.0
    assert h.value("rag_probe_changed_probes") == 0


@pytest.mark.parametrize("mode, reason", [
    ("malformed", "malformed"), ("no_documents", "malformed"), ("no_id", "malformed"), ("status", "http_status"),
])
def test_a_malformed_or_failing_reply_is_a_counted_error_and_no_overlap(store, hook, mode, reason):
    h = Harness(store, hook.url)
    h.run()  # pinned
    hook.index["refund window"] = ["x", "y", "z", "w"]  # would be overlap 0 if it were ever compared
    hook.mode = mode
    summary = h.run()
    assert summary.compared == 0 and summary.errors == {reason: 2}
    assert h.value("rag_probe_errors_total", reason=reason) == 2
    assert h.value("rag_probe_topk_overlap", measure="jaccard") is None  # absent, never 0
    assert h.value("rag_probe_topk_overlap", measure="rbo") is None
    assert h.value("rag_probe_compared_probes") == 0
    assert store.probes.latest_run().errors == 2


def test_a_down_endpoint_is_unreachable_and_a_slow_one_times_out(store, hook):
    h = Harness(store, hook.url, timeout_s=0.5)
    h.run()
    hook.mode = "slow"
    summary = h.run()
    assert summary.errors == {"timeout": 2} and summary.compared == 0
    assert h.value("rag_probe_topk_overlap", measure="rbo") is None
    hook.stop()
    summary = h.run()
    assert summary.errors == {"unreachable": 2}
    assert h.value("rag_probe_errors_total", reason="timeout") == 2
    assert h.value("rag_probe_errors_total", reason="unreachable") == 2
    # The baselines are untouched; the last comparison stays the pinning run's.
    assert all(b.jaccard == 1.0 for b in store.probes.baselines().values())


def test_an_endpoint_that_stays_down_is_one_warning_not_one_a_run(store, hook, caplog):
    h = Harness(store, hook.url)
    h.run()
    hook.mode = "status"
    with caplog.at_level("DEBUG", logger="rag_monitor.agent.probes"):
        for _ in range(3):
            h.run()
        hook.mode = "malformed"  # failing differently is news
        h.run()
        hook.mode = "ok"
        h.run()
    lines = [(r.levelname, r.getMessage().split(": ", 1)[1]) for r in caplog.records if r.getMessage().startswith("probe run")]
    assert lines == [
        ("WARNING", "2 of 2 probes failed (http_status 2); no overlap from them"),
        ("DEBUG", "2 of 2 probes failed (http_status 2); no overlap from them"),
        ("DEBUG", "2 of 2 probes failed (http_status 2); no overlap from them"),
        ("WARNING", "2 of 2 probes failed (malformed 2); no overlap from them"),
        ("INFO", "every probe answered again"),
    ]
    assert h.value("rag_probe_errors_total", reason="http_status") == 6  # every failure still counted


def test_one_failed_probe_leaves_the_others_compared(store, hook):
    h = Harness(store, hook.url)
    h.run()
    del hook.index["delivery address"]  # the hook now fails this probe (KeyError: connection closed)
    hook.index["refund window"] = ["a", "b", "c", "x"]
    summary = h.run()
    assert summary.compared == 1 and sum(summary.errors.values()) == 1
    assert h.value("rag_probe_topk_overlap", measure="jaccard") == pytest.approx(3 / 5)
    assert h.value("rag_probe_compared_probes") == 1


def test_pin_drops_the_baseline_of_a_probe_it_cannot_reach(store, hook):
    h = Harness(store, hook.url)
    h.run()
    del hook.index["delivery address"]
    pinned, failed = h.runner.pin()
    assert pinned == 1 and list(failed) == ["delivery"]
    assert set(store.probes.baselines()) == {PROBES[0].id}


def test_a_pin_during_a_run_wins_over_the_run(store, hook):
    h = Harness(store, hook.url)
    h.run()
    baseline = store.probes.baselines()[PROBES[0].id]
    hook.index["refund window"] = ["x", "y", "z", "w"]
    run = store.probes.start_run("slow-replica")
    store.probes.pin({PROBES[0].id: ("refund", 4, ["x", "y", "z", "w"])}, by="cli")
    from rag_monitor.store import Comparison

    stale = Comparison(PROBES[0].id, "refund", 4, ("x", "y", "z", "w"), 0.0, 0.0, baseline.pinned_at)
    assert store.probes.finish_run(run, [stale], errors=0) == 0
    assert store.probes.baselines()[PROBES[0].id].jaccard is None


def test_parse_documents():
    assert parse_documents(b'{"documents": [{"id": "a"}, {"id": 7}, {"id": "a"}, {"id": "b"}]}', 2) == ("a", "7")
    assert parse_documents(b'{"documents": []}', 5) == ()
    for bad in (b"[]", b'{"documents": {}}', b'{"documents": [{"id": ""}]}', b'{"documents": [{"id": true}]}', b"\xff"):
        with pytest.raises(ProbeError) as e:
            parse_documents(bad, 3)
        assert e.value.reason == "malformed"


def test_probe_sets_from_yaml_and_from_a_golden_export(tmp_path):
    yml = tmp_path / "probes.yaml"
    yml.write_text("k: 5\nprobes:\n  - name: refund\n    query: refund window\n    k: 3\n  - delivery address\n")
    probes = load_probe_set(yml, k=10)
    assert [(p.name, p.query, p.k) for p in probes] == [("refund", "refund window", 3), ("probe-2", "delivery address", 5)]
    assert load_probe_set(yml)[0].id == probes[0].id != Probe("refund", "refund window", 4).id
    golden = tmp_path / "golden.jsonl"
    golden.write_text('{"question": "a?"}\n{"question": "b?"}\n{"question": "a?"}\n\n{"question": "c?"}\n')
    assert [p.query for p in load_probe_set(golden, limit=2)] == ["a?", "b?"]
    for text, message in (("[]", "empty"), ("- {query: ''}", "no query"), ("- {query: q, k: 0}", "k must"),
                          ("- q\n- q", "duplicate"), ("{probes: [q], extra: 1}", "unknown keys"), ("a: [", "not YAML")):
        yml.write_text(text)
        with pytest.raises(ProbeSetError, match=message):
            load_probe_set(yml)
