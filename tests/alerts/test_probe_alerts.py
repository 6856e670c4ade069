"""Neighbour stability through real servers: a retrieval hook -> agent (probe job) -> Prometheus (the
shipped rule) -> Alertmanager -> webhook. An announced rebuild stays quiet until the announcement
ends; then it pages as drift (no release); a re-pin resolves it."""

from __future__ import annotations

import time

import pytest
import yaml

from rag_monitor.agent.probes import HttpRetriever, ProbeRunner, load_probe_set
from tests.alerting import FAST_OVERRIDES, AlertingStack
from tests.probe_hook import RetrievalHook
from tests.services import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INDEX = {f"question {n}": [f"doc-{n}-{i}" for i in range(4)] for n in range(5)}
OVERLAP_ALERT = "RagNeighbourOverlapDropped"
PENDING_OR_FIRING = f'ALERTS{{alertname="{OVERLAP_ALERT}"}}'


def test_an_unannounced_reshuffle_pages_an_announced_one_waits_and_a_pin_resolves(start_agent, tmp_path):
    probe_set = tmp_path / "probes.yaml"
    probe_set.write_text(yaml.safe_dump({"k": 4, "probes": list(INDEX)}))
    hook = RetrievalHook({q: list(ids) for q, ids in INDEX.items()})
    try:
        agent = start_agent(probes_url=hook.url, probes_path=str(probe_set), probes_interval_s=0.5)
        agent.store.releases.note("support-bot", "r1", time.time() - 86400)  # no recent release: triage drift
        overrides = {**FAST_OVERRIDES, "neighbour_stability.for": "2s"}
        with AlertingStack(tmp_path / "stack", [f"127.0.0.1:{agent.agent.settings.http_port}"], overrides) as stack:
            prom = stack.prometheus
            wait_until(lambda: prom.query('rag_probe_topk_overlap{measure="rbo"} == 1'), timeout=60,
                       what="the pinned probes in Prometheus")
            # A planned rebuild, announced for a few seconds: every probe loses half its top-4.
            agent.store.probes.announce(time.time() + 15, "planned rebuild")
            for q, ids in hook.index.items():
                ids[2:] = [f"{q}-new-1", f"{q}-new-2"]
            wait_until(lambda: prom.query('rag_probe_topk_overlap{measure="rbo"} < 0.9 and on () '
                                          'rag_probe_index_change_announced == 1'), timeout=60,
                       what="the low overlap while the change is announced")
            assert prom.query(PENDING_OR_FIRING) == []  # neither pending nor firing: held off by the announcement
            alert = stack.webhook.wait_for_alert(
                lambda a: a["status"] == "firing" and a["labels"]["alertname"] == OVERLAP_ALERT, timeout=90)
            assert agent.store.probes.announced_until() is None  # it fired only once the announcement ended
            assert alert["labels"]["triage"] == "drift" and alert["receiver"] == "ml-data"
            assert alert["annotations"]["changed"].startswith("5 of 5 probes changed")
            assert "rag-monitor probes pin" in alert["annotations"]["runbook"]
            # `rag-monitor probes pin` after the intended change:
            retriever = HttpRetriever(hook.url)
            try:
                ProbeRunner(agent.store.probes, load_probe_set(probe_set, k=4), retriever).pin()
            finally:
                retriever.close()
            resolved = stack.webhook.wait_for_alert(
                lambda a: a["status"] == "resolved" and a["labels"]["alertname"] == OVERLAP_ALERT, timeout=90)
            assert resolved["labels"]["triage"] == "drift"
    finally:
        hook.stop()
