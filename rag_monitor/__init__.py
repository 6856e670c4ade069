"""rag-monitor: production monitoring for retrieval-augmented generation.

What an app needs is three lines::

    import rag_monitor

    monitor = rag_monitor.init(service_name="support-bot", release="2026.11.30")
    with monitor.query("How do I cancel?", session_id="s1") as q:
        ...

``init`` and ``Monitor`` load the SDK (OpenTelemetry) on first use, so the agent's modules
that import only ``rag_monitor.semconv`` or ``rag_monitor.record`` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # keep in step with pyproject.toml

__all__ = ["Monitor", "__version__", "init"]

if TYPE_CHECKING:
    from rag_monitor.sdk import Monitor, init


def __getattr__(name: str) -> Any:
    if name in ("init", "Monitor"):
        from rag_monitor import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'rag_monitor' has no attribute {name!r}")
