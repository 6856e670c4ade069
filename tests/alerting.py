"""A real Prometheus + Alertmanager on loopback, with a webhook receiver that records what arrives.

The rules are the shipped ones, generated from ``alerts/thresholds.yaml`` with second-long
windows and ``for:`` (``FAST_OVERRIDES``); the Alertmanager config is the shipped
``alerts/alertmanager.yml`` with every receiver's URL pointed at the webhook (the path is the
receiver's name) and second-long grouping timers. Point ``targets`` at anything that serves
``/metrics``: the fake endpoint below, or a real agent.

Usage::

    with MetricsEndpoint(registry) as endpoint, AlertingStack(tmp_path, [endpoint.target]) as stack:
        stack.prometheus.query("rag:triage")                 # [{'metric': {...}, 'value': [t, '1']}]
        alert = stack.webhook.wait_for_alert(lambda a: a["labels"]["alertname"] == "RagDriftDetected")
        alert["receiver"]                                    # 'ml-data'
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from rag_monitor.alerts.generate import load_thresholds, write_rule_files
from tests.services import free_port, require_binary, stop_process, wait_until

REPO = Path(__file__).resolve().parents[1]
ALERTS_DIR = REPO / "alerts"

# Second-long windows so an alert fires within seconds; every rule keeps its shape.
FAST_OVERRIDES: dict[str, Any] = {
    "faithfulness.window": "30s", "faithfulness.for": "2s", "faithfulness.min_scored": 5,
    "latency.window": "30s", "latency.p95_for": "2s", "latency.p99_for": "2s", "latency.min_queries": 5,
    "filter_false_exclusion.for": "2s",
    "regeneration.window": "30s", "regeneration.season": "1m", "regeneration.spread_window": "1m",
    "regeneration.min_queries": 5, "regeneration.for": "2s",
    "cost.window": "30s", "cost.for": "2s", "cost.min_queries": 5,
    "drift.for": "0s",
}


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


# --- webhook receiver ---------------------------------------------------------------------


class WebhookReceiver:
    """Collects Alertmanager webhook posts on loopback; ``alerts`` flattens them, newest last."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._cond:
                    receiver.posts.append((self.path.strip("/"), json.loads(body)))
                    receiver._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every post, with ``receiver`` (the URL path) and the post's ``status``."""
        with self._cond:
            return [{**alert, "receiver": path} for path, post in self.posts for alert in post.get("alerts", [])]

    def wait_for_alert(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
        """The first recorded alert that satisfies ``predicate``; TimeoutError listing what came."""
        found: list[dict[str, Any]] = []

        def match() -> bool:
            found[:] = [a for a in self.alerts if predicate(a)]
            return bool(found)

        try:
            wait_until(match, timeout=timeout, interval=0.2, what="an alert at the webhook")
        except TimeoutError as e:
            got = [(a["receiver"], a["status"], a["labels"]) for a in self.alerts]
            raise TimeoutError(f"{e}; received: {got}") from None
        return found[0]


# --- a hand-driven /metrics endpoint ------------------------------------------------------


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


# --- configuration ------------------------------------------------------------------------


def write_test_rules(dest: Path, overrides: Mapping[str, Any] | None = None) -> list[Path]:
    """The shipped rules regenerated from the shipped thresholds with ``overrides`` (FAST by default)."""
    thresholds = load_thresholds(ALERTS_DIR / "thresholds.yaml", FAST_OVERRIDES if overrides is None else overrides)
    return write_rule_files(dest, thresholds)


def write_prometheus_config(
    path: Path, targets: list[str], rule_files: list[Path], alertmanager: str | None = None, interval: str = "1s",
) -> Path:
    """A Prometheus config scraping ``targets`` (host:port) every ``interval``, evaluating ``rule_files``."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "rag-monitor", "static_configs": [{"targets": list(targets)}]}],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def alertmanager_test_config(
    webhook_url: str, source: Path = ALERTS_DIR / "alertmanager.yml",
    group_wait: str = "1s", group_interval: str = "1s", repeat_interval: str = "1h",
) -> dict[str, Any]:
    """The shipped Alertmanager config with every webhook URL at ``webhook_url/<receiver>``
    and short grouping timers on every route."""
    config = yaml.safe_load(source.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook_url}/{receiver['name']}"

    def shorten(route: dict[str, Any]) -> None:
        for key, value in (("group_wait", group_wait), ("group_interval", group_interval), ("repeat_interval", repeat_interval)):
            if key in route or route is config["route"]:
                route[key] = value
        for child in route.get("routes", []):
            shorten(child)

    shorten(config["route"])
    return config


# --- servers ------------------------------------------------------------------------------


class PrometheusServer:
    """Prometheus on loopback with a throwaway TSDB under ``root``."""

    def __init__(self, root: Path, config_file: Path) -> None:
        self.binary = require_binary("prometheus")
        self.root, self.config_file = root, config_file
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.root / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--rules.alert.resend-delay=1s", "--log.level=warn"],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {_log_tail(self.log)}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200

        try:
            wait_until(ready, timeout=timeout, what="Prometheus /-/ready")
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {_log_tail(self.log)}") from None

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant-query result vector: ``[{'metric': {...}, 'value': [ts, 'v']}]``."""
        body = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts as Prometheus sees them."""
        return _get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule; a bad rule reads 'err'."""
        groups = _get_json(f"{self.url}/api/v1/rules")["data"]["groups"]
        return [(r["name"], r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]]


class AlertmanagerServer:
    """Alertmanager on loopback, clustering off, state under ``root``."""

    def __init__(self, root: Path, config: Mapping[str, Any]) -> None:
        self.binary = require_binary("prometheus-alertmanager")
        self.root = root
        self.config_file = root / "alertmanager.yml"
        self.config_file.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"
        self.log = root / "alertmanager.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> None:
        (self.root / "am-data").mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config_file}", f"--storage.path={self.root / 'am-data'}",
             f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=warn"],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
        )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"alertmanager exited: {_log_tail(self.log)}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200

        wait_until(ready, timeout=timeout, what="Alertmanager /-/ready")

    def stop(self) -> None:
        if self.proc:
            stop_process(self.proc)

    def alerts(self) -> list[dict[str, Any]]:
        return _get_json(f"{self.url}/api/v2/alerts")


class AlertingStack:
    """Webhook receiver, Alertmanager (shipped routing) and Prometheus (shipped rules, fast
    overrides) scraping ``targets``; a context manager that stops everything it started."""

    def __init__(self, root: Path, targets: list[str], overrides: Mapping[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.targets = list(targets)
        self.overrides = overrides
        self.webhook = WebhookReceiver()
        self.alertmanager: AlertmanagerServer | None = None
        self.prometheus: PrometheusServer | None = None

    def __enter__(self) -> AlertingStack:
        self.webhook.__enter__()
        try:
            (self.root / "am").mkdir(parents=True, exist_ok=True)
            self.alertmanager = AlertmanagerServer(self.root / "am", alertmanager_test_config(self.webhook.url))
            self.alertmanager.start()
            rules = write_test_rules(self.root / "rules", self.overrides)
            config = write_prometheus_config(self.root / "prometheus.yml", self.targets, rules, self.alertmanager.address)
            self.prometheus = PrometheusServer(self.root, config)
            self.prometheus.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for server in (self.prometheus, self.alertmanager):
            if server is not None:
                server.stop()
        self.webhook.__exit__()
