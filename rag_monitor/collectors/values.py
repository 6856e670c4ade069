"""Reading span attribute values: JSON strings, numbers, the query and answer in their many shapes."""

from __future__ import annotations

import json
from typing import Any

from rag_monitor import semconv as sc
from rag_monitor.collectors.otlp import Span


def json_object(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def optional_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def as_float(value: Any) -> float | None:
    if type(value) is float:
        return value
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def as_int(value: Any) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        return 0


def string_list(value: Any) -> list[str]:
    value = json_object(value)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)] if value else []


def message_text(messages: Any, role: str, last: bool) -> str | None:
    """Text of the first/last message with ``role`` in a GenAI or OpenInference messages JSON."""
    messages = json_object(messages)
    if not isinstance(messages, list):
        return None
    chosen = [m for m in messages if isinstance(m, dict) and m.get("role") == role]
    if not chosen:
        return None
    message = chosen[-1] if last else chosen[0]
    if isinstance(message.get("content"), str):
        return message["content"]
    parts = message.get("parts") or []
    texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)]
    return "".join(texts) if texts else None


def oi_messages_text(attrs: dict[str, Any], prefix: str, role: str, last: bool) -> str | None:
    """OpenInference flattened messages: ``llm.output_messages.{i}.message.role|content``."""
    indexes = sorted(
        int(k[len(prefix) + 1 : -len(".message.role")])
        for k, v in attrs.items()
        if k.startswith(prefix + ".") and k.endswith(".message.role") and v == role and k[len(prefix) + 1 : -len(".message.role")].isdigit()
    )
    if not indexes:
        return None
    content = attrs.get(f"{prefix}.{indexes[-1] if last else indexes[0]}.{sc.MESSAGE_CONTENT}")
    return content if isinstance(content, str) else None


def input_text(value: Any, settings: Any) -> str:
    parsed = json_object(value)
    if isinstance(parsed, dict):
        for key in settings.query_input_keys:
            if isinstance(parsed.get(key), str):
                return parsed[key]
        strings = [v for v in parsed.values() if isinstance(v, str)]
        return strings[0] if len(strings) == 1 else as_text(value)
    return as_text(value)


def output_text(value: Any, settings: Any) -> str:
    parsed = json_object(value)
    if isinstance(parsed, dict):
        for key in settings.answer_output_keys:
            if isinstance(parsed.get(key), str):
                return parsed[key]
    return as_text(value)


def chat_query(span: Span) -> str:
    a = span.attributes
    return (
        message_text(a.get(sc.GEN_AI_INPUT_MESSAGES), "user", last=True)
        or oi_messages_text(a, sc.LLM_INPUT_MESSAGES, "user", last=True)
        or as_text(a.get(sc.GEN_AI_PROMPT))
    )


def chat_answer(span: Span) -> str:
    a = span.attributes
    return (
        message_text(a.get(sc.GEN_AI_OUTPUT_MESSAGES), "assistant", last=True)
        or oi_messages_text(a, sc.LLM_OUTPUT_MESSAGES, "assistant", last=True)
        or as_text(a.get(sc.GEN_AI_COMPLETION))
    )
