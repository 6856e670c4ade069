"""The agent's and the CLI's logging: one line per event that matters, text or JSON.

At INFO the agent logs its start, stop, configuration, failing jobs and dropped data, once
each; libraries' routine lines (APScheduler's "Running job ... executed successfully" every
tick, Alembic's migration steps and plugin set-up on every CLI command) show at DEBUG only.
``log_format: json`` writes one JSON object per line for log collectors::

    configure_logging("INFO", "json")
    # {"time": "2026-12-01T10:58:35.881Z", "level": "INFO", "logger": "rag_monitor.agent.service", "message": "..."}
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "QUIET_LIBRARIES", "JsonFormatter", "configure_logging", "check_log_settings"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_LIBRARIES = ("apscheduler", "alembic")
"""Loggers whose INFO lines are routine: shown only when the level is DEBUG."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ms), level, logger, message, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (tests and callers may swap it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def check_log_settings(level: str, fmt: str) -> tuple[int, str]:
    """The numeric level and the format, or ValueError naming the setting and its choices."""
    name = str(level).strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(f"setting log_level: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    fmt = str(fmt).strip().lower()
    if fmt not in LOG_FORMATS:
        raise ValueError(f"setting log_format: {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    return getattr(logging, name), fmt


def configure_logging(level: str = "INFO", fmt: str = "text", stream=None) -> None:
    """Root logger at ``level`` with one handler on ``stream`` (default: stderr), replacing any
    earlier one of ours."""
    numeric, fmt = check_log_settings(level, fmt)
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_rag_monitor", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler._rag_monitor = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(numeric)
    # Their warnings and errors (a job raising, a failed migration) still show.
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
