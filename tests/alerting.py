"""Real Prometheus and Alertmanager for the alert tests: the package's local alerting stack
(``rag_monitor.demo.services``, which the demo also runs) with the shipped rules regenerated
with second-long windows and ``for:`` (``FAST_OVERRIDES``), plus a hand-driven ``/metrics``.

Missing binaries go through ``require``: a failure under ``CI=true``, a skip elsewhere.

Usage::

    with MetricsEndpoint(registry) as endpoint, AlertingStack(tmp_path, [endpoint.target]) as stack:
        stack.prometheus.query("rag:triage")                 # [{'metric': {...}, 'value': [t, '1']}]
        alert = stack.webhook.wait_for_alert(lambda a: a["labels"]["alertname"] == "RagDriftDetected")
        alert["receiver"]                                    # 'ml-data'
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rag_monitor.demo import services
from rag_monitor.demo.services import alertmanager_config as alertmanager_test_config  # noqa: F401 (re-exported)
from tests.services import free_port, require

ALERTS_DIR = services.alerts_dir()

FAST_OVERRIDES: dict[str, Any] = {
    "faithfulness.window": "30s", "faithfulness.for": "2s", "faithfulness.min_scored": 5,
    "latency.window": "30s", "latency.p95_for": "2s", "latency.p99_for": "2s", "latency.min_queries": 5,
    "filter_false_exclusion.for": "2s",
    "regeneration.window": "30s", "regeneration.season": "1m",
    "regeneration.min_queries": 5, "regeneration.for": "2s",
    "cost.window": "30s", "cost.for": "2s", "cost.min_queries": 5,
    "drift.for": "0s", "triage.settle": "20s",
}


def AlertingStack(root: Path, targets: list[str], overrides: Mapping[str, Any] | None = None) -> services.AlertingStack:  # noqa: N802
    """The package's stack with ``FAST_OVERRIDES`` by default; requires both binaries."""
    require(services.AlertingStack.available(), "Debian's prometheus and prometheus-alertmanager")
    return services.AlertingStack(root, targets, FAST_OVERRIDES if overrides is None else overrides)


class MetricsEndpoint:
    """Serves ``generate_latest(registry)`` at ``/metrics`` on loopback; ``target`` is host:port."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.target = f"127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> MetricsEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
