"""A logger that says each kind of problem at most once per interval.

The SDK runs inside the app's hot path: a broken exporter or a bad document shape must not
flood the app's logs with one line per query.
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("rag_monitor.sdk")


class RateLimitedLogger:
    """``log.warning("export-failed", "export failed: %s", err)``: one line per key per interval."""

    def __init__(self, target: logging.Logger = logger, interval_s: float = 60.0) -> None:
        self._target = target
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def _admit(self, key: str) -> int | None:
        """The count suppressed since the last line, or None when this one is suppressed too."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._suppressed.pop(key, 0)

    def reset(self) -> None:
        """Forget what was said (tests use it to see each message again)."""
        with self._lock:
            self._last.clear()
            self._suppressed.clear()

    def warning(self, key: str, msg: str, *args: object, exc_info: bool = False) -> None:
        suppressed = self._admit(key)
        if suppressed is None:
            return
        if suppressed:
            msg += f" ({suppressed} similar messages suppressed)"
        self._target.warning(msg, *args, exc_info=exc_info)

    def internal_error(self, where: str) -> None:
        """Log the exception being handled: an SDK bug that the app must not see."""
        self.warning(
            f"internal:{where}", "rag_monitor: internal error in %s (the app is unaffected)", where, exc_info=True
        )


log = RateLimitedLogger()

EXPORT_THREAD_NAME = "rag-monitor-export"


class ExportThreadRateLimit(logging.Filter):
    """Rate-limits what a third-party exporter logs from the SDK's export thread only.

    With the agent down, the OTLP exporter logs every failed batch; the app's own exporters
    log through the same logger, so records from other threads pass untouched.
    """

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._last: dict[object, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName != EXPORT_THREAD_NAME:
            return True
        now = time.monotonic()
        with self._lock:
            last = self._last.get(record.msg)
            if last is not None and now - last < self._interval_s:
                return False
            self._last[record.msg] = now
            return True


_filtered: set[str] = set()
_filtered_lock = threading.Lock()


def rate_limit_export_thread_logs(logger_name: str) -> None:
    """Install ``ExportThreadRateLimit`` on a logger once per process."""
    with _filtered_lock:
        if logger_name not in _filtered:
            _filtered.add(logger_name)
            logging.getLogger(logger_name).addFilter(ExportThreadRateLimit())
