"""A small process manager for the demo: Prometheus, Alertmanager and Phoenix on loopback.

Each server runs on a free loopback port with its state under one directory and is stopped
when the ``with`` block ends. The rules are the shipped ones (``rag_monitor/defaults/alerts/thresholds.yaml``)
regenerated with the caller's overrides (second-long windows for the demo); the Alertmanager
config is the shipped ``alertmanager.yml`` beside it with every receiver pointed at a webhook
receiver in this process, which records what arrives::

    with AlertingStack(root, targets=["127.0.0.1:8080"], overrides=DEMO_OVERRIDES) as stack:
        stack.prometheus.query("rag:triage")
        stack.webhook.wait_for_alert(lambda a: a["labels"]["alertname"] == "RagDriftDetected")

    with PhoenixServer(root / "phoenix") as phoenix:
        phoenix.url        # 'http://127.0.0.1:41234'

``find_binary`` says whether a server can run at all; the demo skips what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROMETHEUS = "prometheus"
ALERTMANAGER = ("prometheus-alertmanager", "alertmanager")  # Debian's name first


def alerts_dir() -> Path:
    """The shipped alerting configuration (``rag_monitor/defaults/alerts``: the thresholds the
    rules are generated from, ``alertmanager.yml``; the Helm chart carries the same rules)."""
    from rag_monitor.alerts.thresholds import ALERTS_DIR

    if not (ALERTS_DIR / "thresholds.yaml").exists():
        raise FileNotFoundError(f"{ALERTS_DIR}/thresholds.yaml not found: the installed package lacks its shipped defaults")
    return ALERTS_DIR


def find_binary(*names: str) -> str | None:
    """The first of ``names`` on PATH, or None."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "", interval: float = 0.1) -> None:
    """Poll ``predicate`` (exceptions count as not yet) until true; TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except RuntimeError:
            raise  # a server that exited will not become ready
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or predicate}")


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _log_tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


class _Process:
    """A child process logging to a file, stopped with SIGTERM then SIGKILL."""

    name = "server"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.log = self.root / f"{self.name}.log"
        self.proc: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], env: Mapping[str, str] | None = None) -> None:
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(env) if env else None)

    def _wait_http(self, url: str, timeout: float) -> None:
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {_log_tail(self.log)}")
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200

        try:
            wait_until(ready, timeout, f"{self.name} at {url}", interval=0.2)
        except TimeoutError as exc:
            self.stop()
            raise TimeoutError(f"{exc}: {_log_tail(self.log)}") from None

    def stop(self, timeout: float = 10.0) -> None:
        stop_process(self.proc, timeout)

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- webhook receiver ---------------------------------------------------------------------


class WebhookReceiver:
    """Collects Alertmanager webhook posts on loopback; ``alerts`` flattens them, oldest first."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    post = json.loads(body)
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._cond:
                    receiver.posts.append((self.path.strip("/"), post))
                    receiver._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-webhook", daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every post, with ``receiver`` (the URL path) and its ``status``."""
        with self._cond:
            return [{**alert, "receiver": path} for path, post in self.posts for alert in post.get("alerts", [])]

    def wait_for_alert(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0) -> dict[str, Any]:
        """The first recorded alert that satisfies ``predicate``; TimeoutError listing what came."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [a for a in self.alerts if predicate(a)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    got = [(a["receiver"], a["status"], a["labels"].get("alertname")) for a in self.alerts]
                    raise TimeoutError(f"no matching alert within {timeout:.0f}s; received: {got}")
                self._cond.wait(min(left, 0.5))


# --- configuration ------------------------------------------------------------------------


def write_rules(dest: Path, overrides: Mapping[str, Any] | None = None) -> list[Path]:
    """The shipped rules regenerated from the shipped thresholds with ``overrides``."""
    from rag_monitor.alerts.generate import load_thresholds, write_rule_files

    thresholds = load_thresholds(alerts_dir() / "thresholds.yaml", overrides or {})
    return write_rule_files(dest, thresholds)


def write_prometheus_config(
    path: Path, targets: list[str], rule_files: list[Path], alertmanager: str | None = None, interval: str = "1s",
) -> Path:
    """A Prometheus config scraping ``targets`` (host:port) every ``interval``, evaluating ``rule_files``."""
    import yaml

    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": "rag-monitor", "static_configs": [{"targets": list(targets)}]}],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def alertmanager_config(
    webhook_url: str, source: Path | None = None,
    group_wait: str = "1s", group_interval: str = "1s", repeat_interval: str = "1h",
) -> dict[str, Any]:
    """The shipped Alertmanager config with every webhook at ``webhook_url/<receiver>`` and short timers."""
    import yaml

    config = yaml.safe_load((source or alerts_dir() / "alertmanager.yml").read_text())
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


class PrometheusServer(_Process):
    """Prometheus on loopback with its TSDB under ``root``."""

    name = "prometheus"

    def __init__(self, root: Path, config_file: Path, binary: str | None = None) -> None:
        super().__init__(root)
        self.binary = binary or find_binary(PROMETHEUS)
        if not self.binary:
            raise FileNotFoundError("prometheus is not installed (apt-get install prometheus)")
        self.config_file = config_file
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        self._spawn([
            self.binary, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--rules.alert.resend-delay=1s", "--log.level=warn",
        ])
        self._wait_http(f"{self.url}/-/ready", timeout)
        return self

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant-query result vector: ``[{'metric': {...}, 'value': [ts, 'v']}]``."""
        body = get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
        if body.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed: {body}")
        return body["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts as Prometheus sees them."""
        return get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]

    def rule_health(self) -> list[tuple[str, str, str]]:
        """(rule name, health, last error) of every loaded rule."""
        groups = get_json(f"{self.url}/api/v1/rules")["data"]["groups"]
        return [(r["name"], r["health"], r.get("lastError", "")) for g in groups for r in g["rules"]]


class AlertmanagerServer(_Process):
    """Alertmanager on loopback, clustering off, state under ``root``."""

    name = "alertmanager"

    def __init__(self, root: Path, config: Mapping[str, Any], binary: str | None = None) -> None:
        import yaml

        super().__init__(root)
        self.binary = binary or find_binary(*ALERTMANAGER)
        if not self.binary:
            raise FileNotFoundError("Alertmanager is not installed (apt-get install prometheus-alertmanager)")
        self.config_file = self.root / "alertmanager.yml"
        self.config_file.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.address}"

    def start(self, timeout: float = 30.0) -> AlertmanagerServer:
        (self.root / "data").mkdir(exist_ok=True)
        self._spawn([
            self.binary, f"--config.file={self.config_file}", f"--storage.path={self.root / 'data'}",
            f"--web.listen-address={self.address}", "--cluster.listen-address=", "--log.level=warn",
        ])
        self._wait_http(f"{self.url}/-/ready", timeout)
        return self

    def alerts(self) -> list[dict[str, Any]]:
        return get_json(f"{self.url}/api/v2/alerts")


class AlertingStack:
    """Webhook receiver, Alertmanager (shipped routing) and Prometheus (shipped rules with
    ``overrides``) scraping ``targets``; a context manager that stops everything it started."""

    def __init__(self, root: Path, targets: list[str], overrides: Mapping[str, Any] | None = None, interval: str = "1s") -> None:
        self.root = Path(root)
        self.targets = list(targets)
        self.overrides = overrides
        self.interval = interval
        self.webhook = WebhookReceiver()
        self.alertmanager: AlertmanagerServer | None = None
        self.prometheus: PrometheusServer | None = None

    @staticmethod
    def available() -> bool:
        return bool(find_binary(PROMETHEUS) and find_binary(*ALERTMANAGER))

    def __enter__(self) -> AlertingStack:
        self.webhook.__enter__()
        try:
            self.alertmanager = AlertmanagerServer(self.root / "alertmanager", alertmanager_config(self.webhook.url)).start()
            rules = write_rules(self.root / "rules", self.overrides)
            config = write_prometheus_config(
                self.root / "prometheus.yml", self.targets, rules, self.alertmanager.address, self.interval
            )
            self.prometheus = PrometheusServer(self.root / "prometheus", config).start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for server in (self.prometheus, self.alertmanager):
            if server is not None:
                server.stop()
        self.webhook.__exit__()


def _lost_a_port(startup_error: str) -> bool:
    """Whether a server's startup failed because its port was taken (gRPC's or uvicorn's words)."""
    return "Failed to bind to address" in startup_error or "address already in use" in startup_error.lower()


class PhoenixServer(_Process):
    """Arize Phoenix (``phoenix serve``) on loopback, its SQLite under ``root`` or the PostgreSQL
    database at ``database_url`` (``postgresql://...``; needs ``asyncpg``); about 10 s to start
    (minutes on a busy machine: its migrations run first)."""

    name = "phoenix"

    def __init__(self, root: Path, database_url: str | None = None) -> None:
        super().__init__(root)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url

    @staticmethod
    def available() -> bool:
        import importlib.util

        return importlib.util.find_spec("phoenix") is not None

    # Phoenix binds its ports only after its migrations (seconds to minutes), so a free port
    # picked before it starts can meanwhile become the local port of an outgoing connection:
    # free ports come from the ephemeral range. Start again on fresh ports when that happens.
    BIND_ATTEMPTS = 3

    def start(self, timeout: float = 300.0) -> PhoenixServer:
        attempt = 1
        while True:
            try:
                self._start_once(timeout)
                return self
            except RuntimeError as exc:
                if attempt == self.BIND_ATTEMPTS or not _lost_a_port(str(exc)):
                    raise
            attempt += 1
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"

    def _start_once(self, timeout: float) -> None:
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(self.root),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            # Its gRPC port would bind *:4317 by default and clash with a collector.
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        if self.database_url:
            env["PHOENIX_SQL_DATABASE_URL"] = self.database_url
        self._spawn([sys.executable, "-m", "phoenix.server.main", "serve"], env)
        self._wait_http(f"{self.url}/healthz", timeout)

    def __enter__(self) -> PhoenixServer:
        return self.start()
