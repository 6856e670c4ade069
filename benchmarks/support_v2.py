"""support-v2 in ``faithfulness_ragtruth.py``: its features per pair (cached), its fit, its scores.

support-v2 needs its logistic model fitted before it can score, so it does not go through the
plain ``cached_scores`` path. ``features_of`` computes the answer features of every pair with the
real MiniLM scorer (cached in ``benchmarks/.cache/features-support-v2@1.json``; the same pass
stores support-v1's score, the minimum sentence support, in v1's score cache, so both are
measured on the same answers). ``fit`` fits the model on the tuning split only: RAGTruth even
sources (both tasks), BEGIN dev and the even HaluEval questions, each of the four weighted
equally. ``cross_task`` refits on all of one RAGTruth task and measures on the other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rag_monitor.faithfulness.support_v2 import FEATURES, LogisticModel, SupportV2Scorer

TUNING_ONLY = ("begin_dev", "halueval_even_questions")
"""Sets loaded for support-v2's fit alone: never reported on."""


def blank_scorer() -> SupportV2Scorer:
    """The real scorer with a neutral model: only its features are used before the fit."""
    zeros = [0.0] * len(FEATURES)
    return SupportV2Scorer.load(threshold=0.5, model=LogisticModel(zeros, [1.0] * len(FEATURES), zeros, 0.0))


def features_of(scorer: SupportV2Scorer, rows: dict, deadline: float, cache_dir: Path, key: Callable, chunk: int,
                seconds: list[float]) -> np.ndarray | None:
    """(n, len(FEATURES)) features, a row of NaN for a claim-less answer; None when the budget ran out.
    CPU seconds per scored pair are appended to ``seconds``."""
    cache_dir.mkdir(exist_ok=True)
    path, v1_path = cache_dir / f"features-{scorer.name}@{scorer.version}.json", cache_dir / "scores-support-v1@1.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    v1 = json.loads(v1_path.read_text()) if v1_path.exists() else {}
    keys = [key(p, h) for p, h in zip(rows["premises"], rows["hypotheses"])]
    missing = [i for i, k in enumerate(keys) if k not in cache]
    for start in range(0, len(missing), chunk):
        if time.monotonic() > deadline:
            print(f"  {scorer.name}: budget spent, {len(missing) - start} pairs left (rerun to continue)", flush=True)
            return None
        part = missing[start:start + chunk]
        cpu = time.process_time()
        batch = [scorer.encode([rows["premises"][i]], rows["hypotheses"][i]) for i in part]
        vectors = scorer._vectors(scorer._texts(batch))
        for i, pair in zip(part, batch):
            checks = scorer._checks(pair, vectors)
            x = scorer._features(pair, checks)
            cache[keys[i]] = None if x is None else [float(v) for v in x]
            v1[keys[i]] = 1.0 if not checks else float(min(c.support for c in checks))
        seconds.append((time.process_time() - cpu) / len(part))
        path.write_text(json.dumps(cache))
        v1_path.write_text(json.dumps(v1))
    return np.array([[np.nan] * len(FEATURES) if cache[k] is None else cache[k] for k in keys])


def usable(x: np.ndarray) -> np.ndarray:
    """Rows with every feature (a claim-less answer has none)."""
    return ~np.isnan(x).any(axis=1)


def fit(parts: list[tuple[np.ndarray, np.ndarray]]) -> LogisticModel:
    """One model over ``parts`` (features, supported), each part weighing the same in total."""
    xs, ys, ws = [], [], []
    for x, y in parts:
        ok = usable(x)
        xs.append(x[ok])
        ys.append(y[ok])
        ws.append(np.full(ok.sum(), 1.0 / max(1, ok.sum())))
    weights = np.concatenate(ws)
    return LogisticModel.fit(np.vstack(xs), np.concatenate(ys), weights * len(weights) / weights.sum())


def scores(model: LogisticModel, x: np.ndarray) -> np.ndarray:
    """P(supported) per pair; a claim-less answer counts as supported (1.0), as for every scorer here."""
    out = np.ones(len(x))
    ok = usable(x)
    if ok.any():
        out[ok] = model.probability(x[ok])
    return out
