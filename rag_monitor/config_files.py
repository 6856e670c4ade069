"""The configuration files the agent reads, with their defaults shipped inside the package.

Each file setting (``ingest_config``, ``redaction_rules``, ``price_table``, ``sampling_config``,
``detector_profiles``) takes one of:

- ``default`` (the default): the copy shipped in the package, so an agent installed from a
  wheel and started from any directory prices queries, detects drift and redacts;
- a path: that file; a missing file or one that does not parse stops the agent at start with
  a message naming the setting and the file (never silently ignored);
- empty: none (built-in limits and redaction rules, no prices, default sampling, no drift).

``rag_monitor/defaults/`` is the one source of every shipped config file: the agent's, the OTel
gateway's and the alerting ones (``alerts/``). The Helm chart's copies are generated from it
(``python helm/sync_files.py``); ``tests/collectors/test_shipped_defaults.py`` fails when another
copy appears. To change a default for one deployment, copy the file, edit it and point the setting
at it.

    path = config_path("price_table", settings.price_table)      # Path or None
    prices = load_config("price_table", settings.price_table, PriceTable.load, lambda: PriceTable([]))
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rag_monitor.settings import ENV_PREFIX

__all__ = ["CONFIG_FILES", "DEFAULTS_DIR", "SHIPPED", "ConfigFileError", "config_path", "load_config", "shipped_path"]

SHIPPED = "default"
DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"
CONFIG_FILES = {
    "ingest_config": "collectors/ingest.yaml",
    "redaction_rules": "collectors/redaction.yaml",
    "price_table": "collectors/prices.yaml",
    "sampling_config": "detectors/sampling.yaml",
    "detector_profiles": "detectors/profiles.yaml",
}
"""Setting -> the file's path under ``rag_monitor/defaults`` (and under the chart's ``files/``)."""

T = TypeVar("T")


class ConfigFileError(ValueError):
    """A configured file is missing or does not parse: the agent must not start."""


def shipped_path(setting: str) -> Path:
    return DEFAULTS_DIR / CONFIG_FILES[setting]


def _where(setting: str) -> str:
    return f"setting {setting} ({ENV_PREFIX}{setting.upper()})"


def config_path(setting: str, value: str) -> Path | None:
    """The file a setting names: the shipped copy for ``default``, None for empty."""
    if not value:
        return None
    if value == SHIPPED:
        return shipped_path(setting)
    path = Path(value)
    if not path.is_file():
        raise ConfigFileError(f"{_where(setting)}: file {value!r} not found (resolved to {path.resolve()})")
    return path


def load_config(setting: str, value: str, load: Callable[[Path], T], none: Callable[[], T]) -> T:
    """``load(path)`` of the file the setting names, ``none()`` when it names none; any error
    reading or parsing it becomes a ``ConfigFileError`` that names the setting and the file."""
    path = config_path(setting, value)
    if path is None:
        return none()
    try:
        return load(path)
    except Exception as exc:  # noqa: BLE001 - YAML, validation or I/O: all stop the agent the same way
        raise ConfigFileError(f"{_where(setting)}: cannot use {str(path)!r}: {type(exc).__name__}: {exc}") from exc
