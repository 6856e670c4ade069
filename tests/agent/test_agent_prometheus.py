"""Real Prometheus scraping the agent: histogram_quantile resolves the true p95."""

from __future__ import annotations

import json
import random
import subprocess
import urllib.parse
import urllib.request

import pytest

import rag_monitor
from rag_monitor.alerts.metrics import LATENCY_BUCKETS
from tests.services import free_port, require_binary, stop_process, wait_until

pytestmark = pytest.mark.integration


def promql(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


def test_prometheus_p95_within_one_bucket(running_agent, tmp_path):
    prometheus = require_binary("prometheus")
    # A known latency distribution: log-normal around 300 ms, sent with explicit span times.
    rng = random.Random(7)
    latencies = sorted(rng.lognormvariate(-1.2, 0.6) for _ in range(400))
    true_p95 = latencies[int(0.95 * len(latencies)) - 1]

    # 400 queries in one batch: on a busy machine ingesting them takes longer than the SDK's 2 s default.
    monitor = rag_monitor.init(service_name="svc", endpoint=running_agent.otlp_url, release="r1", export_timeout_s=30)
    try:
        start = 1_700_000_000_000_000_000
        for i, seconds in enumerate(latencies):
            t0 = start + i * 10**9
            with monitor.query(f"q{i}", start_time_ns=t0) as q:
                q.answer("a")
                q.end(end_time_ns=t0 + int(seconds * 1e9))
        assert monitor.force_flush(10)
    finally:
        monitor.shutdown()
    wait_until(lambda: running_agent.metric("rag_query_duration_seconds_count", {"release": "r1", "variant": "production"}) == 400,
               timeout=20, what="400 queries in the agent")

    port = free_port()
    host, http_port = "127.0.0.1", running_agent.agent.settings.http_port
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: agent, static_configs: [{{targets: ['{host}:{http_port}']}}]}}]\n"
    )
    proc = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        expr = "histogram_quantile(0.95, sum by (le) (rag_query_duration_seconds_bucket))"
        wait_until(lambda: promql(port, expr), timeout=30, what="Prometheus to scrape the agent")
        estimate = float(promql(port, expr)[0]["value"][1])
    finally:
        stop_process(proc)
    # Within one bucket: the estimate lies in the bucket holding the true p95 or a neighbour.
    bounds = (0.0, *LATENCY_BUCKETS)
    index = next(i for i, b in enumerate(bounds) if b >= true_p95)
    assert bounds[max(0, index - 2)] <= estimate <= bounds[min(len(bounds) - 1, index + 1)], (true_p95, estimate)
