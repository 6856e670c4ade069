"""SDK settings: what content the spans capture and where they are exported.

Every field names the environment variable that sets it; precedence is argument, then
environment, then default (as in OpenTelemetry and OpenInference's ``TraceConfig``)::

    CaptureConfig(hide_inputs=True)          # argument wins
    # RAG_MONITOR_MAX_STRING_LENGTH=2000     # environment, when no argument
    CaptureConfig().max_string_length        # -> 2000, else the default 8192
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

# --- environment variables ------------------------------------------------------------

RAG_MONITOR_DISABLED = "RAG_MONITOR_DISABLED"
"""``1``/``true``: every SDK call is a no-op (no TracerProvider is created)."""
RAG_MONITOR_ENDPOINT = "RAG_MONITOR_ENDPOINT"
"""Base URL of the agent's OTLP/HTTP receiver, e.g. ``http://agent:4318``."""
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
"""The standard OTel variable, read after ``RAG_MONITOR_ENDPOINT``."""
RAG_MONITOR_TOKEN = "RAG_MONITOR_TOKEN"
"""Bearer token sent as ``Authorization: Bearer <token>``."""
RAG_MONITOR_EXPORT_TIMEOUT = "RAG_MONITOR_EXPORT_TIMEOUT"
"""Seconds one export (retries included) may take before it is counted as failed."""
RAG_MONITOR_MAX_QUEUE_SIZE = "RAG_MONITOR_MAX_QUEUE_SIZE"
RAG_MONITOR_MAX_EXPORT_BATCH_SIZE = "RAG_MONITOR_MAX_EXPORT_BATCH_SIZE"
RAG_MONITOR_SCHEDULE_DELAY = "RAG_MONITOR_SCHEDULE_DELAY"
"""Seconds between exports of a partly filled batch."""
RAG_MONITOR_HIDE_INPUTS = "RAG_MONITOR_HIDE_INPUTS"
RAG_MONITOR_HIDE_OUTPUTS = "RAG_MONITOR_HIDE_OUTPUTS"
RAG_MONITOR_HIDE_DOCUMENT_CONTENT = "RAG_MONITOR_HIDE_DOCUMENT_CONTENT"
RAG_MONITOR_HIDE_EMBEDDING_VECTORS = "RAG_MONITOR_HIDE_EMBEDDING_VECTORS"
RAG_MONITOR_HIDE_EMBEDDING_TEXT = "RAG_MONITOR_HIDE_EMBEDDING_TEXT"
RAG_MONITOR_MAX_STRING_LENGTH = "RAG_MONITOR_MAX_STRING_LENGTH"
"""Strings longer than this are cut (0 = never); the cut keys go in ``rag.truncated``."""

DEFAULT_ENDPOINT = "http://127.0.0.1:4318"
TRACES_PATH = "/v1/traces"
REDACTED = "__REDACTED__"
"""OpenInference's placeholder for hidden text. The SDK no longer sends it: hidden content is
left out and the root span lists what was hidden in ``rag.content.hidden``."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of {sorted(_TRUE | _FALSE - {''})}")


def _parse_number(name: str, raw: str, kind: type) -> Any:
    try:
        value = kind(raw.strip())
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a {kind.__name__}") from None
    if value < 0:
        raise ValueError(f"{name}={raw!r}: must not be negative")
    return value


def env_flag(name: str, default: bool = False) -> bool:
    """A boolean environment variable; an unparseable value raises with the value."""
    raw = os.environ.get(name)
    return default if raw is None else _parse_bool(name, raw)


def _resolve_fields(instance: Any) -> None:
    """Fill every ``None`` field from its environment variable, else its default."""
    for f in dataclasses.fields(instance):
        if getattr(instance, f.name) is not None:
            value = getattr(instance, f.name)
            if f.type in ("int", "float") and value < 0:
                raise ValueError(f"{type(instance).__name__}.{f.name}={value!r}: must not be negative")
            continue
        env, default = f.metadata["env"], f.metadata["default"]
        raw = os.environ.get(env)
        if raw is None:
            value = default
        elif f.type == "bool":
            value = _parse_bool(env, raw)
        elif f.type == "int":
            value = _parse_number(env, raw, int)
        elif f.type == "float":
            value = _parse_number(env, raw, float)
        else:
            value = raw
        object.__setattr__(instance, f.name, value)


def _setting(env: str, default: Any) -> Any:
    return field(default=None, metadata={"env": env, "default": default})


@dataclass(frozen=True)
class CaptureConfig:
    """What content the spans carry. ``None`` means: environment variable, else default.

    >>> CaptureConfig(hide_document_content=True, max_string_length=500)
    """

    hide_inputs: bool = _setting(RAG_MONITOR_HIDE_INPUTS, False)
    """The query (root ``input.value``) and stage inputs such as a rewritten query."""
    hide_outputs: bool = _setting(RAG_MONITOR_HIDE_OUTPUTS, False)
    """The answer (root ``output.value``) and stage outputs."""
    hide_document_content: bool = _setting(RAG_MONITOR_HIDE_DOCUMENT_CONTENT, False)
    hide_embedding_vectors: bool = _setting(RAG_MONITOR_HIDE_EMBEDDING_VECTORS, False)
    hide_embedding_text: bool = _setting(RAG_MONITOR_HIDE_EMBEDDING_TEXT, False)
    max_string_length: int = _setting(RAG_MONITOR_MAX_STRING_LENGTH, 8192)

    def __post_init__(self) -> None:
        _resolve_fields(self)
        hidden = (("query", self.hide_inputs), ("answer", self.hide_outputs), ("documents", self.hide_document_content))
        object.__setattr__(self, "_hidden", tuple(name for name, hide in hidden if hide))

    @property
    def hidden_content(self) -> tuple[str, ...]:
        """Which of ``query``, ``answer``, ``documents`` this configuration hides (``rag.content.hidden``)."""
        return self._hidden  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ExportConfig:
    """Where and how spans leave the process. ``None`` means: environment, else default."""

    endpoint: str = _setting(RAG_MONITOR_ENDPOINT, None)
    """Base URL (``/v1/traces`` is appended) or the full traces URL."""
    token: str = _setting(RAG_MONITOR_TOKEN, "")
    export_timeout_s: float = _setting(RAG_MONITOR_EXPORT_TIMEOUT, 2.0)
    max_queue_size: int = _setting(RAG_MONITOR_MAX_QUEUE_SIZE, 2048)
    max_export_batch_size: int = _setting(RAG_MONITOR_MAX_EXPORT_BATCH_SIZE, 512)
    schedule_delay_s: float = _setting(RAG_MONITOR_SCHEDULE_DELAY, 1.0)

    def __post_init__(self) -> None:
        _resolve_fields(self)
        if self.endpoint is None:
            object.__setattr__(self, "endpoint", os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT) or DEFAULT_ENDPOINT)
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint={self.endpoint!r}: expected an http:// or https:// URL")
        if self.max_queue_size < 1 or self.max_export_batch_size < 1:
            raise ValueError(
                f"max_queue_size={self.max_queue_size!r}, max_export_batch_size={self.max_export_batch_size!r}:"
                " both must be at least 1"
            )

    @property
    def traces_url(self) -> str:
        """The OTLP/HTTP traces URL: the endpoint with ``/v1/traces`` unless it has it."""
        base = self.endpoint.rstrip("/")
        return base if base.endswith(TRACES_PATH) else base + TRACES_PATH

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}
