"""Drift state: bounded embedding / categorical reservoirs (scheduled drift runs: ``runs.py``).

Per signal there are two windows. ``reference`` is a uniform sample of everything offered
since the reference version began (Algorithm R, its seen-count persisted so the sample
stays uniform across restarts and replicas); ``current`` is the newest N items, optionally
also bounded in age. Both carry the reference version: vectors of two embedding models are
not comparable, so a model change must go through ``reset_reference`` (a new version, both
windows emptied).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa

from .engine import Database
from .errors import ReservoirMismatch
from .models import ReservoirInfo, ReservoirItem, ReservoirWindow, now_s
from .schema import WINDOWS, reservoir_items, reservoirs

class Reservoirs:
    """``store.reservoirs``: each drift signal's reference and current windows.

    Usage::

        store.reservoirs.add("answers", "current", items)
        vectors, trace_ids = store.reservoirs.get("answers", "reference")
    """

    def __init__(
        self,
        db: Database,
        *,
        reference_capacity: int = 2000,
        current_capacity: int = 2000,
        current_max_age_s: float | None = None,
        rng: random.Random | None = None,
    ):
        if reference_capacity <= 0 or current_capacity <= 0:
            raise ValueError(f"capacities must be positive, got {reference_capacity}, {current_capacity}")
        self._db = db
        self.reference_capacity = reference_capacity
        self.current_capacity = current_capacity
        self.current_max_age_s = current_max_age_s
        self._rng = rng or random.Random()
        self._sizes: dict[tuple, int] = {}
        """``info``'s count of a window, by (signal, window, version, seen, created_at)."""

    def add(
        self,
        signal: str,
        window: str,
        items: Iterable[ReservoirItem],
        *,
        capacity: int | None = None,
        max_age_s: float | None = None,
        now: float | None = None,
    ) -> int:
        """Offer items to a window; returns how many entered it.

        Raises ``ReservoirMismatch`` for a vector from another model than the reference's
        (call ``reset_reference``), another dimension, or a vector/categorical mix.
        """
        _check_window(window)
        items = list(items)
        if not items:
            return 0
        now = now_s() if now is None else now
        if window == "reference":
            capacity = capacity or self.reference_capacity
        else:
            capacity = capacity or self.current_capacity
            max_age_s = self.current_max_age_s if max_age_s is None else max_age_s
        with self._db.write() as conn:
            meta = _lock_meta(conn, self._db, signal, window, now)
            # Both windows must hold one model's vectors: the other window's model counts too.
            other_model = conn.execute(
                sa.select(reservoirs.c.model).where(reservoirs.c.signal == signal, reservoirs.c.window_name != window)
            ).scalar_one_or_none()
            kind, dim, model = _validate(signal, meta, items, meta["model"] or other_model)
            rows = [_row(signal, window, meta["version"], item, now) for item in items]
            if window == "reference":
                kept, skipped = self._algorithm_r(conn, meta, rows, items, capacity)
            else:
                kept, skipped = _append_rolling(conn, signal, meta["version"], rows, capacity, max_age_s, now), 0
            conn.execute(
                sa.update(reservoirs)
                .where(reservoirs.c.signal == signal, reservoirs.c.window_name == window)
                .values(seen=meta["seen"] + skipped + len(items), kind=kind, dim=dim, model=model)
            )
        return kept

    def _algorithm_r(self, conn: sa.Connection, meta: Any, rows: list[dict[str, Any]], items: list[ReservoirItem],
                     capacity: int) -> tuple[int, int]:
        """Algorithm R over every query, including those the feed passed over before embedding.

        An item at position ``seen`` enters with chance ``capacity / (seen + 1)``, into a uniform
        slot. The feed already kept it with ``keep_probability`` (at least that chance, and
        counted the queries it passed over in ``skipped_before``), so here it enters with the
        ratio: each query's overall chance is Algorithm R's. Returns (kept, skipped counted).
        """
        by_slot: dict[int, dict[str, Any]] = {}
        seen = meta["seen"]
        skipped = 0
        for row, item in zip(rows, items):
            seen += item.skipped_before
            skipped += item.skipped_before
            if seen < capacity:
                slot = seen
            elif item.keep_probability >= 1.0:
                slot = self._rng.randrange(seen + 1)
            else:
                chance = capacity / (seen + 1) / item.keep_probability
                slot = self._rng.randrange(capacity) if self._rng.random() < chance else capacity
            if slot < capacity:
                by_slot[slot] = {**row, "slot": slot}  # a later item in the batch may replace an earlier one
            seen += 1
        if by_slot:
            stmt = self._db.insert(reservoir_items)
            stmt = stmt.on_conflict_do_update(
                index_elements=["signal", "window_name", "version", "slot"],
                set_={c: stmt.excluded[c] for c in ("trace_id", "vector", "value", "model", "added_at")},
            )
            conn.execute(stmt, list(by_slot.values()))
        # A smaller capacity than before: drop the slots beyond it.
        t = reservoir_items
        conn.execute(
            sa.delete(t).where(t.c.signal == meta["signal"], t.c.window_name == "reference",
                               t.c.version == meta["version"], t.c.slot >= capacity)
        )
        return len(by_slot), skipped

    def get(self, signal: str, window: str, *, since: float | None = None) -> tuple[Any, list[str]]:
        """``(vectors, trace_ids)``: an ``(n, dim)`` float32 array for embedding signals, a list
        of values for categorical ones (an empty ``(0, 0)`` array before the first item)."""
        found = self.window(signal, window, since=since)
        return found.values, found.trace_ids

    def window(self, signal: str, window: str, *, since: float | None = None,
               after: float | None = None) -> ReservoirWindow:
        """The window's items with their times (``added_at``: the query's own time when the feed
        gave one), oldest first for ``current`` and in slot order for ``reference``; ``since``
        keeps items at or after a time, ``after`` items strictly after it."""
        _check_window(window)
        t = reservoir_items
        with self._db.read() as conn:
            meta = conn.execute(
                sa.select(reservoirs).where(reservoirs.c.signal == signal, reservoirs.c.window_name == window)
            ).first()
            if meta is None or meta.kind is None:
                return ReservoirWindow(np.empty((0, 0), dtype=np.float32), [], np.empty(0), 0 if meta is None else meta.version)
            stmt = (
                sa.select(t.c.trace_id, t.c.vector, t.c.value, t.c.added_at)
                .where(t.c.signal == signal, t.c.window_name == window, t.c.version == meta.version)
                .order_by(t.c.slot if window == "reference" else t.c.added_at, t.c.id)
            )
            if since is not None:
                stmt = stmt.where(t.c.added_at >= since)
            if after is not None:  # strictly later: the next non-overlapping window
                stmt = stmt.where(t.c.added_at > after)
            rows = conn.execute(stmt).all()
        trace_ids = [r.trace_id for r in rows]
        times = np.array([r.added_at for r in rows], dtype=np.float64)
        if meta.kind == "vector":
            data = b"".join(r.vector for r in rows)
            values = np.frombuffer(data, dtype=np.float32).reshape(len(rows), meta.dim).copy()
        else:
            values = [r.value for r in rows]
        return ReservoirWindow(values, trace_ids, times, meta.version)

    def reference_spec(self, signal: str) -> dict[str, Any] | None:
        """The reference definition set for ``signal`` (``rag-monitor drift reference set``), or
        None for the profile's default. Kept as JSON in the reference window's ``source``."""
        info = self.info(signal, "reference")
        if info is None or not info.source:
            return None
        try:
            spec = json.loads(info.source)
        except ValueError:  # a plain note from older versions ("embedding model changed ...")
            return None
        return spec if isinstance(spec, dict) else None

    def info(self, signal: str, window: str) -> ReservoirInfo | None:
        _check_window(window)
        t = reservoir_items
        with self._db.read() as conn:
            meta = conn.execute(
                sa.select(reservoirs).where(reservoirs.c.signal == signal, reservoirs.c.window_name == window)
            ).first()
            if meta is None:
                return None
            # A window's items change only through ``add`` (its count grows) or a reset (a new
            # version): the same version and count hold the same items, so its size is counted once
            # per change, not on every tick of every replica (an index-only scan of up to 40,000 entries).
            key = (signal, window, meta.version, meta.seen, meta.created_at)
            size = self._sizes.get(key)
            if size is None:
                size = conn.execute(
                    sa.select(sa.func.count()).where(t.c.signal == signal, t.c.window_name == window,
                                                     t.c.version == meta.version)
                ).scalar_one()
                self._sizes = {k: v for k, v in self._sizes.items() if k[:2] != (signal, window)} | {key: size}
        return ReservoirInfo(signal, window, meta.version, meta.model, meta.source, meta.kind, meta.dim,
                             meta.seen, size, meta.created_at)

    def reset_reference(self, signal: str, model: str | None, source: str | None = None,
                        *, now: float | None = None, keep_current: bool = False) -> int:
        """Start a new reference version for ``signal`` (e.g. a new embedding model).

        The reference is emptied and its count restarts; so is the current window unless
        ``keep_current`` (a new reference definition for the same model). Returns the new version.
        """
        now = now_s() if now is None else now
        with self._db.write() as conn:
            metas = {w: dict(_lock_meta(conn, self._db, signal, w, now)) for w in WINDOWS}
            version = max(m["version"] for m in metas.values()) + 1
            conn.execute(
                sa.update(reservoirs)
                .where(reservoirs.c.signal == signal)
                .values(version=version, model=model, source=source, kind=None, dim=None, seen=0, created_at=now)
            )
            if keep_current:  # same model: the current window stays valid under the new version
                current = metas["current"]
                conn.execute(sa.update(reservoirs).where(reservoirs.c.signal == signal, reservoirs.c.window_name == "current")
                             .values(kind=current["kind"], dim=current["dim"], model=current["model"] or model,
                                     seen=current["seen"]))
                conn.execute(sa.update(reservoir_items)
                             .where(reservoir_items.c.signal == signal, reservoir_items.c.window_name == "current",
                                    reservoir_items.c.version == current["version"])
                             .values(version=version))
            conn.execute(sa.delete(reservoir_items).where(reservoir_items.c.signal == signal,
                                                          reservoir_items.c.version < version))
        return version


def _check_window(window: str) -> None:
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {WINDOWS}, got {window!r}")


def _lock_meta(conn: sa.Connection, db: Database, signal: str, window: str, now: float) -> Any:
    """The window's metadata row, created if missing and locked for this transaction."""
    if not signal:
        raise ValueError("signal must be a non-empty name")
    conn.execute(
        db.insert(reservoirs)
        .values(signal=signal, window_name=window, version=1, seen=0, created_at=now)
        .on_conflict_do_nothing(index_elements=["signal", "window_name"])
    )
    return conn.execute(
        sa.select(reservoirs)
        .where(reservoirs.c.signal == signal, reservoirs.c.window_name == window)
        .with_for_update()  # PostgreSQL: serialise adders of one window; SQLite holds the write lock already
    ).first()._mapping


def _validate(
    signal: str, meta: Any, items: Sequence[ReservoirItem], model: str | None
) -> tuple[str, int | None, str | None]:
    kind, dim = meta["kind"], meta["dim"]
    for item in items:
        if not isinstance(item, ReservoirItem):
            raise TypeError(f"expected ReservoirItem, got {type(item).__name__}")
        if (item.vector is None) == (item.value is None):
            raise ReservoirMismatch(f"{signal}: item {item.trace_id} needs exactly one of vector or value")
        item_kind = "vector" if item.vector is not None else "categorical"
        if kind is None:
            kind = item_kind
        elif kind != item_kind:
            raise ReservoirMismatch(f"{signal} holds {kind} items; item {item.trace_id} is {item_kind}")
        if item_kind == "vector":
            n = len(item.vector)
            if dim is None:
                dim = n
            elif n != dim:
                raise ReservoirMismatch(f"{signal} holds {dim}-dimensional vectors; item {item.trace_id} has {n}")
            if item.model is not None:
                if model is None:
                    model = item.model
                elif item.model != model:
                    raise ReservoirMismatch(
                        f"{signal}: item {item.trace_id} comes from model {item.model!r} but the reservoir holds "
                        f"{model!r} vectors; call reset_reference({signal!r}, {item.model!r}) first"
                    )
    return kind, dim, model


def _row(signal: str, window: str, version: int, item: ReservoirItem, now: float) -> dict[str, Any]:
    vector = None
    if item.vector is not None:
        array = np.asarray(item.vector, dtype=np.float32)
        if array.ndim != 1 or array.size == 0:
            raise ReservoirMismatch(f"{signal}: item {item.trace_id} vector must be 1-D and non-empty")
        if not np.isfinite(array).all():
            raise ReservoirMismatch(f"{signal}: item {item.trace_id} vector has NaN or infinite values")
        vector = array.tobytes()
    added_at = now if item.added_at is None else item.added_at
    if not math.isfinite(added_at):
        raise ValueError(f"{signal}: item {item.trace_id} added_at must be finite")
    return {"signal": signal, "window_name": window, "version": version, "slot": None, "trace_id": item.trace_id,
            "vector": vector, "value": item.value, "model": item.model, "added_at": added_at}


def _append_rolling(conn: sa.Connection, signal: str, version: int, rows: list[dict[str, Any]],
                    capacity: int, max_age_s: float | None, now: float) -> int:
    t = reservoir_items
    rows = rows[-capacity:]  # older items of an oversized batch would be evicted at once
    conn.execute(sa.insert(t), rows)
    in_window = sa.and_(t.c.signal == signal, t.c.window_name == "current")
    if max_age_s is not None:
        conn.execute(sa.delete(t).where(in_window, t.c.added_at < now - max_age_s))
    newest = (
        sa.select(t.c.id).where(in_window, t.c.version == version)
        .order_by(t.c.added_at.desc(), t.c.id.desc()).limit(capacity)
    )
    conn.execute(sa.delete(t).where(in_window, t.c.id.not_in(newest)))
    return len(rows)
