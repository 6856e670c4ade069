"""Shipped thresholds chosen on real LLM answers (RAGTruth), measured where they were not chosen.

Data (``--data``, default ``/work/shared/data``; licences in its SOURCES.md):

- RAGTruth (Niu et al., ACL 2024, MIT): summarisation (news) and data-to-text (business
  records as JSON) answers written by six LLMs, with human-annotated hallucinated spans; an
  answer with a span is unsupported. ``--sources N`` takes a seeded sample of N sources per
  task (each source has six answers); default all 150;
- BEGIN test and the odd HaluEval questions, as in ``benchmarks/faithfulness.py``
  (``--begin-rows`` / ``--halueval-questions`` take the first rows; default all).

Protocol. The **calibration split** is the RAGTruth sources with an even index in the sample,
both tasks. The shipped threshold maximises the mean of the two tasks' balanced accuracies
there, among the thresholds that flag at most twice each task's true unsupported share (a
threshold that flags almost everything can score a fair balanced accuracy and still page from
the first hour). It is **reported on** the odd sources of each task, on BEGIN test and on the
odd HaluEval questions, none of which it was chosen on, with bootstrap 95% intervals and the
share it flags beside the true share. A **cross-task** view chooses the threshold the same way
on all of one task and measures it on all of the other. Nothing is tuned on a held-out set.

Scores are cached per scorer version in ``benchmarks/.cache/`` (support-v1 embeds every
sentence; on a loaded CPU it scores a few answers a second), so ``--budget-s`` can stop a run
and the next one carries on; results are written only once every pair is scored. Writes
``--out`` (default ``benchmarks/results/faithfulness_ragtruth.json``) and, unless ``--no-ship``, the shipped
thresholds in ``rag_monitor/faithfulness/thresholds.json``. Run::

    .venv/bin/python benchmarks/faithfulness_ragtruth.py [--data DIR] [--sources N] [--scorers lexical-v1,support-v1,support-v2,support-v3] [--cpu-sample N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import support_v2  # noqa: E402
import support_v3  # noqa: E402
from faithfulness import measured  # noqa: E402

from rag_monitor.faithfulness.thresholds import THRESHOLDS_FILE  # noqa: E402
from rag_monitor.review.calibrate import _balanced_accuracy, load_begin, load_halueval  # noqa: E402
from rag_monitor.review.ragtruth import load_ragtruth  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "faithfulness_ragtruth.json"
CACHE = ROOT / "benchmarks" / ".cache"
TASKS = ("summary", "data2txt")
FLAG_CAP = 2.0
"""The shipped threshold may flag at most this multiple of a data set's true unsupported share."""
CHUNK = 12


def load_sets(data: Path, sources: int | None, begin_rows: int | None, halueval_questions: int | None,
              tuning: bool = False) -> dict[str, dict]:
    """name -> {premises, hypotheses, supported, groups}; RAGTruth groups are source indexes. ``tuning``
    adds BEGIN dev and the even HaluEval questions (support-v2's fit: ``support_v2.TUNING_ONLY``)."""
    sets: dict[str, dict] = {}
    rng = np.random.default_rng(0)
    for task in TASKS:
        r = load_ragtruth(data / "ragtruth" / f"{task}.jsonl")
        n_sources = max(r.sources) + 1
        chosen = set(rng.permutation(n_sources)[:sources].tolist()) if sources else set(range(n_sources))
        keep = [i for i, s in enumerate(r.sources) if s in chosen]
        sets[task] = {"premises": [r.premises[i] for i in keep], "hypotheses": [r.hypotheses[i] for i in keep],
                      "supported": [r.supported[i] for i in keep], "groups": [r.sources[i] for i in keep]}
    b = load_begin(data / "begin" / "begin_test_wow.tsv")
    n = begin_rows or len(b.premises)
    sets["begin_test"] = {"premises": b.premises[:n], "hypotheses": b.hypotheses[:n], "supported": b.supported[:n],
                          "groups": list(range(n))}
    h = load_halueval(data / "halueval" / "qa_one-turn_data.json")
    for name, parity in (("halueval_odd_questions", 1), ("halueval_even_questions", 0)):
        if parity == 0 and not tuning:
            continue
        keep = [i for i, q in enumerate(h.questions) if q % 2 == parity and (halueval_questions is None or q < 2 * halueval_questions)]
        sets[name] = {"premises": [h.premises[i] for i in keep], "hypotheses": [h.hypotheses[i] for i in keep],
                      "supported": [h.supported[i] for i in keep], "groups": [h.questions[i] for i in keep]}
    if tuning:
        d = load_begin(data / "begin" / "begin_dev_wow.tsv")
        n = begin_rows or len(d.premises)
        sets["begin_dev"] = {"premises": d.premises[:n], "hypotheses": d.hypotheses[:n], "supported": d.supported[:n],
                             "groups": list(range(len(d.premises[:n])))}
    return sets


def _key(premise: str, hypothesis: str) -> str:
    return hashlib.sha256(f"{premise}\0{hypothesis}".encode()).hexdigest()[:32]


def cached_scores(scorer, rows: dict, deadline: float) -> np.ndarray | None:
    """Scores of every pair (a claim-less answer counts as supported, 1.0), or None when the
    budget ran out first; what was scored is kept for the next run."""
    from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair

    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"scores-{scorer.name}@{scorer.version}.json"
    cache = json.loads(path.read_text()) if path.exists() else {}
    keys = [_key(p, h) for p, h in zip(rows["premises"], rows["hypotheses"])]
    missing = [i for i, k in enumerate(keys) if k not in cache]
    worker = FaithfulnessWorker(scorer)
    for start in range(0, len(missing), CHUNK):
        if time.monotonic() > deadline:
            print(f"  {scorer.name}: budget spent, {len(missing) - start} pairs left (rerun to continue)", flush=True)
            return None
        chunk = missing[start:start + CHUNK]
        pairs = [Pair(str(i), [rows["premises"][i]], rows["hypotheses"][i]) for i in chunk]
        for i, s in zip(chunk, worker.score_pairs(pairs)):
            cache[keys[i]] = 1.0 if s.value is None else float(s.value)
        path.write_text(json.dumps(cache))
    return np.array([cache[k] for k in keys])


def choose(scores: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict:
    """The threshold maximising the mean balanced accuracy over ``scores``' sets, among those
    flagging at most FLAG_CAP x each set's true unsupported share."""
    pooled = np.unique(np.concatenate(list(scores.values())))
    candidates = np.concatenate([[pooled[0]], (pooled[1:] + pooled[:-1]) / 2, [min(1.0, pooled[-1] + 1e-6)]])
    best: tuple[float, float] | None = None
    for t in candidates:
        if any((s < t).mean() > FLAG_CAP * (~labels[k]).mean() for k, s in scores.items()):
            continue
        value = float(np.mean([_balanced_accuracy(s, labels[k], np.ones(len(s)), t) for k, s in scores.items()]))
        if best is None or value > best[1]:
            best = (float(t), value)
    assert best is not None  # the lowest candidate flags nothing
    return {"threshold": round(best[0], 4), "mean_balanced_accuracy": round(best[1], 4)}


def report(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    out = measured(scores, labels, threshold)
    out["true_unsupported_share"] = round(float((~labels).mean()), 4)
    out["flags_at_most_twice_the_true_share"] = bool(out["flagged_share"] <= FLAG_CAP * out["true_unsupported_share"])
    return out


def best_in_hindsight(scores: np.ndarray, labels: np.ndarray) -> dict:
    from rag_monitor.review.calibrate import _best_threshold, _roc_auc

    t, value = _best_threshold(scores, labels, np.ones(len(scores)))
    return {"threshold": round(t, 4), "balanced_accuracy": round(value, 4),
            "roc_auc": round(_roc_auc(scores, labels, np.ones(len(scores))), 4)}


def evaluate(scores: dict[str, np.ndarray], labels: dict[str, np.ndarray], groups: dict[str, np.ndarray], old: float) -> dict:
    even = {k: groups[k] % 2 == 0 for k in TASKS}
    cal = {f"{k}_even_sources": scores[k][even[k]] for k in TASKS}
    cal_y = {f"{k}_even_sources": labels[k][even[k]] for k in TASKS}
    chosen = choose(cal, cal_y)
    t = chosen["threshold"]
    unseen = {f"{k}_odd_sources": (scores[k][~even[k]], labels[k][~even[k]]) for k in TASKS}
    unseen |= {k: (scores[k], labels[k]) for k in ("begin_test", "halueval_odd_questions")}
    heldout = {k: report(s, y, t) for k, (s, y) in unseen.items()}
    cross = {}
    for train, test in (TASKS, TASKS[::-1]):
        c = choose({train: scores[train]}, {train: labels[train]})
        cross[f"chosen_on_{train}_measured_on_{test}"] = {"threshold": c["threshold"],
                                                          **report(scores[test], labels[test], c["threshold"])}
    return {
        "threshold": t,
        "calibration_split": {"sets": list(cal), "n": int(sum(len(s) for s in cal.values())),
                              "mean_balanced_accuracy": chosen["mean_balanced_accuracy"]},
        "heldout_at_shipped_threshold": heldout,
        "min_heldout_balanced_accuracy": min(v["balanced_accuracy"] for v in heldout.values()),
        "cross_task": cross,
        "previous_threshold": old,
        "heldout_at_previous_threshold": {k: report(s, y, old) for k, (s, y) in unseen.items()},
        "best_in_hindsight": {k: best_in_hindsight(scores[k], labels[k]) for k in scores},
    }


def cross_task_refit(refit, features: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> dict:
    """A model refitted by ``refit(x, y)`` on all of one RAGTruth task, its threshold chosen there,
    measured on the other task."""
    cross = {}
    for train, test in (TASKS, TASKS[::-1]):
        m = refit(features[train], labels[train])
        c = choose({train: support_v2.scores(m, features[train])}, {train: labels[train]})
        cross[f"refit_on_{train}_measured_on_{test}"] = {"threshold": c["threshold"],
                                                         **report(support_v2.scores(m, features[test]), labels[test], c["threshold"])}
    return cross


def fit_support_v2(features: dict[str, np.ndarray], labels: dict[str, np.ndarray], groups: dict[str, np.ndarray]):
    """support-v2's model fitted on the tuning split, its scores on every set, and a cross-task view
    that refits on all of one RAGTruth task (threshold chosen there too) and measures on the other."""
    even = {k: groups[k] % 2 == 0 for k in TASKS}
    model = support_v2.fit([(features[k][even[k]], labels[k][even[k]]) for k in TASKS]
                           + [(features[k], labels[k]) for k in support_v2.TUNING_ONLY])
    scores = {k: support_v2.scores(model, x) for k, x in features.items()}
    cross = cross_task_refit(lambda x, y: support_v2.fit([(x, y)]), features, labels)
    return model, scores, {"cross_task_refit": cross, "model": model.as_dict()}


def fit_support_v3(features: dict[str, np.ndarray], labels: dict[str, np.ndarray], groups: dict[str, np.ndarray]):
    """support-v3's penalty (group 5-fold CV on the tuning split) and model (the whole tuning split),
    its scores on every set, and the cross-task refit view (penalty kept)."""
    even = {k: groups[k] % 2 == 0 for k in TASKS}
    parts = {k: (features[k][even[k]], labels[k][even[k]], groups[k][even[k]]) for k in TASKS}
    parts |= {k: (features[k], labels[k], groups[k]) for k in support_v2.TUNING_ONLY}
    chosen = support_v3.choose_l2(parts, TASKS)
    model = support_v3.fit([(x, y) for x, y, _ in parts.values()], chosen["l2"])
    scores = {k: support_v2.scores(model, x) for k, x in features.items()}
    cross = cross_task_refit(lambda x, y: support_v3.fit([(x, y)], chosen["l2"]), features, labels)
    return model, scores, {"penalty": chosen, "cross_task_refit": cross, "model": model.as_dict()}


def cpu_per_answer(scorer, sets: dict, n: int) -> dict:
    """CPU seconds per answer of a fresh ``scorer`` (no score cache) on the first ``n`` answers of each
    RAGTruth task, through the worker as the agent scores them."""
    from rag_monitor.faithfulness.worker import FaithfulnessWorker, Pair

    out = {}
    for task in TASKS:
        rows = sets[task]
        pairs = [Pair(str(i), [rows["premises"][i]], rows["hypotheses"][i]) for i in range(min(n, len(rows["premises"])))]
        cpu = time.process_time()
        FaithfulnessWorker(scorer).score_pairs(pairs)
        out[task] = round((time.process_time() - cpu) / len(pairs), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--sources", type=int, help="RAGTruth sources per task, a seeded sample (default all 150)")
    parser.add_argument("--begin-rows", type=int, help="first BEGIN test rows (default all)")
    parser.add_argument("--halueval-questions", type=int, help="first HaluEval questions (default all 500)")
    parser.add_argument("--scorers", default="lexical-v1,support-v1")
    parser.add_argument("--budget-s", type=float, default=270.0, help="stop scoring after this long; rerun to continue")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file (under benchmarks/results/)")
    parser.add_argument("--no-ship", action="store_true", help="write the results, leave thresholds.json alone")
    parser.add_argument("--cpu-sample", type=int, default=0,
                        help="also measure CPU s/answer of each scorer and of support-v1 on this many answers per task")
    args = parser.parse_args(argv)

    import torch

    from rag_monitor.faithfulness import LexicalScorer, SupportScorer
    from rag_monitor.faithfulness.thresholds import shipped_threshold

    torch.set_num_threads(1)  # a shared CPU: more threads contend, they do not help
    names = args.scorers.split(",")
    sets = load_sets(args.data, args.sources, args.begin_rows, args.halueval_questions,
                     tuning=bool({"support-v2", "support-v3"} & set(names)))
    reported = {k: v for k, v in sets.items() if k not in support_v2.TUNING_ONLY}
    makers = {"lexical-v1": LexicalScorer, "support-v1": SupportScorer.load, "support-v2": support_v2.blank_scorer,
              "support-v3": support_v3.blank_scorer}
    deadline = time.monotonic() + args.budget_s
    given = list(argv if argv is not None else sys.argv[1:])
    budget = {i for i, a in enumerate(given) if a.startswith("--budget")}
    budget |= {i + 1 for i in budget if "=" not in given[i]}  # "--budget-s 300": its value too
    command = "python benchmarks/faithfulness_ragtruth.py " + shlex.join(a for i, a in enumerate(given) if i not in budget)
    results: dict = {"script": "benchmarks/faithfulness_ragtruth.py", "command": command.strip(),
                     "protocol": __doc__.split("Protocol.")[1].split("Scores are")[0].strip(),
                     "data": {k: {"n": len(v["supported"]), "unsupported": int(sum(not s for s in v["supported"]))}
                              for k, v in sets.items()},
                     "scorers": {}}
    table = json.loads(THRESHOLDS_FILE.read_text(encoding="utf-8"))
    complete = True
    for name in names:
        scorer = makers[name]()
        started = time.perf_counter()
        labels = {k: np.array(rows["supported"], dtype=bool) for k, rows in sets.items()}
        groups = {k: np.array(rows["groups"]) for k, rows in sets.items()}
        extra: dict = {}
        if name in ("support-v2", "support-v3"):
            cpu: list[float] = []
            module, fitter = (support_v2, fit_support_v2) if name == "support-v2" else (support_v3, fit_support_v3)
            features = {k: module.features_of(scorer, rows, deadline, CACHE, _key, CHUNK, cpu) for k, rows in sets.items()}
            if any(f is None for f in features.values()):
                complete = False
                continue
            model, scores, extra = fitter(features, labels, groups)
            if cpu:
                extra["cpu_seconds_per_answer_this_run"] = round(float(np.mean(cpu)), 3)
        else:
            model = None
            scores = {k: cached_scores(scorer, rows, deadline) for k, rows in reported.items()}
            if any(s is None for s in scores.values()):
                complete = False
                continue
        scores = {k: v for k, v in scores.items() if k in reported}
        entry = evaluate(scores, {k: labels[k] for k in scores}, {k: groups[k] for k in scores},
                         shipped_threshold(name, scorer.version))
        entry |= extra
        entry["seconds_this_run"] = round(time.perf_counter() - started, 1)
        results["scorers"][name] = {"version": scorer.version, **entry}
        print(name, entry["threshold"], json.dumps({k: (v["balanced_accuracy"], v["interval_95"], v["flagged_share"])
                                                    for k, v in entry["heldout_at_shipped_threshold"].items()}), flush=True)
        table["scorers"][f"{name}@{scorer.version}"] = {
            "threshold": entry["threshold"],
            "calibrated_on": "RAGTruth summary + data-to-text, even sources (real LLM answers, human labels)",
            "heldout_balanced_accuracy": {k: v["balanced_accuracy"] for k, v in entry["heldout_at_shipped_threshold"].items()},
            **({"model": model.as_dict(),
                "model_fitted_on": "RAGTruth even sources (both tasks), BEGIN dev, HaluEval even questions"} if model else {}),
        }
    if not complete:
        print("some pairs are not scored yet: nothing written")
        return 1
    if args.cpu_sample:
        results["cpu_seconds_per_answer"] = {"answers_per_task": args.cpu_sample, "one_torch_thread": True}
        for name in dict.fromkeys([*names, "support-v1"]):
            results["cpu_seconds_per_answer"][name] = cpu_per_answer(makers[name](), sets, args.cpu_sample)
        print("cpu s/answer", results["cpu_seconds_per_answer"], flush=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    if not args.no_ship:
        table["written_by"] = "benchmarks/faithfulness_ragtruth.py"
        THRESHOLDS_FILE.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {THRESHOLDS_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
