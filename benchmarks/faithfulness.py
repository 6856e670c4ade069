"""Faithfulness scorers against human and constructed labels, on data the threshold never saw.

Data (read from ``--data``, default ``/work/shared/data``; see its SOURCES.md for licences):

- BEGIN (Wizard of Wikipedia, human labels): dev (430 rows) and test (3,607 rows); "Generic"
  rows are excluded;
- HaluEval QA (500 questions): each question gives one supported pair (knowledge, right
  answer) and one unsupported pair (knowledge, hallucinated answer); labels by construction.

Protocol. The **calibration split** is BEGIN dev plus the HaluEval questions with an even
index; each scorer's shipped threshold is the one maximising balanced accuracy there. It is
**reported on** BEGIN test and the odd HaluEval questions, which it was not chosen on, with
bootstrap 95% intervals. A second view, 5-fold cross-validation within each data set
(HaluEval folds keep a question's two answers together), chooses the threshold on four folds
and measures on the fifth: it shows how much the threshold moves between data sets.

Writes ``benchmarks/results/faithfulness.json``. These BEGIN/HaluEval thresholds no longer ship:
they did not survive real LLM answers; ``benchmarks/faithfulness_ragtruth.py`` chooses the
shipped ones on RAGTruth. Run::

    .venv/bin/python benchmarks/faithfulness.py [--data /work/shared/data] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag_monitor.review.calibrate import _balanced_accuracy, _best_threshold, load_begin, load_halueval  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "faithfulness.json"
FOLDS = 5
BOOTSTRAP = 1000


def load_rows(data: Path, limit: int | None) -> dict[str, dict]:
    """name -> {premises, hypotheses, supported, groups} for every data set."""
    sets = {}
    for name, path in [("begin_dev", data / "begin" / "begin_dev_wow.tsv"), ("begin_test", data / "begin" / "begin_test_wow.tsv")]:
        b = load_begin(path)
        sets[name] = dict(premises=b.premises, hypotheses=b.hypotheses, supported=b.supported,
                          groups=list(range(len(b.premises))))
    h = load_halueval(data / "halueval" / "qa_one-turn_data.json")
    sets["halueval"] = dict(premises=h.premises, hypotheses=h.hypotheses, supported=h.supported, groups=h.questions)
    if limit:
        sets = {k: {f: v[:limit] for f, v in d.items()} for k, d in sets.items()}
    return sets


def scores_of(scorer, rows: dict) -> np.ndarray:
    from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair

    pairs = [Pair(str(i), [p], h) for i, (p, h) in enumerate(zip(rows["premises"], rows["hypotheses"]))]
    # A claim-less answer states nothing checkable: scored as supported here (1.0), as a reviewer would not flag it.
    return np.array([1.0 if s.value is None else s.value for s in FaithfulnessWorker(scorer).score_pairs(pairs)])


def interval(scores: np.ndarray, labels: np.ndarray, threshold: float, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ones = np.ones(len(scores))
    values = []
    for _ in range(BOOTSTRAP):
        i = rng.integers(0, len(scores), len(scores))
        values.append(_balanced_accuracy(scores[i], labels[i], ones[i], threshold))
    # nan: a resample with one class only (small sets)
    return float(np.nanpercentile(values, 2.5)), float(np.nanpercentile(values, 97.5))


def measured(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    ones = np.ones(len(scores))
    low, high = interval(scores, labels, threshold)
    return {"n": int(len(scores)), "unsupported": int((~labels).sum()),
            "balanced_accuracy": round(_balanced_accuracy(scores, labels, ones, threshold), 4),
            "interval_95": [round(low, 4), round(high, 4)],
            "flagged_share": round(float((scores < threshold).mean()), 4)}


def cross_validated(scores: np.ndarray, labels: np.ndarray, groups: list) -> dict:
    """Threshold chosen on 4 folds, balanced accuracy measured on the 5th (folds by group)."""
    fold = np.array([hash_group(g) % FOLDS for g in groups])
    values, thresholds = [], []
    for k in range(FOLDS):
        train, test = fold != k, fold == k
        t, _ = _best_threshold(scores[train], labels[train], np.ones(train.sum()))
        thresholds.append(t)
        values.append(_balanced_accuracy(scores[test], labels[test], np.ones(test.sum()), t))
    return {"folds": FOLDS, "balanced_accuracy_mean": round(float(np.mean(values)), 4),
            "balanced_accuracy_by_fold": [round(v, 4) for v in values],
            "thresholds_by_fold": [round(t, 4) for t in thresholds]}


def hash_group(group) -> int:
    # A fixed, process-independent fold assignment (Python's hash() of str is salted).
    return int(group) * 2654435761 % 2**32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--limit", type=int, default=None, help="rows per data set (a quick check; not for shipping)")
    args = parser.parse_args()

    from rag_monitor.faithfulness import LexicalScorer, SupportScorer

    sets = load_rows(args.data, args.limit)
    scorers = {"lexical-v1": LexicalScorer(), "support-v1": SupportScorer.load()}
    results: dict = {"protocol": __doc__.split("Protocol.")[1].split("Writes")[0].strip(), "scorers": {}}
    for name, scorer in scorers.items():
        started = time.perf_counter()
        scores = {k: scores_of(scorer, rows) for k, rows in sets.items()}
        labels = {k: np.array(rows["supported"], dtype=bool) for k, rows in sets.items()}
        odd = np.array([g % 2 == 1 for g in sets["halueval"]["groups"]])
        cal_s = np.concatenate([scores["begin_dev"], scores["halueval"][~odd]])
        cal_y = np.concatenate([labels["begin_dev"], labels["halueval"][~odd]])
        threshold, cal_bacc = _best_threshold(cal_s, cal_y, np.ones(len(cal_s)))
        threshold = round(threshold, 4)
        heldout = {
            "begin_test": measured(scores["begin_test"], labels["begin_test"], threshold),
            "halueval_odd_questions": measured(scores["halueval"][odd], labels["halueval"][odd], threshold),
        }
        results["scorers"][name] = {
            "version": scorer.version,
            "threshold": threshold,
            "calibration_split": {"sets": ["begin_dev", "halueval_even_questions"], "n": int(len(cal_s)),
                                  "balanced_accuracy": round(cal_bacc, 4)},
            "heldout_at_shipped_threshold": heldout,
            "at_0.5": {k: measured(scores[s][m], labels[s][m], 0.5)["balanced_accuracy"]
                       for k, s, m in [("begin_test", "begin_test", slice(None)), ("halueval_odd_questions", "halueval", odd)]},
            "cross_validation": {k: cross_validated(scores[k], labels[k], sets[k]["groups"]) for k in ("begin_test", "halueval")},
            "seconds": round(time.perf_counter() - started, 1),
        }
        print(name, json.dumps(results["scorers"][name]["heldout_at_shipped_threshold"]), flush=True)
    if args.limit:
        print("--limit given: nothing written")
        return
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
