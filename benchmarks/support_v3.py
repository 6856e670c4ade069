"""support-v3 in ``faithfulness_ragtruth.py``: its features per pair (cached), its fit, its scores.

``features_of`` computes the answer features of every pair (cached in
``benchmarks/.cache/features-support-v3@1.json``; no embedding model, so a full run takes a few
minutes). ``fit`` fits the model on the tuning split only: RAGTruth even sources (both tasks),
BEGIN dev and the even HaluEval questions; every set weighs the same and, within a set, both
classes weigh the same, so that P(supported) = 0.5 sits near each set's best balanced accuracy
whatever its unsupported share. ``choose_l2`` picks the penalty by 5-fold cross-validation over
the tuning split, folds by source (or question): no source has rows on both sides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag_monitor.faithfulness.support_v3 import FEATURES, SupportV3Scorer, answer_features, read_contexts
from rag_monitor.faithfulness.support_v2 import LogisticModel
from rag_monitor.review.calibrate import _roc_auc
from support_v2 import scores, usable

PENALTIES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
FOLDS = 5


def blank_scorer() -> SupportV3Scorer:
    zeros = [0.0] * len(FEATURES)
    return SupportV3Scorer(threshold=0.5, model=LogisticModel(zeros, [1.0] * len(FEATURES), zeros, 0.0, FEATURES))


def features_of(scorer: SupportV3Scorer, rows: dict, deadline: float, cache_dir: Path, key: Callable, chunk: int,
                seconds: list[float]) -> np.ndarray | None:
    """(n, len(FEATURES)) features, a row of NaN for a claim-less answer; None when the budget ran out.
    CPU seconds per pair are appended to ``seconds``."""
    cache_dir.mkdir(exist_ok=True)
    path = cache_dir / f"features-{scorer.name}@{scorer.version}.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    keys = [key(p, h) for p, h in zip(rows["premises"], rows["hypotheses"])]
    missing = [i for i, k in enumerate(keys) if k not in cache]
    for start in range(0, len(missing), chunk * 10):
        if time.monotonic() > deadline:
            print(f"  {scorer.name}: budget spent, {len(missing) - start} pairs left (rerun to continue)", flush=True)
            return None
        part = missing[start:start + chunk * 10]
        cpu = time.process_time()
        for i in part:
            premise = rows["premises"][i]
            # Like the worker's scoring, every answer reads its context afresh (the cost a user pays).
            context = read_contexts([premise])
            x = answer_features([premise], rows["hypotheses"][i], context)
            cache[keys[i]] = None if x is None else [float(v) for v in x]
        seconds.append((time.process_time() - cpu) / len(part))
        path.write_text(json.dumps(cache))
    return np.array([[np.nan] * len(FEATURES) if cache[k] is None else cache[k] for k in keys])


def fit(parts: list[tuple[np.ndarray, np.ndarray]], l2: float) -> LogisticModel:
    """One model over ``parts`` (features, supported): each part, and each class within it, weighs the same."""
    xs, ys, ws = [], [], []
    for x, y in parts:
        ok = usable(x)
        x, y = x[ok], y[ok]
        xs.append(x)
        ys.append(y)
        ws.append(np.where(y, 0.5 / max(1, y.sum()), 0.5 / max(1, (~y).sum())))
    weights = np.concatenate(ws)
    return LogisticModel.fit(np.vstack(xs), np.concatenate(ys), weights * len(weights) / weights.sum(), l2=l2,
                             features=FEATURES)


def choose_l2(parts: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], judged: tuple[str, ...]) -> dict:
    """The penalty with the best mean out-of-fold ROC AUC over the ``judged`` parts (name -> x, y, groups)."""
    fold = {k: (g.astype(np.int64) * 2654435761 % 2**32) % FOLDS for k, (_, _, g) in parts.items()}
    table = {}
    for l2 in PENALTIES:
        out = {k: np.zeros(len(y)) for k, (_, y, _) in parts.items()}
        for f in range(FOLDS):
            m = fit([(x[fold[k] != f], y[fold[k] != f]) for k, (x, y, _) in parts.items()], l2)
            for k, (x, _, _) in parts.items():
                out[k][fold[k] == f] = scores(m, x[fold[k] == f])
        table[l2] = float(np.mean([_roc_auc(out[k], parts[k][1], np.ones(len(out[k]))) for k in judged]))
    best = max(table, key=lambda l2: table[l2])
    return {"l2": best, "out_of_fold_mean_roc_auc": {str(k): round(v, 4) for k, v in table.items()}}
