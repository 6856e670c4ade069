"""Calibration against human labels, on a committed subset of BEGIN scored by the lexical fallback."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from rag_monitor.faithfulness import LexicalScorer
from rag_monitor.faithfulness.thresholds import shipped_calibration
from rag_monitor.review.calibrate import calibrate, load_begin, load_halueval, write_html

DATA = Path(__file__).resolve().parents[1] / "data" / "begin"


@pytest.fixture(scope="module")
def begin_report():
    data = load_begin(DATA / "begin_dev_wow_200.tsv")
    scores = LexicalScorer().score(data.premises, data.hypotheses)
    return data, scores, calibrate(scores, data.supported, threshold=0.5, n_bootstrap=300, scorer="lexical-v1")


def test_begin_loader_maps_labels_and_excludes_generic():
    dev = load_begin(DATA / "begin_dev_wow_200.tsv")
    assert (len(dev.supported), sum(dev.supported), dev.n_generic) == (200, 82, 0)
    mixed = load_begin(DATA / "begin_test_wow_generic.tsv")
    assert mixed.n_generic == 6 and len(mixed.supported) == 14
    assert all(p and h for p, h in zip(mixed.premises, mixed.hypotheses))


def test_begin_loader_rejects_other_files(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="not a BEGIN TSV"):
        load_begin(bad)
    odd = tmp_path / "odd.tsv"
    odd.write_text("model_name\tdata_source\tknowledge\tmessage\tresponse\tbegin_label\nt5\twow\tk\tm\tr\tMaybe\n")
    with pytest.raises(ValueError, match="odd.tsv:2: unknown BEGIN label 'Maybe'"):
        load_begin(odd)


def test_lexical_fallback_on_begin_separates_supported_from_unsupported(begin_report):
    data, scores, report = begin_report
    assert report.n == 200 and report.n_unsupported == 118 and report.n_excluded == 0
    # The lexical check ranks human labels far better than chance on BEGIN (AUC about 0.90 here) ...
    assert report.roc_auc > 0.8
    # ... but 0.5 is a poor threshold for it: calibration recommends a higher one that does better.
    assert report.recommended_threshold > 0.5
    assert report.recommended_balanced_accuracy > report.balanced_accuracy
    low, high = report.recommended_interval
    assert low <= report.recommended_threshold <= high
    assert 0.0 <= report.ece <= 1.0
    assert sum(b.count for b in report.reliability) == 200


def test_metrics_match_a_hand_computed_example():
    scores = [0.1, 0.4, 0.35, 0.8, 0.9, 0.7]
    supported = [False, False, True, True, True, False]
    report = calibrate(scores, supported, threshold=0.5, n_bootstrap=50)
    # Flagged (< 0.5): 0.1, 0.4, 0.35 -> two truly unsupported, one supported; 0.7 missed.
    assert report.precision_unsupported == pytest.approx(2 / 3)
    assert report.recall_unsupported == pytest.approx(2 / 3)
    assert report.balanced_accuracy == pytest.approx(0.5 * (2 / 3 + 2 / 3))
    from sklearn.metrics import roc_auc_score

    assert report.roc_auc == pytest.approx(roc_auc_score(supported, scores))
    # Balanced accuracy peaks at 5/6 by flagging 0.1 and 0.35..0.4 differently: any best cut is reproducible.
    assert report.recommended_balanced_accuracy >= report.balanced_accuracy


def test_weights_and_none_scores():
    scores = [0.25, None, 0.9, 0.35]
    supported = [False, True, True, True]
    report = calibrate(scores, supported, weights=[1.0, 5.0, 1.0, 3.0], n_bootstrap=0)
    assert report.n == 3 and report.n_excluded == 1
    # Flagged: 0.25 (unsupported, w1), 0.35 (supported, w3): precision = 1 / (1 + 3).
    assert report.precision_unsupported == pytest.approx(0.25)
    assert report.ece == pytest.approx((1 * 0.25 + 1 * 0.1 + 3 * 0.65) / 5)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="labels"):
        calibrate([0.1], [True, False])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibrate([1.5], [True])
    with pytest.raises(ValueError, match="no scored pairs"):
        calibrate([None], [True])


def test_html_report_is_self_contained_with_a_reliability_plot(begin_report, tmp_path):
    _, _, report = begin_report
    shipped = shipped_calibration("lexical-v1", "1")
    page = write_html(report, tmp_path / "report.html", shipped=shipped).read_text()
    assert "lexical-v1" in page and "ROC AUC" in page and "recommended threshold" in page
    assert f"<td>{shipped['threshold']}</td>" in page and "balanced accuracy on begin_test (not calibrated on)" in page
    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert match and base64.b64decode(match.group(1)).startswith(b"\x89PNG")
    assert "http://" not in page and "https://" not in page


def test_the_report_escapes_what_it_shows(begin_report, tmp_path):
    _, scores, _ = begin_report
    report = calibrate([0.2, 0.9], [False, True], n_bootstrap=0, scorer="<script>alert(1)</script>")
    page = write_html(report, tmp_path / "report.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_halueval_loader_gives_each_question_a_supported_and_an_unsupported_pair(tmp_path):
    data = load_halueval(Path(__file__).resolve().parents[1] / "data" / "halueval" / "qa_one-turn_20.json")
    assert len(data.premises) == 40 and data.supported == [True, False] * 20
    assert data.questions[:4] == [0, 0, 1, 1] and data.hypotheses[0] == "Arthur's Magazine"
    scores = LexicalScorer().score(data.premises, data.hypotheses)
    report = calibrate(scores, data.supported, n_bootstrap=0)
    assert report.roc_auc > 0.8  # invented answers rarely share the knowledge's words
    bad = tmp_path / "bad.json"
    bad.write_text('{"knowledge": "k"}\n')
    with pytest.raises(ValueError, match="bad.json:1: not a HaluEval QA row"):
        load_halueval(bad)
