"""Neighbour-stability probes through real agents: two replicas on one store, the scheduled job, the CLI."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rag_monitor.cli import main as cli
from tests.probe_hook import RetrievalHook
from tests.services import wait_until

TOP4 = {
    "How many days do I have to ask for a refund?": ["refund-v2", "refund-faq", "returns", "shipping"],
    "Can I change my delivery address?": ["address", "shipping", "orders", "tracking"],
    "Which cards do you accept?": ["payments", "cards", "fees", "refund-v2"],
    "How do I close my account?": ["account-close", "account", "privacy", "fees"],
}


def scraped(agent, name: str, **labels: str) -> float | None:
    """One sample from the replica's real /metrics endpoint; None when absent."""
    for family in text_string_to_metric_families(agent.scrape()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None


@pytest.fixture
def hook():
    h = RetrievalHook({q: list(ids) for q, ids in TOP4.items()})
    yield h
    h.stop()


def test_a_reshuffled_index_drops_the_overlap_on_every_replica_and_a_pin_restores_it(start_agent, hook, tmp_path):
    probe_set = tmp_path / "probes.yaml"
    probe_set.write_text("k: 4\nprobes:\n" + "".join(f"  - query: {q}\n" for q in TOP4))
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    common = {"store_url": store_url, "probes_url": hook.url, "probes_path": str(probe_set), "probes_timeout_s": 5.0}
    a = start_agent(probes_interval_s=1.0, **common)  # runs the probe set on its schedule
    b = start_agent(probes_interval_s=3600.0, **common)

    def run_after(t: float) -> None:
        wait_until(lambda: (r := a.store.probes.latest_run()) is not None and r.started_at > t,
                   timeout=30, what="a probe run that started after the change")

    run_after(0)  # the first run pins every probe (no baseline yet) and agrees with itself
    assert a.agent.jobs.jobs["probes"].lease_s > 0
    assert not b.agent.jobs.run("probes")  # one replica at a time: a holds the lease
    for replica in (a, b):
        assert scraped(replica, "rag_probe_topk_overlap", measure="rbo") == 1.0
        assert scraped(replica, "rag_probe_compared_probes") == 4
    assert scraped(a, "rag_agent_job_last_success_timestamp_seconds", job="probes") is not None

    # An unannounced rebuild: two probes lose their last two documents to new ones, a third swaps
    # its top two. Jaccard: (2/6 + 2/6 + 1 + 1) / 4 = 2/3.
    hook.index["How many days do I have to ask for a refund?"] = ["refund-v2", "refund-faq", "new-1", "new-2"]
    hook.index["Can I change my delivery address?"] = ["address", "shipping", "new-3", "new-4"]
    hook.index["Which cards do you accept?"] = ["cards", "payments", "fees", "refund-v2"]
    changed = time.time()
    run_after(changed)
    p = 0.9  # RBO by hand, depth 4: the two replaced probes agree 1, 1, 2/3, 2/4; the swapped one 0, 1, 1, 1
    replaced = (1 - p) / p * (p + p**2 + 2 / 3 * p**3 + 0.5 * p**4) + 0.5 * p**4
    swapped = (1 - p) / p * (p**2 + p**3 + p**4) + p**4
    for replica in (a, b):  # the store's latest run, whichever replica ran it
        assert scraped(replica, "rag_probe_topk_overlap", measure="jaccard") == pytest.approx(2 / 3)
        assert scraped(replica, "rag_probe_topk_overlap", measure="rbo") == pytest.approx((2 * replaced + swapped + 1) / 4)
        assert scraped(replica, "rag_probe_changed_probes") == 3
        assert scraped(replica, "rag_probe_index_change_announced") == 0

    data_dir = ["--store-url", store_url]
    assert cli(["probes", "announce", "--for", "2h", "--note", "rebuild", *data_dir]) == 0
    assert scraped(b, "rag_probe_index_change_announced") == 1
    assert cli(["probes", "pin", "--url", hook.url, *data_dir, "--config", str(_config(tmp_path, probe_set))]) == 0
    pinned = time.time()
    run_after(pinned)
    for replica in (a, b):
        assert scraped(replica, "rag_probe_topk_overlap", measure="jaccard") == 1.0
        assert scraped(replica, "rag_probe_topk_overlap", measure="rbo") == 1.0
        assert scraped(replica, "rag_probe_changed_probes") == 0
    assert (scraped(a, "rag_probe_errors_total") or 0) == 0 and scraped(a, "rag_probe_runs_total") >= 3

    # The hook goes down: counted errors, and no overlap rather than a false "unstable" 0.
    hook.stop()
    down = time.time()
    run_after(down)
    wait_until(lambda: (scraped(a, "rag_probe_errors_total", reason="unreachable") or 0) >= 4, timeout=30,
               what="the failed probes to be counted")
    assert scraped(b, "rag_probe_topk_overlap", measure="rbo") is None
    assert scraped(b, "rag_probe_compared_probes") == 0


def _config(tmp_path, probe_set):
    config = tmp_path / "agent.yaml"
    config.write_text(f"probes_path: {probe_set}\nprobes_k: 4\n")
    return config


def test_probes_show_lists_each_probe(start_agent, hook, tmp_path, capsys):
    probe_set = tmp_path / "probes.yaml"
    probe_set.write_text("- name: refund\n  query: How many days do I have to ask for a refund?\n  k: 2\n")
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    config = tmp_path / "agent.yaml"
    config.write_text(f"probes_path: {probe_set}\n")
    a = start_agent(store_url=store_url, probes_url=hook.url, probes_path=str(probe_set), probes_interval_s=3600.0)
    assert cli(["probes", "show", "--config", str(config), "--store-url", store_url]) == 0
    assert "refund (k=2): no baseline yet" in capsys.readouterr().out
    assert a.agent.jobs.run("probes")
    assert cli(["probes", "show", "--config", str(config), "--store-url", store_url]) == 0
    out = capsys.readouterr().out
    assert "1 compared, 0 failed of 1" in out
    assert "refund (k=2): pinned" in out and "by auto [refund-v2, refund-faq]; run 1: jaccard 1.000, rbo 1.000" in out
    assert "How many days" not in out  # names, not queries (which may carry PII), are shown
