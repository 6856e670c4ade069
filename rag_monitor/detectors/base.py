"""The shape every drift detector shares: ``fit``, ``score``, ``predict`` and one result type.

A detector holds a fixed *reference* window (what normal traffic looked like) and tests a
*current* window against it. ``predict`` never changes the reference: a drift job can test
many windows against one reference and get the same answer for the same window. Moving the
reference is an explicit call (``fit`` again, or ``update_reference``).

Only the standard library is imported here, so ``import rag_monitor.detectors`` stays cheap.
"""

from __future__ import annotations

import abc
import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Generic, Iterator, Mapping, TypeVar

__all__ = ["DegenerateWindowError", "DriftResult", "DriftScore", "DriftDetector", "EmbeddingDriftDetector", "NotFittedError"]


class NotFittedError(RuntimeError):
    """``score``/``predict`` was called before ``fit`` gave the detector a reference."""


class DegenerateWindowError(ValueError):
    """A window whose vectors are (near-)identical: no kernel width or p-value means anything.

    Drift runs record it as the verdict ``degenerate`` (never as drift with p = 0).
    """


def fresh_seed() -> int:
    """A new random seed (63 bits from the OS), recorded with the run that used it."""
    import secrets

    return secrets.randbits(63)


class Metadata(dict):
    """A read-only dict: results are values, nobody downstream should edit them in place.

    A ``dict`` subclass (not ``MappingProxyType``) so ``dataclasses.asdict``, ``copy`` and
    ``json.dumps`` handle results without special cases.
    """

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("drift result metadata is read-only")

    __setitem__ = __delitem__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]
    __ior__ = _read_only  # type: ignore[assignment]

    def __reduce__(self):  # copy/deepcopy/pickle rebuild through __init__, not __setitem__
        return (type(self), (dict(self),))


def _frozen_mapping(values: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return values if isinstance(values, Metadata) else Metadata(values or {})


@dataclass(frozen=True)
class DriftScore:
    """What a test computed on one current window, before a verdict is attached."""

    statistic: float
    """The test statistic (MMD², held-out AUC, chi-square): larger means further apart."""
    p_value: float
    """Probability, with no drift, of a statistic at least this large."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))


@dataclass(frozen=True)
class DriftResult:
    """The verdict of one drift test.

    >>> result = MMDDrift(signal="query_embedding").fit(reference).predict(current)  # doctest: +SKIP
    >>> if result.is_drift:  # doctest: +SKIP
    ...     print(f"{result.signal} drifted: p={result.p_value:.3g} < {result.threshold}")
    """

    is_drift: bool
    """``p_value < threshold``."""
    p_value: float
    statistic: float
    threshold: float
    """The significance level the p-value was compared with (the false-alarm rate accepted)."""
    n_reference: int
    n_current: int
    detector: str
    """``mmd``, ``novelty``, ``classifier`` or ``chi_square``."""
    signal: str
    """What was tested, e.g. ``query_embedding``, ``document_embedding``, ``intent``."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Detector-specific details (bandwidth, permutations, per-category counts ...); read-only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))


ReferenceT = TypeVar("ReferenceT")


class DriftDetector(abc.ABC, Generic[ReferenceT]):
    """Base class: a subclass writes ``_prepare`` (validate one window) and ``_score``.

    Parameters
    ----------
    alpha
        Significance level: the share of windows with no real drift that will still be
        flagged (the false-alarm rate you accept). 0.05 flags about one window in twenty
        when nothing changed.
    signal
        Name of the signal being watched; copied into every result.
    min_window_size
        Fewest observations accepted in the reference or in a current window; smaller
        windows raise ``ValueError`` rather than give a meaningless p-value.
    """

    detector_name: str = "drift"

    def __init__(self, *, alpha: float = 0.05, signal: str = "", min_window_size: int = 10) -> None:
        if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
            raise ValueError(f"alpha must be a probability strictly between 0 and 1, got {alpha!r}")
        if not isinstance(min_window_size, int) or min_window_size < 2:
            raise ValueError(f"min_window_size must be an integer >= 2, got {min_window_size!r}")
        self.alpha = float(alpha)
        self.signal = signal
        self.min_window_size = min_window_size
        self._reference: ReferenceT | None = None

    # -- subclass hooks ---------------------------------------------------------------

    @abc.abstractmethod
    def _prepare(self, window: Any, what: str) -> ReferenceT:
        """Validate one window and convert it to the internal form; ``what`` names it in errors."""

    @abc.abstractmethod
    def _score(self, reference: ReferenceT, current: ReferenceT) -> DriftScore:
        """Run the test. Must not modify ``reference``."""

    @abc.abstractmethod
    def _size(self, window: ReferenceT) -> int:
        """Number of observations in a prepared window."""

    def _concat(self, old: ReferenceT, new: ReferenceT) -> ReferenceT:  # pragma: no cover - overridden
        raise NotImplementedError(f"{type(self).__name__} cannot append to its reference")

    def _tail(self, window: ReferenceT, size: int) -> ReferenceT:  # pragma: no cover - overridden
        raise NotImplementedError(f"{type(self).__name__} cannot trim its reference")

    # -- public API -------------------------------------------------------------------

    def fit(self, reference: Any) -> "DriftDetector[ReferenceT]":
        """Set (or replace) the reference window. Returns ``self``."""
        self._reference = self._prepare(reference, "reference")
        self._check_size(self._reference, "reference")
        return self

    def update_reference(self, batch: Any, *, max_size: int | None = None) -> None:
        """Append ``batch`` to the reference, keeping the newest ``max_size`` observations."""
        reference = self._require_reference()
        new = self._prepare(batch, "batch")
        merged = self._concat(reference, new)
        if max_size is not None:
            if max_size < self.min_window_size:
                raise ValueError(f"max_size={max_size} is below min_window_size={self.min_window_size}")
            merged = self._tail(merged, max_size)
        self._reference = merged

    @property
    def is_fitted(self) -> bool:
        return self._reference is not None

    @property
    def n_reference(self) -> int:
        return self._size(self._require_reference())

    def score(self, batch: Any) -> DriftScore:
        """Test ``batch`` (the current window) against the reference: statistic and p-value."""
        reference = self._require_reference()
        current = self._prepare(batch, "current window")
        self._check_size(current, "current window")
        return self._score(reference, current)

    def predict(self, batch: Any) -> DriftResult:
        """Test ``batch`` against the reference and say whether it drifted (``p < alpha``)."""
        reference = self._require_reference()
        current = self._prepare(batch, "current window")
        self._check_size(current, "current window")
        scored = self._score(reference, current)
        p_value = float(scored.p_value)
        if math.isnan(p_value):
            raise RuntimeError(f"{self.detector_name} produced a NaN p-value")  # a bug, not bad input
        return DriftResult(
            is_drift=p_value < self.alpha,
            p_value=p_value,
            statistic=float(scored.statistic),
            threshold=self.alpha,
            n_reference=self._size(reference),
            n_current=self._size(current),
            detector=self.detector_name,
            signal=self.signal,
            metadata=scored.metadata,
        )

    # -- helpers ----------------------------------------------------------------------

    def _require_reference(self) -> ReferenceT:
        if self._reference is None:
            raise NotFittedError(f"{type(self).__name__} has no reference window: call fit(reference) first")
        return self._reference

    def _check_size(self, window: ReferenceT, what: str) -> None:
        size = self._size(window)
        if size < self.min_window_size:
            raise ValueError(
                f"{what} has {size} observation(s); {type(self).__name__} needs at least "
                f"{self.min_window_size} (min_window_size)"
            )


class EmbeddingDriftDetector(DriftDetector[Any]):
    """Base for detectors on embedding vectors: windows are ``(n, dim)`` float arrays.

    Every window is checked for NaN/inf and for the reference's dimension: vectors from
    another embedding model (another dimension) are not comparable and are refused.
    """

    _dtype = "float32"
    """Precision windows are stored in; subclasses may offer ``float64``."""

    def _prepare(self, window: Any, what: str) -> Any:
        import numpy as np

        try:
            array = np.asarray(window, dtype=np.float64 if self._dtype == "float64" else np.float32)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what} must be a 2-D array of numbers (n_vectors, dim): {exc}") from None
        if array.ndim == 1 and array.size == 0:
            array = array.reshape(0, 0)
        if array.ndim != 2:
            raise ValueError(f"{what} must be 2-D (n_vectors, dim), got shape {array.shape}")
        if array.shape[0] == 0:
            raise ValueError(f"{what} is empty: no vectors to test")
        if not np.isfinite(array).all():
            bad_rows = np.flatnonzero(~np.isfinite(array).all(axis=1))
            raise ValueError(
                f"{what} contains NaN or infinite values in {bad_rows.size} vector(s) "
                f"(first at row {int(bad_rows[0])}); drop or fix them before testing"
            )
        if self._reference is not None and what != "reference" and array.shape[1] != self._reference.shape[1]:
            raise ValueError(
                f"{what} has dimension {array.shape[1]} but the reference has {self._reference.shape[1]}: "
                "vectors from different embedding models cannot be compared (refit the reference)"
            )
        return np.ascontiguousarray(array)

    def _size(self, window: Any) -> int:
        return int(window.shape[0])

    def _concat(self, old: Any, new: Any) -> Any:
        import numpy as np

        return np.concatenate([old, new], axis=0)

    def _tail(self, window: Any, size: int) -> Any:
        return window[-size:].copy()


_blas_controller: Any = None


@contextlib.contextmanager
def blas_threads(threads: int | None) -> Iterator[None]:
    """Cap BLAS threads for a detector's matrix work (``None``: leave them as they are).

    The loaded libraries are found once per process, not per call: each search reads the process's
    mappings and ``dlopen``s every BLAS library with the GIL held, which, in an agent whose other
    threads run torch and load libraries, risks a native deadlock that freezes the whole process.
    The count is process-wide: callers that run detectors on several threads serialise them
    (``agent/drift/runs.py``).
    """
    if threads is None:
        yield
        return
    global _blas_controller
    if _blas_controller is None:
        from threadpoolctl import ThreadpoolController

        _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=threads, user_api="blas"):
        yield
