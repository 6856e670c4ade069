"""The offline faithfulness scorer against human labels on the committed BEGIN subset.

The same computation as ``rag-monitor calibrate --begin tests/data/begin/begin_dev_wow_200.tsv``
(200 human attribution labels, CC BY 4.0), written to ``results/calibration_begin.json`` so the
README's figures come from a results file.

    .venv/bin/python benchmarks/calibration_begin.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "calibration_begin.json"
BEGIN = ROOT / "tests" / "data" / "begin" / "begin_dev_wow_200.tsv"


def _load_scorer():
    try:  # the scorers' home after the faithfulness package split
        from rag_monitor.faithfulness import load_scorer
    except ImportError:
        from rag_monitor.faithfulness import load_scorer
    return load_scorer(None)


def main() -> dict:
    from rag_monitor.review.calibrate import calibrate, load_begin

    data = load_begin(BEGIN)
    scorer = _load_scorer()
    report = calibrate(scorer.score(data.premises, data.hypotheses), data.supported, scorer=scorer.name)
    result = {
        "script": "benchmarks/calibration_begin.py",
        "data": str(BEGIN.relative_to(ROOT)),
        "scorer": report.scorer,
        "n": report.n,
        "n_excluded": report.n_excluded,
        "threshold": report.threshold,
        "roc_auc": report.roc_auc,
        "balanced_accuracy": report.balanced_accuracy,
        "recommended_threshold": report.recommended_threshold,
        "recommended_interval": list(report.recommended_interval),
        "recommended_balanced_accuracy": report.recommended_balanced_accuracy,
        "ece": report.ece,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
