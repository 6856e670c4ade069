"""``rag-monitor calibrate --from-store``: the scorer against the store's own reviewers.

Per scorer version, on all releases and then per release: balanced accuracy at the threshold
the scores were taken at, ROC AUC and the best threshold, each with a bootstrap 95% interval,
and a text reliability table; the version's all-release report is also written as HTML with
the reliability plot (a PNG inside). Only the ``judge_calibration`` split's labels count.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rag_monitor.cli.common import store_from_args


def _interval(pair: tuple[float, float]) -> str:
    return f"[{pair[0]:.3f}, {pair[1]:.3f}]"


def calibrate_from_store(args: argparse.Namespace) -> int:
    from rag_monitor.faithfulness.thresholds import shipped_calibration
    from rag_monitor.review.calibrate import write_html
    from rag_monitor.review.store_calibration import MIN_LABELS, MIN_PER_CLASS, SPLIT, calibrated_threshold, calibration_groups, calibration_rows

    shares = tuple(float(x) for x in args.split_shares.split(","))
    _, store = store_from_args(args)
    try:
        rows = calibration_rows(store, args.scorer, shares)
    finally:
        store.close()
    groups = calibration_groups(rows, args.scorer)
    if not groups:
        raise ValueError(f"no {SPLIT} item has both a faithful yes and a faithful no label with a {args.scorer!r} score "
                         f"({len(rows)} labelled items in that split); review more or change --split-shares")
    print(f"{args.scorer}: {len(rows)} human faithful labels in the {SPLIT} split (the release split is never used)")
    for group in groups:
        r = group.report
        where = f"release {group.release}" if group.release is not None else "all releases"
        print(f"  version {group.version}, {where}: n={r.n} ({r.n_unsupported} unsupported), "
              f"balanced accuracy {r.balanced_accuracy:.3f} {_interval(r.balanced_accuracy_interval)} at threshold {r.threshold:g}, "
              f"ROC AUC {r.roc_auc:.3f} {_interval(r.roc_auc_interval)}, best threshold {r.recommended_threshold:.4f} "
              f"{_interval(r.recommended_interval)} (balanced accuracy {r.recommended_balanced_accuracy:.3f} there, in-sample)")
        if group.release is not None:
            continue
        print("    reliability: score bin, mean score, share labelled supported, labels")
        for b in r.reliability:
            print(f"    {b.low:.1f}-{b.high:.1f}  {b.mean_score:.3f}  {b.supported_rate:.3f}  {b.count}")
        out = Path(args.out)
        if len({g.version for g in groups}) > 1:
            out = out.with_name(f"{out.stem}-{group.version}{out.suffix}")
        write_html(r, out, shipped=shipped_calibration(args.scorer, group.version))
        print(f"    report with the reliability plot: {out}")
        adoption = calibrated_threshold(rows, args.scorer, group.version)
        print("    scorer_threshold auto: " + (f"would adopt {adoption.describe()}" if adoption else
              f"keeps the shipped threshold until {MIN_LABELS} labels, {MIN_PER_CLASS} of each verdict"))
    return 0
