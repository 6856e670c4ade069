"""Calibrate a faithfulness scorer against human labels: ``rag-monitor calibrate``.

Scores are "supported" probabilities (1 = supported); an answer is *flagged unsupported*
when its score is below the threshold. The report gives, for that flag, balanced accuracy,
precision and recall (unsupported is the positive class: it is what pages people), the ROC
AUC of the score, the expected calibration error of the score read as P(supported) (10 equal
bins), and the threshold that maximises balanced accuracy with a bootstrap 95% interval.
``weights`` (inverse sampling probabilities from the review queue) make every figure a
population estimate; oversampled complaints then count for what they represent.

Usage::

    data = load_begin("tests/data/begin/begin_dev_wow_200.tsv")
    scores = LexicalScorer().score(data.premises, data.hypotheses)
    report = calibrate(scores, data.supported, threshold=LexicalScorer().threshold, scorer="lexical-v1")
    write_html(report, "calibration.html")     # rendered from templates/calibration.html
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BEGIN_SUPPORTED = "Fully attributable"
BEGIN_UNSUPPORTED = "Not fully attributable"
BEGIN_GENERIC = "Generic"
"""BEGIN's label for chit-chat that states nothing checkable: excluded, like a refusal."""


@dataclass(frozen=True)
class ReliabilityBin:
    """One bin of the reliability diagram: mean score against the observed supported share."""

    low: float
    high: float
    mean_score: float
    supported_rate: float
    weight: float
    count: int


@dataclass(frozen=True)
class CalibrationReport:
    """Scorer against human labels; ``*_unsupported`` figures treat "unsupported" as positive."""

    scorer: str
    n: int
    n_supported: int
    n_unsupported: int
    n_excluded: int
    """Pairs with no score (no claims, refusals): left out of every figure."""
    threshold: float
    balanced_accuracy: float
    precision_unsupported: float
    recall_unsupported: float
    roc_auc: float
    ece: float
    recommended_threshold: float
    recommended_interval: tuple[float, float]
    """Bootstrap 95% percentile interval of the recommended threshold."""
    recommended_balanced_accuracy: float
    n_bootstrap: int
    reliability: tuple[ReliabilityBin, ...]
    balanced_accuracy_interval: tuple[float, float] = (float("nan"), float("nan"))
    roc_auc_interval: tuple[float, float] = (float("nan"), float("nan"))
    """Bootstrap 95% percentile intervals (the same resamples as the threshold's)."""


def _confusion(scores: np.ndarray, supported: np.ndarray, weights: np.ndarray, threshold: float) -> tuple[float, float, float, float]:
    flagged = scores < threshold
    unsupported = ~supported
    tp = float(weights[flagged & unsupported].sum())
    fp = float(weights[flagged & supported].sum())
    fn = float(weights[~flagged & unsupported].sum())
    tn = float(weights[~flagged & supported].sum())
    return tp, fp, fn, tn


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else float("nan")


def _balanced_accuracy(scores: np.ndarray, supported: np.ndarray, weights: np.ndarray, threshold: float) -> float:
    tp, fp, fn, tn = _confusion(scores, supported, weights, threshold)
    return 0.5 * (_ratio(tp, tp + fn) + _ratio(tn, tn + fp))


def _best_threshold(scores: np.ndarray, supported: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Threshold maximising balanced accuracy, and that accuracy. Vectorised over all cut points."""
    order = np.argsort(scores, kind="stable")
    s, y, w = scores[order], supported[order], weights[order]
    pos_total = float(w[~y].sum())  # unsupported: flagged when below the threshold
    neg_total = float(w[y].sum())
    if pos_total == 0 or neg_total == 0:
        return float("nan"), float("nan")
    # A cut after position k flags s[:k+1]; only cut where the next score differs.
    cum_pos = np.cumsum(np.where(~y, w, 0.0))
    cum_neg = np.cumsum(np.where(y, w, 0.0))
    distinct = np.append(s[1:] > s[:-1], True)
    tpr = cum_pos / pos_total
    tnr = 1.0 - cum_neg / neg_total
    bacc = 0.5 * (tpr + tnr)
    bacc = np.where(distinct, bacc, -np.inf)
    k = int(np.argmax(bacc))
    # Flag nothing at all: a threshold at or below the minimum.
    if bacc[k] <= 0.5:
        return float(s[0]), 0.5
    upper = s[k + 1] if k + 1 < len(s) else min(1.0, s[k] + 1e-6)
    return float((s[k] + upper) / 2.0), float(bacc[k])


def _roc_auc(scores: np.ndarray, supported: np.ndarray, weights: np.ndarray) -> float:
    """Weighted ROC AUC of ``-score`` for the unsupported class (= AUC of score for supported)."""
    if supported.all() or (~supported).all():
        return float("nan")
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(supported, scores, sample_weight=weights))


def _reliability(scores: np.ndarray, supported: np.ndarray, weights: np.ndarray, bins: int = 10) -> tuple[list[ReliabilityBin], float]:
    index = np.clip(np.floor(scores * bins).astype(int), 0, bins - 1)
    total = float(weights.sum())
    rows: list[ReliabilityBin] = []
    ece = 0.0
    for b in range(bins):
        mask = index == b
        w = weights[mask]
        if not mask.any() or w.sum() == 0:
            continue
        mean_score = float(np.average(scores[mask], weights=w))
        rate = float(np.average(supported[mask].astype(float), weights=w))
        ece += float(w.sum()) / total * abs(mean_score - rate)
        rows.append(ReliabilityBin(b / bins, (b + 1) / bins, mean_score, rate, float(w.sum()), int(mask.sum())))
    return rows, ece


def calibrate(scores: Sequence[float | None], human_supported: Sequence[bool], weights: Sequence[float] | None = None,
              threshold: float | None = None, n_bootstrap: int = 1000, *, scorer: str = "", seed: int = 0) -> CalibrationReport:
    """Compare scores (1 = supported) with human labels (``True`` = supported).

    ``None`` scores (no claims) are excluded and counted. ``threshold`` defaults to 0.5.
    """
    if len(scores) != len(human_supported):
        raise ValueError(f"{len(scores)} scores but {len(human_supported)} labels")
    if weights is not None and len(weights) != len(scores):
        raise ValueError(f"{len(weights)} weights for {len(scores)} scores")
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be >= 0, got {n_bootstrap}")
    threshold = 0.5 if threshold is None else float(threshold)
    keep = [i for i, s in enumerate(scores) if s is not None and not math.isnan(float(s))]
    s = np.array([float(scores[i]) for i in keep], dtype=float)
    y = np.array([bool(human_supported[i]) for i in keep], dtype=bool)
    w = np.ones(len(keep)) if weights is None else np.array([float(weights[i]) for i in keep], dtype=float)
    if len(keep) == 0:
        raise ValueError("no scored pairs to calibrate on (every score is None)")
    if ((s < 0) | (s > 1)).any():
        raise ValueError("scores must lie in [0, 1]")
    if (w < 0).any() or not np.isfinite(w).all():
        raise ValueError("weights must be finite and non-negative")

    tp, fp, fn, tn = _confusion(s, y, w, threshold)
    best, best_bacc = _best_threshold(s, y, w)
    reliability, ece = _reliability(s, y, w)

    rng = np.random.default_rng(seed)
    boot: list[float] = []
    boot_bacc: list[float] = []
    boot_auc: list[float] = []
    for _ in range(n_bootstrap):
        idx = rng.integers(0, len(s), len(s))
        t, _ = _best_threshold(s[idx], y[idx], w[idx])
        if not math.isnan(t):  # a resample with both classes
            boot.append(t)
            boot_bacc.append(_balanced_accuracy(s[idx], y[idx], w[idx], threshold))
            boot_auc.append(_roc_auc(s[idx], y[idx], w[idx]))

    return CalibrationReport(
        scorer=scorer,
        n=len(keep),
        n_supported=int(y.sum()),
        n_unsupported=int((~y).sum()),
        n_excluded=len(scores) - len(keep),
        threshold=threshold,
        balanced_accuracy=0.5 * (_ratio(tp, tp + fn) + _ratio(tn, tn + fp)),
        precision_unsupported=_ratio(tp, tp + fp),
        recall_unsupported=_ratio(tp, tp + fn),
        roc_auc=_roc_auc(s, y, w),
        ece=ece,
        recommended_threshold=best,
        recommended_interval=_percentiles(boot),
        recommended_balanced_accuracy=best_bacc,
        n_bootstrap=n_bootstrap,
        reliability=tuple(reliability),
        balanced_accuracy_interval=_percentiles(boot_bacc),
        roc_auc_interval=_percentiles(boot_auc),
    )


def _percentiles(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if not math.isnan(v)]
    return (float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))) if values else (float("nan"), float("nan"))


# --- BEGIN ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BeginData:
    """BEGIN rows with a usable label: knowledge = premise, response = hypothesis."""

    premises: list[str]
    hypotheses: list[str]
    supported: list[bool]
    models: list[str]
    n_generic: int
    """Rows labelled "Generic" (no checkable content): excluded."""


def load_begin(path: str | Path) -> BeginData:
    """Read BEGIN's TSV (``model_name, data_source, knowledge, message, response, begin_label``).

    "Fully attributable" → supported, "Not fully attributable" → unsupported, "Generic" →
    excluded and counted in ``n_generic``. Any other label is an error.
    """
    premises: list[str] = []
    hypotheses: list[str] = []
    supported: list[bool] = []
    models: list[str] = []
    generic = 0
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        needed = {"knowledge", "response", "begin_label"}
        if not reader.fieldnames or not needed <= set(reader.fieldnames):
            raise ValueError(f"{path}: not a BEGIN TSV, header {reader.fieldnames} lacks {sorted(needed)}")
        for line, row in enumerate(reader, start=2):
            label = (row["begin_label"] or "").strip()
            if label == BEGIN_GENERIC:
                generic += 1
                continue
            if label not in (BEGIN_SUPPORTED, BEGIN_UNSUPPORTED):
                raise ValueError(f"{path}:{line}: unknown BEGIN label {label!r}")
            premises.append(row["knowledge"])
            hypotheses.append(row["response"])
            supported.append(label == BEGIN_SUPPORTED)
            models.append(row.get("model_name") or "")
    return BeginData(premises, hypotheses, supported, models, generic)


# --- HaluEval ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HaluEvalData:
    """HaluEval QA: each question gives a supported and an unsupported pair (labels by construction)."""

    premises: list[str]
    hypotheses: list[str]
    supported: list[bool]
    questions: list[int]
    """The question's index: both of its answers share it (keep them in one fold)."""


def load_halueval(path: str | Path) -> HaluEvalData:
    """Read HaluEval's ``qa`` JSON lines (``knowledge, question, right_answer, hallucinated_answer``)."""
    data = HaluEvalData([], [], [], [])
    with open(path, encoding="utf-8") as f:
        for index, line in enumerate(f):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                pairs = [(row["right_answer"], True), (row["hallucinated_answer"], False)]
                knowledge = row["knowledge"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{index + 1}: not a HaluEval QA row: {exc}") from exc
            for answer, supported in pairs:
                data.premises.append(knowledge)
                data.hypotheses.append(answer)
                data.supported.append(supported)
                data.questions.append(index)
    return data


# --- HTML report ------------------------------------------------------------------------


def reliability_png(report: CalibrationReport) -> bytes:
    """The reliability diagram as PNG bytes (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    if report.reliability:
        xs = [b.mean_score for b in report.reliability]
        ys = [b.supported_rate for b in report.reliability]
        sizes = [20 + 200 * b.weight / max(x.weight for x in report.reliability) for b in report.reliability]
        ax.plot(xs, ys, color="tab:blue")
        ax.scatter(xs, ys, s=sizes, color="tab:blue", label="bins (area = weight)")
    ax.axvline(report.recommended_threshold, color="tab:red", label=f"recommended threshold {report.recommended_threshold:.3f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean score in bin")
    ax.set_ylabel("share labelled supported by humans")
    ax.set_title(f"Reliability: {report.scorer or 'scorer'} (ECE {report.ece:.3f})")
    ax.legend(loc="upper left", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _fmt(value: float) -> str:
    return "n/a" if isinstance(value, float) and math.isnan(value) else f"{value:.3f}"


def write_html(report: CalibrationReport, path: str | Path, *, shipped: dict | None = None) -> Path:
    """A self-contained HTML report (the plot is an embedded PNG; no external assets).

    ``shipped``: the scorer version's entry in ``faithfulness/thresholds.json``, shown beside.
    """
    from rag_monitor.templating import render

    png = base64.b64encode(reliability_png(report)).decode("ascii")
    low, high = report.recommended_interval
    rows = [
        ("scorer", report.scorer or "unnamed"),
        ("pairs scored", f"{report.n} ({report.n_supported} supported, {report.n_unsupported} unsupported)"),
        ("pairs excluded (no score)", str(report.n_excluded)),
        ("threshold evaluated", _fmt(report.threshold)),
        ("balanced accuracy", _fmt(report.balanced_accuracy)),
        ("precision of the unsupported flag", _fmt(report.precision_unsupported)),
        ("recall of the unsupported flag", _fmt(report.recall_unsupported)),
        ("ROC AUC", _fmt(report.roc_auc)),
        ("expected calibration error (10 bins)", _fmt(report.ece)),
        ("recommended threshold (max balanced accuracy)", f"{_fmt(report.recommended_threshold)} "
         f"(95% bootstrap interval {_fmt(low)} to {_fmt(high)}, {report.n_bootstrap} resamples)"),
        ("balanced accuracy at the recommended threshold", _fmt(report.recommended_balanced_accuracy)),
    ]
    document = render("rag_monitor.review", "calibration.html", report=report, rows=rows, png=png, shipped=shipped)
    target = Path(path)
    target.write_text(document, encoding="utf-8")
    return target
