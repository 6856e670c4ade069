"""Trace and span ids, and the trick that lets feedback find a query's root span.

A feedback span must be a child of the query's root span, but the process that sends the
feedback (another request, another replica) knows only the trace id. So the SDK derives the
root span's id from the trace id::

    root_span_id(trace_id) == trace_id & 0xFFFF_FFFF_FFFF_FFFF   (1 if that is zero)

``RootDerivedIdGenerator`` makes the OTel SDK do that: ``Tracer.start_span`` calls
``generate_trace_id()`` only for a new root and then, on the same thread, immediately
``generate_span_id()``; the trace id is parked in a thread-local for that one call.
"""

from __future__ import annotations

import os
import random
import threading

from opentelemetry.sdk.trace.id_generator import IdGenerator

_SPAN_ID_MASK = (1 << 64) - 1
_TRACE_ID_LIMIT = 1 << 128


def root_span_id(trace_id: int) -> int:
    """The span id of the root span of ``trace_id`` (as the SDK creates it)."""
    return (trace_id & _SPAN_ID_MASK) or 1


def parse_trace_id(trace_id: str | int) -> int:
    """A trace id as 32 hex digits (any case) or an int; raises ValueError naming the value."""
    if isinstance(trace_id, bool):
        raise ValueError(f"trace_id={trace_id!r}: expected 32 hex digits or an int")
    if isinstance(trace_id, int):
        value = trace_id
    elif isinstance(trace_id, str) and len(trace_id) == 32:
        try:
            value = int(trace_id, 16)
        except ValueError:
            raise ValueError(f"trace_id={trace_id!r}: expected 32 hex digits") from None
    else:
        raise ValueError(f"trace_id={trace_id!r}: expected 32 hex digits or an int")
    if not 0 < value < _TRACE_ID_LIMIT:
        raise ValueError(f"trace_id={trace_id!r}: must be a non-zero 128-bit value")
    return value


def format_trace_id(trace_id: int) -> str:
    """32 lowercase hex digits, the form OTLP, Phoenix and the agent use."""
    return f"{trace_id:032x}"


class RootDerivedIdGenerator(IdGenerator):
    """Random ids, except that a new trace's root span gets ``root_span_id(trace_id)``."""

    def __init__(self) -> None:
        self._pending = threading.local()
        self._random = random.Random()  # its own state: the app may seed the global one
        if hasattr(os, "register_at_fork"):
            # A forked child must not repeat its parent's ids.
            os.register_at_fork(after_in_child=self._random.seed)

    def generate_trace_id(self) -> int:
        trace_id = self._random.getrandbits(128) or 1
        self._pending.trace_id = trace_id
        return trace_id

    def generate_span_id(self) -> int:
        pending = self._pending
        trace_id = getattr(pending, "trace_id", 0)
        if trace_id:
            pending.trace_id = 0
            return root_span_id(trace_id)
        return self._random.getrandbits(64) or 1

    def is_trace_id_random(self) -> bool:
        return True
