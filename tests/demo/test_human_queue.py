"""The demo leaves a queue for the person trying it: items the simulated reviewer never claims."""

from __future__ import annotations

import pytest

from rag_monitor.demo.reviewer import HUMAN, SIMULATED, HumanQueue
from rag_monitor.store import open_store
from tests.store.conftest import make_record


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}", seed=1)
    yield s
    s.close()


def _fill(store, singles: int, pairs: int, start: int = 1) -> None:
    """``singles`` answers, then ``pairs`` shadow pairs stored whole and one still waiting for its half."""
    for i in range(start, start + singles):
        store.queue.enqueue(make_record(i), stratum="base", inclusion_prob=0.2)
    for i in range(start + singles, start + singles + pairs):
        shadow = make_record(i + 10_000, variant="shadow")
        store.queue.enqueue(make_record(i, variant="production"), stratum="shadow_pair", inclusion_prob=0.5,
                      pair_trace_id=shadow.trace_id, pair_record=shadow)
    store.queue.enqueue(make_record(start + 20_000), stratum="shadow_pair", inclusion_prob=0.5, pair_trace_id="f" * 32)


def _simulated_pass(store) -> list[int]:
    """What the simulated reviewer does: claim and label everything offered to it."""
    labelled = []
    while (item := store.review.claim(SIMULATED, 60.0)) is not None:
        store.review.submit_review(item.id, SIMULATED, {"faithful": "yes"})
        labelled.append(item.id)
    return labelled


def test_the_simulated_reviewer_never_sees_the_humans_share(store):
    human = HumanQueue(store, singles=10, pairs=2)
    _fill(store, singles=6, pairs=0)
    assert human.reserve() == 6  # the first pass: what there is
    first = _simulated_pass(store)
    _fill(store, singles=8, pairs=3, start=100)
    assert human.reserve() == 4 + 2  # the rest of the quota; the half-pair is left alone
    second = _simulated_pass(store)
    assert human.reserve() == 0  # quotas met

    seen_by_simulated = set(first) | set(second)
    mine = [store.review.claim(HUMAN, 60.0) for _ in range(12)]
    assert all(item is not None for item in mine) and store.review.claim(HUMAN, 60.0) is None
    assert not {item.id for item in mine} & seen_by_simulated
    assert sum(item.pair_record is not None for item in mine) == 2
    # The simulated reviewer labelled everything else, the unpaired half included.
    assert len(seen_by_simulated) == 6 + 8 + 3 + 2 - 12


def test_summary_says_how_many_wait_for_the_person(store):
    human = HumanQueue(store, singles=10, pairs=2)
    _fill(store, singles=12, pairs=2)
    human.reserve()
    _simulated_pass(store)
    # A second review the simulated reviewer asked for is the person's to give, too.
    store.queue.enqueue(make_record(500), stratum="base", inclusion_prob=0.2)
    item = store.review.claim(SIMULATED, 60.0)
    store.review.submit_review(item.id, SIMULATED, {"faithful": "yes"}, reviews_needed=2)
    assert human.waiting() == {"items": 13, "pairs": 2}

    from rag_monitor.demo.summary import DemoSummary, render_summary

    summary = DemoSummary(stages={}, releases=[], phases=[], drift=[], alerts=[], review_queue={}, review_by_stratum={},
                          thumbs_down_in_queue=0, thumbs_down_sent=0, urls={}, human_queue=human.waiting())
    assert "waiting for you: 13 items (2 of them shadow pairs)" in render_summary(summary)
