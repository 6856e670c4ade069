"""Forwards redacted spans to Phoenix over OTLP/HTTP, in the background, bounded.

Ingest never waits on Phoenix: ``submit`` appends to a bounded deque (O(1)); when it is full
the oldest spans are dropped and counted. A worker thread posts batches; a failed post is
counted, logged at most once a minute, and not retried beyond one attempt, so a Phoenix that is
down or slow costs the agent nothing but the count.

Usage::

    forwarder = SpanForwarder("http://127.0.0.1:6006", encode=encode_export_request,
                              on_outcome=lambda outcome, n: ...)
    forwarder.start(); forwarder.submit(spans); forwarder.shutdown()
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


class SpanForwarder:
    def __init__(
        self,
        base_url: str,
        encode: Callable[[Sequence[Any]], bytes],
        on_outcome: Callable[[str, int], None],
        max_queue: int = 20_000,
        batch_size: int = 512,
        timeout_s: float = 5.0,
        headers: dict[str, str] | None = None,
    ):
        self.endpoint = base_url.rstrip("/") + "/v1/traces"
        self.encode = encode
        self.on_outcome = on_outcome
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._in_flight = 0
        self._thread: threading.Thread | None = None
        self._last_warning = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rag-monitor-phoenix-forwarder", daemon=True)
        self._thread.start()

    def submit(self, spans: Sequence[Any]) -> None:
        if not spans:
            return
        with self._cond:
            self._queue.extend(spans)
            overflow = len(self._queue) - self.max_queue
            for _ in range(max(0, overflow)):
                self._queue.popleft()
            self._cond.notify()
        if overflow > 0:
            self.on_outcome("dropped", overflow)

    def pending(self) -> int:
        return len(self._queue) + self._in_flight

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue and self._stopping:
                    return
                batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
                self._in_flight = len(batch)
            try:
                self._post(batch)
                self.on_outcome("sent", len(batch))
            except Exception as exc:  # noqa: BLE001 - Phoenix's trouble must never reach ingest
                self.on_outcome("failed", len(batch))
                now = time.monotonic()
                if now - self._last_warning > 60:
                    self._last_warning = now
                    log.warning("forwarding %d spans to %s failed: %s", len(batch), self.endpoint, exc)
            finally:
                self._in_flight = 0

    def _post(self, batch: list) -> None:
        request = urllib.request.Request(self.endpoint, data=self.encode(batch), headers=self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            if response.status >= 300:
                raise RuntimeError(f"HTTP {response.status}")

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything submitted so far was posted (or failed); True when drained."""
        deadline = time.monotonic() + timeout_s
        while self.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self.pending()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread:
            self._thread.join(timeout_s)
