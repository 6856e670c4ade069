"""The oracle's delivery itself: what it sends, in which order, around which waits."""

from __future__ import annotations

from rag_monitor.simulate import simulate
from tests.oracle.harness import _runs, hold_back


def _posts(replicas: int) -> list[tuple[int, list]]:
    traffic = simulate(seed=12, queries=100)
    return [(replica, spans) for batch in traffic.phases[0] for replica, spans in _runs(batch, replicas)]


def test_no_trace_waits_for_its_root_over_a_harness_wait():
    posts = _posts(2)
    sent = hold_back(posts)
    spans_in = sorted((s.context.trace_id, s.context.span_id) for _, spans in posts for s in spans)
    spans_out = sorted((s.context.trace_id, s.context.span_id) for _, spans, _ in sent for s in spans)
    assert spans_out == spans_in  # every span once

    waits = 0
    first_seen: dict[int, int] = {}  # trace id -> waits before its first span was posted
    for replica, spans, wait in sent:
        assert all(s.context.trace_id % 2 == replica for s in spans)  # still routed by trace id
        for span in spans:
            trace = span.context.trace_id
            first_seen.setdefault(trace, waits)
            if span.parent is None:
                assert first_seen[trace] == waits, f"trace {trace:x} waited for its root over a harness wait"
        waits += wait
    # the unmodified delivery would have made some traces wait (else the test proves nothing) ...
    raw_waits, raw_first, crossing = 0, {}, 0
    for _, spans in posts:
        for span in spans:
            raw_first.setdefault(span.context.trace_id, raw_waits)
            crossing += span.parent is None and raw_first[span.context.trace_id] != raw_waits
        raw_waits += any(s.parent is None for s in spans)
    assert crossing > 0
    # ... and traces still arrive over more than one request (assembly across requests stays tested).
    requests_per_trace: dict[int, int] = {}
    for _, spans, _ in sent:
        for trace in {s.context.trace_id for s in spans}:
            requests_per_trace[trace] = requests_per_trace.get(trace, 0) + 1
    assert sum(n > 1 for n in requests_per_trace.values()) > 10
