"""One quick demo run for the dashboard and report tests, with a real Prometheus and Alertmanager."""

from __future__ import annotations

import io
import json
import math
import time
import urllib.parse
import urllib.request

import pytest

from rag_monitor import dashboard
from tests.services import require

# What Grafana substitutes before it sends a query: a rate window for the demo's 1 s scrapes,
# and the `release` variable's "All".
VARIABLES = {"$__rate_interval": "20s", "$release": ".*"}


def substitute(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def prometheus_range(url: str, promql: str, start: float, end: float) -> list:
    """The series a time-series panel would draw over [start, end], keeping only finite points."""
    query = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": 2})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{query}", timeout=20) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", (promql, body)
    series = []
    for s in body["data"]["result"]:
        values = [float(v) for _, v in s["values"] if math.isfinite(float(v))]
        if values:
            series.append({"metric": s["metric"], "values": values})
    return series


@pytest.fixture(scope="package")
def demo_run(tmp_path_factory):
    """The quick demo; while its Prometheus still runs, every dashboard query's result."""
    from rag_monitor.demo.run import DemoOptions, run_demo
    from rag_monitor.demo.services import AlertingStack

    require(AlertingStack.available(), "prometheus and prometheus-alertmanager binaries")
    exprs = sorted({expr for _, expr in dashboard.queries(json.loads(dashboard.DASHBOARD_FILE.read_text()))})
    answers: dict[str, list] = {}

    def query_every_panel(result) -> None:
        # Over the whole run, as a dashboard showing its time range would; recording rules may
        # need a few more evaluations after the traffic.
        deadline = time.monotonic() + 60
        while True:
            answers.update({e: prometheus_range(result.prometheus_url, substitute(e), started, time.time()) for e in exprs})
            if all(answers.values()) or time.monotonic() > deadline:
                return
            time.sleep(2)

    started = time.time()
    root = tmp_path_factory.mktemp("demo")
    result = run_demo(DemoOptions(quick=True, fresh=True, phoenix=False, data_dir=root / "demo", progress=None,
                                  out=io.StringIO(), before_stop=query_every_panel))
    return result, answers


