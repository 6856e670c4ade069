"""Prediction-powered unsupported rates over many simulated deployments with an imperfect scorer.

Per scorer setting (``rag_monitor/simulate/ppi.py``: AUC 0.9 calibrated on r1; the same scorer
after a restyling release r2 that raises its false-positive rate; AUC 0.75; AUC 0.6), the
scorer-only rate's bias against the one the simulator predicts from the scorer's error rates;
the prediction-powered 95% interval's coverage of the true rate (with a binomial interval); its
width against the human-only interval's (median, max); fallbacks to the human-only interval.
The short version runs in ``make test`` (``tests/oracle/test_ppi_oracle.py``). Writes
``results/ppi_oracle.json``.

    .venv/bin/python benchmarks/ppi_oracle.py [--deployments 2000] [--queries 20000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rag_monitor.estimators import wilson  # noqa: E402
from rag_monitor.simulate.ppi import SAMPLING, ScorerRelease, deployment, summarise  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "ppi_oracle.json"
RELEASES = [
    ScorerRelease.with_auc("r1", 0.3, 0.9),
    ScorerRelease.with_auc("r2", 0.3, 0.9, mu0=-0.3),
    ScorerRelease.with_auc("r3", 0.15, 0.75),
    ScorerRelease.with_auc("r4", 0.1, 0.6),
]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20000, help="answers per release per deployment")
    parser.add_argument("--first-seed", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    by_release: dict[str, list] = {r.name: [] for r in RELEASES}
    for seed in range(args.first_seed, args.first_seed + args.deployments):
        for outcome in deployment(seed, RELEASES, queries=args.queries):
            by_release[outcome.release].append(outcome)
    settings = {}
    for rel in RELEASES:
        s = summarise(by_release[rel.name])
        covered = round(s["ppi_coverage"] * s["deployments"])
        s["ppi_coverage_ci95"] = [round(x, 4) for x in wilson(s["ppi_coverage"], s["deployments"])]
        s["scorer"] = {"false_positive_rate": round(rel.false_positive_rate, 4), "true_positive_rate": round(rel.true_positive_rate, 4),
                       "true_unsupported_rate": rel.unsupported_rate, "covered": covered}
        settings[rel.name] = {k: round(v, 5) if isinstance(v, float) else v for k, v in s.items()}
    result = {
        "script": "benchmarks/ppi_oracle.py",
        "command": "python benchmarks/ppi_oracle.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "what": "simulated deployments: per release, answers with known unsupported labels, a scorer with known error "
                "rates, complaints oversampled, nested samples (scored at score_rate, reviewed within it); "
                "the agent's estimators on them",
        "code": {"commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()},
        "sampling": {"base_rate": SAMPLING.base_rate, "thumbs_down_rate": SAMPLING.thumbs_down_rate, "score_rate": SAMPLING.score_rate},
        "deployments": args.deployments, "queries_per_release": args.queries,
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "releases": settings,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
