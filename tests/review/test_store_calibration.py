"""`rag-monitor calibrate --from-store` and `scorer_threshold: auto` on a store of reviewed, scored items.

Items are placed in a split through their document (a document's items share a split); scores
are drawn so that supported answers score above ~0.55 and unsupported ones below, with overlap.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from rag_monitor.record import Document
from rag_monitor.review.golden import assign_splits
from rag_monitor.review.store_calibration import MIN_LABELS, MIN_PER_CLASS
from rag_monitor.store import open_store
from rag_monitor.store.models import Score
from tests.review.test_review_api import sample_record


def doc_ids(split: str, count: int, start: int = 0) -> list[str]:
    """Document ids whose items land in ``split`` (the export's own hash decides)."""
    found, i = [], start
    while len(found) < count:
        row = {"trace_id": f"t{i}", "session_id": None, "contexts": [{"id": f"doc-{i}"}], "gold_doc_ids": []}
        assign_splits([row])
        if row["split"] == split:
            found.append(f"doc-{i}")
        i += 1
    return found


def add_reviewed(store, docs: list[str], unsupported: int, *, release: str, scorer: str = "lexical-v1", seed: int = 0,
                 version: str = "1") -> None:
    """One reviewed, scored item per document; the first ``unsupported`` are judged unfaithful."""
    rng = np.random.default_rng(seed)
    for k, doc in enumerate(docs):
        trace_id = f"{abs(hash((doc, release))) % 16**32:032x}"
        faithful = k >= unsupported
        record = sample_record(trace_id, release=release, session_id=None, variant="production",
                               delivered=[Document(doc, "Cancel under Settings > Billing.")], retrieved=[], filters=[])
        store.queue.enqueue(record, stratum="base", inclusion_prob=1.0)
        score = float(np.clip(rng.normal(0.75 if faithful else 0.35, 0.15), 0, 1))
        store.scores.upsert([Score(trace_id, scorer, score, version, threshold=0.9)])
        item = store.review.claim("alice", 60)
        store.review.submit_review(item.id, "alice", {"faithful": "yes" if faithful else "no", "correct": "yes"}, reviews_needed=1)


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    docs = doc_ids("judge_calibration", 70)
    add_reviewed(store, docs[:40], 15, release="r1", seed=1)
    add_reviewed(store, docs[40:], 12, release="r2", seed=2)
    # The release split, all judged unfaithful: counting it would change every figure.
    add_reviewed(store, doc_ids("release", 25), 25, release="r1", seed=3)
    store.close()
    return url


def test_calibrate_from_store_reports_the_judge_calibration_split_per_release(store_url, tmp_path):
    empty = tmp_path / "cwd"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "calibrate", "--from-store", "--store-url", store_url,
                           "--scorer", "lexical-v1", "--out", "cal.html"], capture_output=True, text=True, cwd=empty)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "lexical-v1: 70 human faithful labels in the judge_calibration split" in out
    line = re.compile(r"version 1, (all releases|release r\d): n=(\d+) \((\d+) unsupported\), balanced accuracy ([\d.]+) "
                      r"\[([\d.]+), ([\d.]+)\] at threshold 0.9, ROC AUC ([\d.]+) \[([\d.]+), ([\d.]+)\], best threshold ([\d.]+) "
                      r"\[([\d.]+), ([\d.]+)\]")
    found = {m.group(1): m.groups()[1:] for m in line.finditer(out)}
    assert set(found) == {"all releases", "release r1", "release r2"}, out
    n, unsupported, bacc, blo, bhi, auc, alo, ahi, best, tlo, thi = found["all releases"]
    assert (int(n), int(unsupported)) == (70, 27)
    assert float(blo) <= float(bacc) <= float(bhi) and float(alo) <= float(auc) <= float(ahi)
    assert float(auc) > 0.85 and 0.4 < float(best) < 0.7 and float(tlo) <= float(best) <= float(thi)
    assert [int(found[r][0]) for r in ("release r1", "release r2")] == [40, 30]
    # The text reliability table and the HTML report with its plot.
    assert re.search(r"reliability: score bin.*\n(    0\.\d-\d\.\d  [\d.]+  [\d.]+  \d+\n)+", out)
    html = (empty / "cal.html").read_text()
    assert "data:image/png;base64," in html
    assert "keeps the shipped threshold until 200 labels, 30 of each verdict" in out


def test_calibrate_from_store_says_in_one_line_when_nothing_is_labelled(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(url).close()
    done = subprocess.run([sys.executable, "-m", "rag_monitor.cli", "calibrate", "--from-store", "--store-url", url],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "judge_calibration" in done.stderr, done.stderr


def test_auto_threshold_waits_for_the_label_minimums_then_shows_in_rag_scorer_info(start_agent):
    agent = start_agent(scorer_threshold="auto")
    shipped = agent.agent.scoring.scorer.threshold
    info = 'rag_scorer_info{{scorer="lexical-v1",threshold="{t}",threshold_source="{s}",version="1"}} 1.0'
    assert info.format(t=f"{shipped:g}", s="shipped") in agent.scrape()
    docs = doc_ids("judge_calibration", MIN_LABELS + 10)
    # 210 labels but only 20 unsupported: below the per-verdict minimum, the shipped threshold stands.
    add_reviewed(agent.store, docs[:MIN_LABELS + 10], MIN_PER_CLASS - 10, release="r1", seed=4)
    assert agent.agent.jobs.run("scorer_threshold")
    assert agent.agent.scoring.scorer.threshold == shipped and agent.agent.threshold_adopter.adoption is None
    # 20 more unsupported: 230 labels, 40 unsupported.
    add_reviewed(agent.store, doc_ids("judge_calibration", 20, start=10_000), 20, release="r1", seed=5)
    agent.agent.jobs.run("scorer_threshold")
    adoption = agent.agent.threshold_adopter.adoption
    assert adoption is not None and (adoption.n, adoption.n_unsupported) == (230, 40)
    assert 0.4 < adoption.threshold < 0.7 and agent.agent.scoring.scorer.threshold == adoption.threshold
    scraped = agent.scrape()
    assert info.format(t=f"{adoption.threshold:g}", s="calibrated") in scraped
    assert 'threshold_source="shipped"' not in scraped


def test_a_fixed_threshold_setting_and_a_bad_one(start_agent):
    from rag_monitor.settings import load_settings

    agent = start_agent(scorer_threshold="0.42")
    assert agent.agent.scoring.scorer.threshold == 0.42 and agent.agent.threshold_adopter is None
    assert 'threshold="0.42",threshold_source="setting"' in agent.scrape()
    with pytest.raises(ValueError, match="scorer_threshold.*not shipped, auto or a number"):
        load_settings(overrides={"scorer_threshold": "sometimes"})
