"""Shadow evaluation: a candidate pipeline answers a sampled share of live queries off the
request path, its answer never reaching the user, its trace linked to production's::

    monitor = rag_monitor.init("support-bot", release="r2", shadow=ShadowConfig(share=0.1, timeout_s=5))

    def fixed_pipeline(ctx: ShadowContext) -> None:
        docs = retrieve(ctx.text, allow_writes=ctx.writes_allowed)   # False: the contract below
        with ctx.query.generate(model="gpt-x") as g:
            answer = llm(ctx.text, docs)
        ctx.query.answer(answer, citations=[d.id for d in docs])

    with monitor.query(question, tenant="acme") as q:
        q.shadow("fixed-retriever", fixed_pipeline)    # returns at once; None when not run
        ...production answers as usual...

The candidate gets a ``ShadowContext`` (the question, the tenant, its own query handle, a
``cancelled`` event) and records on ``ctx.query`` (also ``current_query()`` in its thread).
Its trace has ``rag.variant=shadow``, ``rag.shadow_of=<production trace id>`` and
``rag.shadow.candidate=<name>``; the agent samples both halves as one pair for blind review.

Off the request path: the candidate runs on a pool of ``max_concurrency`` threads. A query is
admitted only while fewer than ``max_concurrency + max_pending`` candidates are running or
waiting; otherwise it is dropped and counted, never queued without bound. Each candidate has
``timeout_s`` from submission: one still waiting then is skipped, one still running is marked
timed out (its span ends with an error at the deadline, ``ctx.cancelled`` is set so a
cooperative candidate can stop). Python cannot kill a thread, so an overdue candidate keeps
its slot until it returns: that is what bounds the work, and later queries are dropped meanwhile.

Writes are suppressed by contract: ``ctx.writes_allowed`` is False and ``in_shadow()`` is True
in the candidate's thread, and the app's code must skip its own side effects (saving history,
filling caches, sending mail) when it is. The SDK enforces its own: ``Monitor.feedback`` on a
shadow query raises ``ShadowWriteRefused``, and ``Monitor.query`` inside a candidate returns a
no-op query (a candidate can never record a production query).
"""

from __future__ import annotations

import contextvars
import functools
import heapq
import itertools
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rag_monitor.sdk._logging import log
from rag_monitor.sdk.config import _resolve_fields, _setting

if TYPE_CHECKING:
    from rag_monitor.sdk.query import Query

__all__ = ["ShadowConfig", "ShadowContext", "ShadowRunner", "ShadowStats", "ShadowWriteRefused", "in_shadow"]

RAG_MONITOR_SHADOW_SHARE = "RAG_MONITOR_SHADOW_SHARE"
"""Share of queries (0..1) whose ``q.shadow(...)`` runs the candidate."""
RAG_MONITOR_SHADOW_TIMEOUT = "RAG_MONITOR_SHADOW_TIMEOUT"
"""Seconds a candidate may take from submission before it is counted as timed out."""
RAG_MONITOR_SHADOW_CONCURRENCY = "RAG_MONITOR_SHADOW_CONCURRENCY"
"""Candidates running at once (threads)."""
RAG_MONITOR_SHADOW_MAX_PENDING = "RAG_MONITOR_SHADOW_MAX_PENDING"
"""Candidates waiting for a thread; past it a query's shadow is dropped and counted."""

_in_shadow: contextvars.ContextVar[bool] = contextvars.ContextVar("rag_monitor_in_shadow", default=False)
_RECENT_SHADOWS = 4096  # shadow trace ids remembered so feedback by id is refused too


def in_shadow() -> bool:
    """True inside a shadow candidate: skip every write (the contract above)."""
    return _in_shadow.get()


class ShadowWriteRefused(RuntimeError):
    """A write the shadow contract forbids (feedback on a shadow query)."""


@dataclass(frozen=True)
class ShadowConfig:
    """Shadow runner settings. ``None`` means: environment variable, else default."""

    share: float = _setting(RAG_MONITOR_SHADOW_SHARE, 0.1)
    timeout_s: float = _setting(RAG_MONITOR_SHADOW_TIMEOUT, 10.0)
    max_concurrency: int = _setting(RAG_MONITOR_SHADOW_CONCURRENCY, 2)
    max_pending: int = _setting(RAG_MONITOR_SHADOW_MAX_PENDING, 8)

    def __post_init__(self) -> None:
        _resolve_fields(self)
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"ShadowConfig.share={self.share!r}: must be within [0, 1]")
        if not self.timeout_s > 0 or self.max_concurrency < 1:
            raise ValueError(f"ShadowConfig timeout_s={self.timeout_s!r}, max_concurrency={self.max_concurrency!r}:"
                             " the timeout must be positive and the concurrency at least 1")


@dataclass
class ShadowStats:
    """Candidate counts since the runner started."""

    submitted: int = 0
    """Admitted to run (sampled and not dropped)."""
    dropped: int = 0
    """Sampled but not run: every slot was taken, or it was still waiting when the runner shut down."""
    completed: int = 0
    """Returned before their deadline."""
    timed_out: int = 0
    """Still waiting or running at their deadline."""
    failed: int = 0
    """Raised an exception (recorded on the shadow span; never reaches production)."""
    running: int = 0
    """Admitted and not returned yet (waiting, running, or overdue)."""


@dataclass
class ShadowContext:
    """What a candidate gets: the question and its own query handle; never write (see module)."""

    text: Any
    variant: str
    production_trace_id: str
    tenant: str | None = None
    intent: str | None = None
    query: Any = None
    """The shadow query handle (set when the candidate starts): record stages and the answer on it."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set at the deadline: a cooperative candidate stops early."""
    deadline: float = 0.0
    """``time.monotonic()`` value of the deadline."""
    writes_allowed: bool = False
    """Always False: the shadow contract."""
    _started: bool = field(default=False, repr=False)
    _outcome: str | None = field(default=None, repr=False)


class ShadowRunner:
    """Runs candidates beside production on a bounded pool; see the module docstring."""

    def __init__(self, start_query: Callable[..., Any], config: ShadowConfig | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config if config is not None else ShadowConfig()
        self._start_query = start_query  # Monitor._shadow_query: the shadow trace's root
        self._rng = rng or random.Random()
        self._pool = ThreadPoolExecutor(self.config.max_concurrency, thread_name_prefix="rag-monitor-shadow")
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency + self.config.max_pending)
        self._lock = threading.Lock()
        self._stats = ShadowStats()
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._deadlines: list[tuple[float, int, ShadowContext, Future]] = []
        self._order = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._watchdog = threading.Thread(target=self._watch, name="rag-monitor-shadow-watchdog", daemon=True)
        self._watchdog.start()

    def stats(self) -> ShadowStats:
        with self._lock:
            return ShadowStats(**vars(self._stats))

    def is_shadow(self, trace_id: str) -> bool:
        with self._lock:
            return trace_id in self._recent

    def submit(self, production: Query, variant: str, candidate: Callable[..., Any], text: Any,
               tenant: str | None = None, intent: str | None = None) -> Future | None:
        """Run ``candidate(ctx)`` for a sampled share of queries; None when not run (unsampled, dropped)."""
        if not variant or not isinstance(variant, str):
            raise ValueError(f"shadow variant={variant!r}: a non-empty candidate name is required")
        if self._rng.random() >= self.config.share:
            return None
        if self._closed or not self._slots.acquire(blocking=False):
            with self._lock:
                self._stats.dropped += 1
            return None
        ctx = ShadowContext(text=text, variant=variant, production_trace_id=production.trace_id, tenant=tenant,
                            intent=intent, deadline=time.monotonic() + self.config.timeout_s)
        try:
            future = self._pool.submit(self._run, ctx, candidate)
        except RuntimeError:  # shut down between the check and the submit
            self._slots.release()
            with self._lock:
                self._stats.dropped += 1
            return None
        with self._lock:
            self._stats.submitted += 1
            self._stats.running += 1
            heapq.heappush(self._deadlines, (ctx.deadline, next(self._order), ctx, future))
            self._wake.notify()
        future.add_done_callback(functools.partial(self._finished, ctx))
        return future

    def _finished(self, ctx: ShadowContext, future: Future) -> None:
        if future.cancelled():  # still waiting at shutdown: it never ran
            self._slots.release()
            with self._lock:
                self._stats.running -= 1
                self._settle(ctx, "dropped")
        with self._lock:
            self._wake.notify()  # the watchdog drops the finished candidate's deadline

    def _settle(self, ctx: ShadowContext, outcome: str) -> bool:
        """Count ``ctx``'s outcome once (the watchdog and the candidate's thread may both try)."""
        if ctx._outcome is not None:
            return False
        ctx._outcome = outcome
        setattr(self._stats, outcome, getattr(self._stats, outcome) + 1)
        return True

    def _run(self, ctx: ShadowContext, candidate: Callable[..., Any]) -> None:
        outcome = "completed"
        try:
            with self._lock:
                if time.monotonic() >= ctx.deadline:
                    self._settle(ctx, "timed_out")  # waited past its deadline: not worth running
                    return
                ctx._started = True
            query = self._start_query(ctx)
            with self._lock:
                ctx.query = query
                self._recent[query.trace_id] = None
                while len(self._recent) > _RECENT_SHADOWS:
                    self._recent.popitem(last=False)
            if ctx.cancelled.is_set():
                query._timed_out(self.config.timeout_s)  # the deadline passed while it started
            token = _in_shadow.set(True)
            try:
                with query:
                    candidate(ctx)
            except Exception:  # noqa: BLE001 - recorded on the shadow span by its with block
                outcome = "failed"
            finally:
                _in_shadow.reset(token)
        except Exception:  # noqa: BLE001 - our own failure: production never sees it
            log.internal_error("shadow run")
            outcome = "failed"
        finally:
            self._slots.release()
            with self._lock:
                self._stats.running -= 1
                self._settle(ctx, outcome)

    def _watch(self) -> None:
        """At each deadline, a candidate still running is timed out: its span ends, ``cancelled`` is set."""
        with self._lock:
            while not self._closed or self._deadlines:
                if not self._deadlines:
                    self._wake.wait()
                    continue
                deadline, _, ctx, future = self._deadlines[0]
                delay = deadline - time.monotonic()
                if delay > 0 and not future.done():
                    self._wake.wait(delay)
                    continue
                heapq.heappop(self._deadlines)
                if future.done() or not ctx._started or not self._settle(ctx, "timed_out"):
                    continue  # finished, or never started (``_run`` counts it)
                ctx.cancelled.set()
                query = ctx.query
                if query is None:
                    continue  # ``_run`` ends it as soon as it exists
                self._lock.release()
                try:
                    query._timed_out(self.config.timeout_s)
                except Exception:  # noqa: BLE001
                    log.internal_error("shadow timeout")
                finally:
                    self._lock.acquire()

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Stop admitting candidates and drop those still waiting; wait up to ``timeout_s`` for those
        running to return or time out (an overrunning thread itself cannot be waited for)."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._watchdog.join(timeout_s)

