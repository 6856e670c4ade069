"""What a drift test compares against: the reference period, and the hours it is matched on.

A reference *spec* (a small JSON-able dict, stored with the reference window and copied into
every run's result) says which traffic the reference reservoir captures:

- ``{"mode": "period", "days": 7}`` (default): every query of the first full ``days`` days after
  the reference (re)starts. The reservoir is a uniform sample of the whole period (Algorithm R
  over all of it), so every hour of the week is covered in proportion to its traffic; drift
  runs wait until the period is over.
- ``{"mode": "release", "release": "r42", "days": 7}``: the same, only from queries of ``release``.
- ``{"mode": "range", "start": t0, "end": t1}``: an explicit time range (Unix seconds); the
  items of the current window already inside it seed the reference when it is set.
- ``{"mode": "count", "size": n}``: the first ``n`` items (profiles with ``reference_days:
  null``): for demos and tests only, minutes of one time of day are not a reference.

Seasonality: a current window of a few hours holds the topics of those hours; against a
whole-week reference a daily topic cycle would read as drift. So each test draws the reference
items it uses from the *same hours* as the current window's items (``season: day`` matches the
hour of the day, ``week`` the hour of the week, ``none`` no matching): per hour, as many
reference items (times ``ratio``) as current ones, without replacement. Under no drift both
samples then come from the same mixture of hours. When an hour holds too few reference items the
hours are widened into 2-, 3-, 4-, 6-, 8-, 12-hour bins (recorded as ``match_hours``).
"""

from __future__ import annotations

from typing import Any

SEASONS = ("day", "week", "none")
MODES = ("period", "release", "range", "count")
DAY_S = 86400.0
# 1970-01-01 was a Thursday: shifting by three days puts Monday 00:00 UTC at hour-of-week 0.
_WEEK_OFFSET_S = 3 * DAY_S
_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 24)


def default_spec(days: float = 7.0, release: str | None = None) -> dict[str, Any]:
    if release:
        return {"mode": "release", "release": release, "days": days}
    return {"mode": "period", "days": days}


def validate_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A checked copy of ``spec``; ``ValueError`` naming what is wrong."""
    mode = spec.get("mode")
    if mode not in MODES:
        raise ValueError(f"reference mode must be one of {MODES}, got {mode!r}")
    out = dict(spec)
    if mode in ("period", "release"):
        days = float(out.get("days", 7.0))
        if not days > 0:
            raise ValueError(f"reference days must be positive, got {days!r}")
        out["days"] = days
        if mode == "release" and not out.get("release"):
            raise ValueError("a release reference needs the release name")
    elif mode == "count":
        out["size"] = int(out.get("size", 0))
        if out["size"] < 2:
            raise ValueError("a count reference needs size >= 2")
    else:
        start, end = float(out.get("start", "nan")), float(out.get("end", "nan"))
        if not start < end:
            raise ValueError(f"a reference time range needs start < end, got {out.get('start')!r} .. {out.get('end')!r}")
        out["start"], out["end"] = start, end
    return out


def capture_period(spec: dict[str, Any], started_at: float) -> tuple[float, float]:
    """``(start, end)`` of the traffic the reference captures; ``started_at``: when the reference version began."""
    if spec["mode"] == "range":
        return float(spec["start"]), float(spec["end"])
    if spec["mode"] == "count":
        return started_at, float("inf")
    return started_at, started_at + float(spec["days"]) * DAY_S


def captures(spec: dict[str, Any], started_at: float, time: float, release: str | None) -> bool:
    """Whether an item of ``release`` at ``time`` belongs in the reference."""
    start, end = capture_period(spec, started_at)
    if spec["mode"] != "count" and not start <= time < end:
        return False
    return not spec.get("release") or release == spec["release"]


def describe(spec: dict[str, Any], started_at: float | None = None) -> str:
    import datetime as dt

    def day(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    if spec["mode"] == "count":
        return f"the first {spec['size']} items" + (f" of release {spec['release']}" if spec.get("release") else "")
    if spec["mode"] == "range":
        return f"time range {day(spec['start'])} .. {day(spec['end'])}"
    what = f"the first {spec['days']:g} days" + (f" of release {spec['release']}" if spec["mode"] == "release" else "")
    return what + (f" from {day(started_at)}" if started_at is not None else "")


def is_complete(spec: dict[str, Any], started_at: float | None, size: int, now: float) -> bool:
    """Whether the reference has finished capturing (drift runs wait until then)."""
    if spec["mode"] == "count":
        return size >= int(spec["size"])
    if started_at is None:
        return False
    return now >= capture_period(spec, started_at)[1] and size >= 2


def hour_of_season(times: Any, season: str) -> Any:
    """Hour of the day (0-23) or of the week (0-167, Monday 00:00 UTC = 0) of Unix ``times``."""
    import numpy as np

    times = np.asarray(times, dtype=np.float64)
    if season == "day":
        return (np.floor(times / 3600.0) % 24).astype(np.int64)
    if season == "week":
        return (np.floor((times + _WEEK_OFFSET_S) / 3600.0) % 168).astype(np.int64)
    return np.zeros(times.shape, dtype=np.int64)


def matched_reference(reference_times: Any, current_times: Any, *, season: str, ratio: float, rng: Any,
                      min_share: float = 0.5) -> tuple[Any, int]:
    """Indices of reference items drawn at the current window's hours, and the bin width in hours.

    Per hour bin, ``round(s x current count)`` reference items without replacement, with the
    largest ``s <= ratio`` every bin can supply; bins widen until ``s >= min_share``. ``season
    none`` (or no width reaching ``min_share``) returns a uniform draw of ``ratio x n`` items.
    """
    import numpy as np

    if season not in SEASONS:
        raise ValueError(f"season must be one of {SEASONS}, got {season!r}")
    n_ref, n_cur = len(reference_times), len(current_times)
    want = min(n_ref, int(round(ratio * n_cur)))
    if season != "none" and n_cur:
        ref_hours = hour_of_season(reference_times, season)
        cur_hours = hour_of_season(current_times, season)
        period = 24 if season == "day" else 168
        for width in _WIDTHS:
            if period % width:
                continue
            ref_bins, cur_bins = ref_hours // width, cur_hours // width
            bins, counts = np.unique(cur_bins, return_counts=True)
            available = np.array([(ref_bins == b).sum() for b in bins])
            share = min(ratio, float((available / counts).min()))
            if share >= min_share:
                chosen = [rng.choice(np.flatnonzero(ref_bins == b), size=int(round(share * c)), replace=False)
                          for b, c in zip(bins, counts)]
                return np.sort(np.concatenate(chosen)), width
    return np.sort(rng.choice(n_ref, size=want, replace=False)), period_of(season)


def period_of(season: str) -> int:
    return {"day": 24, "week": 168}.get(season, 0)


def draw_reference(profile: Any, reference: Any, current_times: Any, seed: int) -> tuple[Any, list[str], int]:
    """A fresh draw of reference items at the window's hours: ``(values, trace ids, match_hours)``.

    ``profile`` is a ``DriftProfile`` (its ``season``, ``reference_ratio`` and ``signal``);
    ``reference`` a window with ``values`` (an array for vector signals, a list otherwise),
    ``times`` and ``trace_ids``. Every test draws anew (from its own ``seed``), so given the
    reservoir the tests are independent of each other.
    """
    import numpy as np

    from rag_monitor.detectors.profiles import EMBEDDING_SIGNALS

    chosen, match_hours = matched_reference(reference.times, current_times, season=profile.season,
                                            ratio=profile.reference_ratio, rng=np.random.default_rng(seed))
    if profile.signal in EMBEDDING_SIGNALS:
        matched = reference.values[chosen]
    else:
        matched = [reference.values[i] for i in chosen]
    return matched, [reference.trace_ids[i] for i in chosen], match_hours
