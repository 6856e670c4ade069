"""``rag-monitor drift reference show|set``: the reference a signal uses, read from and set in the store.

What a reference spec means and how runs match its hours is pure arithmetic in
``rag_monitor.detectors.references``; this module is its store side.

    rows = reference_status(store, profiles)        # per signal: spec, who set it, items, complete
    version = set_reference(store, "intent", {"mode": "range", "start": t0, "end": t1}, capacity=500)
"""

from __future__ import annotations

import json
import time
from typing import Any

from rag_monitor.detectors.references import describe, is_complete, validate_spec
from rag_monitor.store import ReservoirItem


def reference_status(store, profiles) -> list[dict[str, Any]]:
    """What ``rag-monitor drift reference show`` prints: per signal, the reference in use."""
    out, seen = [], set()
    for profile in profiles:
        if profile.signal in seen:
            continue
        seen.add(profile.signal)
        custom = store.reservoirs.reference_spec(profile.signal)
        spec = custom or profile.default_reference()
        info = store.reservoirs.info(profile.signal, "reference")
        started = info.created_at if info is not None else None
        size = info.size if info is not None else 0
        out.append({"signal": profile.signal, "spec": spec, "set_by": "cli" if custom else "profile default",
                    "description": describe(spec, started), "version": info.version if info else None,
                    "items": size, "complete": is_complete(spec, started, size, time.time())})
    return out


def set_reference(store, signal: str, spec: dict[str, Any] | None, *, capacity: int, now: float | None = None) -> int:
    """Start a new reference version for ``signal`` defined by ``spec`` (None: the profile default).

    The current window is kept; for a time range, its items inside the range seed the new reference.
    Returns the new version.
    """
    now = time.time() if now is None else now
    spec = validate_spec(spec) if spec is not None else None
    info = store.reservoirs.info(signal, "reference")
    version = store.reservoirs.reset_reference(signal, info.model if info else None,
                                    source=json.dumps(spec) if spec else None, now=now, keep_current=True)
    if spec and spec["mode"] == "range":
        current = store.reservoirs.window(signal, "current", since=spec["start"])
        items = [ReservoirItem(trace_id, value=value if isinstance(value, str) else None,
                               vector=None if isinstance(value, str) else value.tolist(), added_at=t,
                               model=info.model if info else None)
                 for trace_id, value, t in zip(current.trace_ids, current.values, current.times) if t < spec["end"]]
        if items:
            store.reservoirs.add(signal, "reference", items, capacity=capacity, now=now)
    return version
