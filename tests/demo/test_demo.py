"""The demo in its shortened mode tells the story: drift, a bad release caught with triage, complaints reviewed.

The app and traffic tests use the real corpus, the real all-MiniLM-L6-v2 and the real SDK
(an in-memory exporter); the end-to-end test runs the whole demo against a real agent, and a
real Prometheus and Alertmanager where installed (required under CI).
"""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from rag_monitor.demo.corpus import load_corpus
from tests.services import require

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def app(corpus, tmp_path_factory):
    import torch
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rag_monitor.demo.app import GOOD_RELEASE, MiniLMEmbedder, SupportApp
    from rag_monitor.sdk import init

    torch.set_num_threads(1)
    exporter = InMemorySpanExporter()
    monitor = init(service_name="support-bot", release="r1", span_exporter=exporter, batch=False)
    application = SupportApp(corpus, monitor, MiniLMEmbedder(), GOOD_RELEASE, cache_dir=tmp_path_factory.mktemp("cache"))
    application.exporter = exporter
    return application


def test_corpus_has_current_and_archived_versions_of_a_policy(corpus):
    refunds = [d for d in corpus.documents if d.metadata.get("family") == "refunds" and d.metadata["locale"] == "en"]
    assert sorted(d.metadata["archived"] for d in refunds) == [False, True]
    assert corpus.policy_questions[0].gold_for(corpus, "acme", "en") == ("policy-refunds-v2",)
    assert len(corpus.nq_questions) == 80 and len(corpus.unanswerable_questions) == 20


def test_good_release_cites_the_current_policy_and_records_every_stage(app, corpus):
    from rag_monitor.demo.app import User

    app.exporter.clear()
    answer = app.ask("How many days do I have to ask for a refund?", User("u1", "acme", "en", "s1"))
    assert answer.citations[0] == "policy-refunds-v2"
    assert "30 days" in answer.text and not answer.refused
    assert "policy-refunds-v1" in answer.relevance_excluded_ids  # archived: dropped by the relevance filter
    spans = app.exporter.get_finished_spans()
    stages = {s.attributes.get("rag.stage") for s in spans}
    assert {"retrieve", "embed", "filter", "rerank", "context", "generate"} <= stages
    embed = next(s for s in spans if s.attributes.get("rag.stage") == "embed")
    assert len(embed.attributes["embedding.embeddings.0.embedding.vector"]) == 384
    relevance = next(s for s in spans if s.attributes.get("rag.filter.kind") == "relevance")
    assert "policy-refunds-v1" in relevance.attributes["rag.filter.excluded_ids"]


def test_stage_spans_are_timed_by_the_script_not_by_the_machine(app):
    """On a busy machine the app's own compute takes long; the spans still report the script's stage
    durations (r2: its base plus +0.35 s), stages in order inside the root, which ends with the last."""
    import time
    from types import SimpleNamespace

    from rag_monitor.demo.app import BAD_RELEASE, User
    from rag_monitor.demo.signals import LookupCache
    from rag_monitor.demo.timing import StageDurations

    slow = app.with_release(BAD_RELEASE, app.monitor)
    slow.caches = {"embedding": LookupCache(), "retrieval": LookupCache()}
    encode = app.embedder.encode
    slow.embedder = SimpleNamespace(encode=lambda texts: (time.sleep(1.0), encode(texts))[1])  # a loaded machine
    app.exporter.clear()
    began = time.monotonic()
    slow.ask("How many days do I have to ask for a refund?", User("u1", "acme", "en", "s-slow"))
    assert time.monotonic() - began >= 1.0
    spans = app.exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "rag.query")
    stages = sorted((s for s in spans if s is not root), key=lambda s: (s.start_time, s.end_time))
    d = StageDurations()
    base = d.embed_s + d.retrieve_s + d.rerank_s + d.generate_s
    delays = BAD_RELEASE.retrieval_delay_s + BAD_RELEASE.generation_delay_s
    seconds = (root.end_time - root.start_time) / 1e9
    assert delays + base * (1 - d.jitter / 2) <= seconds <= delays + base * (1 + d.jitter / 2) < 1.0
    assert [s.attributes["rag.stage"] for s in stages] == ["embed", "retrieve", "filter", "filter", "rerank", "context", "generate"]
    assert all(a.end_time <= b.start_time for a, b in zip(stages, stages[1:]))
    assert root.start_time == stages[0].start_time and root.end_time == stages[-1].end_time
    generate = stages[-1]
    assert (generate.end_time - generate.start_time) / 1e9 >= BAD_RELEASE.generation_delay_s
    assert generate.attributes["rag.generation.time_to_first_token_s"] == pytest.approx(seconds)


def test_entitlement_filter_keeps_other_tenants_documents_out(app):
    from rag_monitor.demo.app import User

    acme = app.ask("Where can I download my invoices?", User("u1", "acme", "en", "s1"))
    globex = app.ask("Where can I download my invoices?", User("u2", "globex", "en", "s2"))
    assert "policy-invoices-globex" not in acme.delivered_ids
    assert "policy-invoices-acme" not in globex.delivered_ids


def test_bad_release_answers_from_the_archived_policy(app, corpus):
    from rag_monitor.demo.app import BAD_RELEASE, User

    bad = app.with_release(replace(BAD_RELEASE, retrieval_delay_s=0.0, generation_delay_s=0.0), app.monitor)
    answer = bad.ask("How many days do I have to ask for a refund?", User("u1", "acme", "en", "s1"))
    assert answer.citations[0] == "policy-refunds-v1"
    assert "policy-refunds-v2" in answer.relevance_excluded_ids


def test_bad_release_adds_unsupported_sentences_the_offline_scorer_flags(app, corpus):
    from rag_monitor.demo.app import BAD_RELEASE
    from rag_monitor.demo.traffic import build_script, plan_phases
    from rag_monitor.faithfulness import SupportScorer

    scorer = SupportScorer.load()
    bad = app.with_release(replace(BAD_RELEASE, retrieval_delay_s=0.0, generation_delay_s=0.0), app.monitor)
    contents = {d.id: d.content for d in corpus.documents}
    script = build_script(plan_phases(quick=True)[-1], corpus, seed=3)[:30]
    flagged = {}
    for name, release in (("r1", app), ("r2", bad)):
        answers = [a for a in (release.ask(s.question.text, s.user) for s in script) if not a.refused]
        values = scorer.score([[contents[i] for i in a.delivered_ids] for a in answers], [a.text for a in answers])
        flagged[name] = sum(v is not None and v < scorer.threshold for v in values) / len(answers)
    # r1's extractive answers stay faithful; r2 embellishes about half of its answers.
    assert flagged["r1"] <= 0.05 and flagged["r2"] >= 0.3, flagged


def test_generator_refuses_when_nothing_supports_an_answer(app):
    from rag_monitor.demo.app import User

    answer = app.ask("zebra quantum marmalade orbit", User("u1", "acme", "en", "s1"))
    assert answer.refused and answer.citations == ()


def test_the_retrieval_hook_serves_the_deployed_release_and_the_rebuild_reshuffles_the_probes(app, corpus):
    from rag_monitor.demo.app import BAD_RELEASE
    from rag_monitor.demo.probes import PROBE_K, RetrievalHook, expected_overlap, probe_queries
    from rag_monitor.agent.probes import HttpRetriever, ProbeError

    bad = app.with_release(BAD_RELEASE, None)
    query = probe_queries(corpus)[0]
    with RetrievalHook() as hook:
        retriever = HttpRetriever(hook.url, timeout_s=30)
        try:
            with pytest.raises(ProbeError) as starting:
                retriever(query, PROBE_K)
            assert starting.value.reason == "http_status"  # 503 until an app is deployed
            hook.deploy(app)
            good_ids = retriever(query, PROBE_K)
            hook.deploy(bad)
            bad_ids = retriever(query, PROBE_K)
        finally:
            retriever.close()
    assert good_ids == tuple(i for i, _ in app.retrieve_top_k(query, PROBE_K)) and len(good_ids) == PROBE_K
    assert bad_ids == tuple(i for i, _ in bad.retrieve_top_k(query, PROBE_K))
    assert expected_overlap(corpus, app, app) == {"jaccard": 1.0, "rbo": 1.0}
    # Dense-only retrieval moves a good part of the top-8: far enough for the alert (RBO < 0.9).
    reshuffled = expected_overlap(corpus, app, bad)
    assert reshuffled["rbo"] < 0.9 and reshuffled["jaccard"] < 0.9


def test_traffic_script_is_deterministic_with_a_seed(corpus):
    from rag_monitor.demo.traffic import build_script, plan_phases

    phases = plan_phases(quick=True)
    first = [(s.question.text, s.user.id) for s in build_script(phases[1], corpus, seed=3)]
    again = [(s.question.text, s.user.id) for s in build_script(phases[1], corpus, seed=3)]
    other = [(s.question.text, s.user.id) for s in build_script(phases[1], corpus, seed=4)]
    assert first == again and first != other
    # The shift phase really brings new topics.
    baseline = build_script(phases[0], corpus, seed=3)
    shift = build_script(phases[1], corpus, seed=3)
    share = lambda script: sum(s.question.topic.startswith("nq") for s in script) / len(script)  # noqa: E731
    assert share(shift) > share(baseline) + 0.3


def test_the_full_demo_has_a_provider_update_and_the_quick_one_keeps_its_three_phases():
    from rag_monitor.demo.traffic import MODEL_VERSIONS, plan_phases

    assert [p.name for p in plan_phases(quick=True)] == ["baseline", "shift", "bad-release"]
    assert all(p.release.model_version is None for p in plan_phases(quick=True))
    full = {p.name: p for p in plan_phases(quick=False)}
    assert list(full) == ["baseline", "shift", "provider-update", "bad-release"]
    update, shift = full["provider-update"], full["shift"]
    assert update.release.name == shift.release.name == "r1"  # no release: only the provider's version moved
    assert (shift.release.model_version, update.release.model_version) == MODEL_VERSIONS
    assert update.release.generation_delay_s > shift.release.generation_delay_s


def test_the_provider_update_is_a_model_change_the_agent_exports_and_the_summary_shows(app, start_agent):
    """The demo app's generate span reports the provider's version: a new one under the same
    requested model, with no release, is a ``model`` change (the triage's and the dashboard's)."""
    import rag_monitor
    from rag_monitor.demo.app import GENERATOR_MODEL, User
    from rag_monitor.demo.summary import change_lines, render_changes
    from rag_monitor.demo.traffic import plan_phases
    from tests.services import wait_until

    agent = start_agent()
    monitor = rag_monitor.init(service_name="support-bot", endpoint=agent.otlp_url, release="r1")
    phases = {p.name: p for p in plan_phases(quick=False)}
    user = User("u1", "acme", "en", "s1")
    try:
        for phase, n in (("shift", 3), ("provider-update", 2)):
            deployed = app.with_release(replace(phases[phase].release, generation_delay_s=0.0), monitor)
            for _ in range(n):
                deployed.ask("How many days do I have to ask for a refund?", user)
            assert monitor.force_flush(10)
            wait_until(lambda: agent.metric_sum("rag_queries_total") >= (3 if phase == "shift" else 5), timeout=30,
                       what=f"the {phase} queries")
    finally:
        monitor.shutdown()
    new_version = f"{GENERATOR_MODEL}-{phases['provider-update'].release.model_version}"
    assert agent.metric("rag_change_events_total", {"kind": "model"}) == 1.0  # the first version is the baseline
    assert agent.metric("rag_change_last_timestamp_seconds", {"kind": "model", "change": new_version}) is not None
    changes = change_lines(agent.agent.registry)
    assert ("model", new_version) in [(kind, change) for kind, change, _ in changes]
    assert any(line.strip().startswith(f"model    {new_version}") for line in render_changes(changes))


@pytest.mark.timeout(900)  # a bound for a loaded machine: the quick demo takes about 4 minutes alone
def test_quick_demo_tells_the_story(tmp_path, app, corpus, monkeypatch, capsys):
    """Drift raises the drift verdict; the bad release raises false-exclusion, latency and
    faithfulness alerts with the regression triage; the thumbs-down answers reach the review queue."""
    from rag_monitor.demo.run import DemoOptions, run_demo
    from rag_monitor.demo.services import AlertingStack

    out = io.StringIO()
    result = run_demo(DemoOptions(quick=True, fresh=True, phoenix=False, data_dir=tmp_path / "demo", progress=None, out=out))

    shift_verdicts = [d for d in result.drift if d["phase"] == "shift"]
    assert any(d["is_drift"] for d in shift_verdicts), result.drift
    r1, r2 = (next(r for r in result.summary.releases if r.release == name) for name in ("r1", "r2"))
    assert r2.false_exclusion_rate is not None and r2.false_exclusion_rate > 0.3
    assert r1.false_exclusion_rate in (None, 0.0)
    assert r2.p50_p95_p99[1] > r1.p50_p95_p99[1]
    # The offline scorer (support-v1) sees r2's invented numbers, steps and contradictions.
    assert r2.faithfulness_unsupported is not None and r2.faithfulness_unsupported > 0.2
    assert r1.faithfulness_unsupported is not None and r1.faithfulness_unsupported < 0.1
    sent = {t for p in result.phases for t in p.thumbs_down_trace_ids}
    assert sent and result.summary.thumbs_down_in_queue == len(sent)
    # The person trying the demo finds a queue of their own: answers and at least one shadow pair.
    waiting = result.summary.human_queue
    assert waiting["items"] >= 10 and waiting["pairs"] >= 1, waiting
    assert f"waiting for you: {waiting['items']} items" in result.text
    assert "Latency per stage" in result.text and "Alerts that fired" in result.text
    # r2 ships a stale index (hours of lag, old versions served) and a cache regression.
    s1, s2 = (next(s for s in result.summary.signals if s.release == name) for name in ("r1", "r2"))
    assert s1.index_events == len(corpus.documents) and s1.freshness_p50_p99_s[1] < 300
    assert s2.index_events > 0 and s2.freshness_p50_p99_s[0] > 3600
    assert s1.stale_share == 0 and s1.checked_queries > 0
    assert s2.stale_share is not None and s2.stale_share > 0.2
    assert s1.cache_hit_rates["embedding"] > 2 * s2.cache_hit_rates["embedding"]
    assert s1.cache_hit_rates["prompt"] > 0.3 and s2.cache_hit_rates["prompt"] == 0
    assert all(s1.cost_by_component[c] > 0 for c in ("embedding", "retrieval", "rerank", "generation", "storage"))
    assert "Freshness, caches, cost" in result.text
    # The fixed pipeline ran in shadow beside r2; the blind pairwise reviews prefer it where r2
    # served an archived policy, and the summary shows the shadow report.
    (fixed,) = result.summary.shadow.candidates
    assert fixed.candidate == "r2-fix" and fixed.reviewed > 0
    # The printed report commands read the demo's store from any directory, through its agent.yaml.
    import json
    import shlex

    from rag_monitor.cli import main as cli

    commands = [shlex.split(line) for line in out.getvalue().splitlines()
                if line.startswith("  rag-monitor ") and "--config" in line]
    assert {tuple(c[1:3]) for c in commands} >= {("shadow", "report"), ("drift", "report"), ("review", "report")}, commands
    assert all(c[c.index("--config") + 1] == str(tmp_path / "demo" / "agent.yaml") for c in commands)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert cli([*next(c for c in commands if c[1:3] == ["shadow", "report"])[1:], "--json"]) == 0
    (reported,) = json.loads(capsys.readouterr().out)["candidates"]
    assert (reported["candidate"], reported["reviewed"]) == ("r2-fix", fixed.reviewed)
    assert cli(next(c for c in commands if c[1:3] == ["review", "report"])[1:]) == 0
    assert list(elsewhere.iterdir()) == []  # no store of its own
    (on_archived,) = result.summary.shadow_archived.candidates
    assert on_archived.win.wins > 0 and on_archived.win.losses == 0 and on_archived.win.low > 0.5, on_archived.win
    assert "Shadow candidate vs production" in result.text and "win rate vs production" in result.text
    # The first probe run pins; the bad release's index rebuild drops the overlap to exactly what the
    # two releases' top-k give when compared directly.
    from rag_monitor.demo.app import BAD_RELEASE
    from rag_monitor.demo.probes import expected_overlap

    probes = {p.phase: p for p in result.summary.probes}
    assert (probes["baseline"].jaccard, probes["baseline"].rbo, probes["shift"].rbo) == (1.0, 1.0, 1.0)
    expected = expected_overlap(corpus, app, app.with_release(BAD_RELEASE, None))
    assert probes["bad-release"].jaccard == pytest.approx(expected["jaccard"])
    assert probes["bad-release"].rbo == pytest.approx(expected["rbo"])
    assert probes["bad-release"].compared == 12 and "Neighbour stability" in result.text

    require(AlertingStack.available(), "prometheus and prometheus-alertmanager binaries")
    firing = result.summary.alerts
    by_name = {}
    for alert in firing:
        by_name.setdefault(alert["labels"]["alertname"], alert)
    assert by_name["RagDriftDetected"]["labels"]["triage"] == "drift", firing
    # The bad release's unsupported answers page, scored by the offline default. (Its triage is not
    # asserted: in quick mode the 20 s release window can close before sampled answers are scored.)
    assert by_name["RagFaithfulnessLow"]["labels"]["scorer"] == "support-v1", sorted(by_name)
    # The reshuffle pages only after the bad release (never during r1's phases), as a regression.
    overlap_pages = [a["labels"] for a in result.alerts
                     if a["labels"].get("alertname") == "RagNeighbourOverlapDropped" and a.get("status") == "firing"]
    assert {"triage": "regression", "suspected_release": "r2"}.items() <= overlap_pages[0].items(), overlap_pages
    assert all(labels.get("suspected_release") != "r1" for labels in overlap_pages), overlap_pages
    # Every page on r2's series is a regression after r2. (On a loaded machine r1's own latency can
    # pass the demo's warning SLO before r2: that alert is r1's, and rightly drift.)
    for name in ("RagQueryLatencyOverSLO", "RagFilterFalseExclusionsHigh"):
        on_r2 = [a["labels"] for a in firing if a["labels"]["alertname"] == name and a["labels"].get("release") == "r2"]
        assert on_r2, (name, sorted(by_name))
        assert all(labels["triage"] == "regression" and labels.get("suspected_release") == "r2" for labels in on_r2), on_r2


@pytest.mark.timeout(900)  # a bound for a loaded machine: about 2 minutes alone
def test_the_provider_update_pages_as_a_regression_after_the_model_change(tmp_path):
    """The full demo's provider update, after r1's baseline and with no release between: the latency
    page is triaged as a suspected regression after the model change, and the summary says so. (On
    a loaded machine r1's own p95 can pass the demo's warning SLO before the update: that warning is
    drift, rightly, and the page that begins at the update is its own incident.)"""
    from rag_monitor.demo.app import GENERATOR_MODEL
    from rag_monitor.demo.run import DemoOptions, run_demo
    from rag_monitor.demo.services import AlertingStack
    from rag_monitor.demo.traffic import MODEL_VERSIONS

    require(AlertingStack.available(), "prometheus and prometheus-alertmanager binaries")
    result = run_demo(DemoOptions(quick=False, fresh=True, phoenix=False, data_dir=tmp_path / "demo", progress=None,
                                  out=io.StringIO(), phases=("baseline", "provider-update"), scale=0.75))
    change = f"model {GENERATOR_MODEL}-{MODEL_VERSIONS[1]}"
    assert {c[:2] for c in result.summary.changes} == {("release", "r1"), ("model", change.split()[1])}  # r1: the first
    pages = [a for a in result.summary.alerts
             if a["labels"]["alertname"] == "RagQueryLatencyOverSLO" and a["labels"]["severity"] == "page"]
    assert pages, result.summary.alerts
    assert {"triage": "regression", "suspected_change": change}.items() <= pages[0]["labels"].items(), pages
    assert "suspected_release" not in pages[0]["labels"]  # no release is blamed
    lines = result.text.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.split()[:4] == ["RagQueryLatencyOverSLO", "page", "r1", "p99"]]
    assert lines[at + 1].strip().startswith(f"triage: suspected regression after {change}:"), lines[at:at + 2]


def test_the_summary_shows_a_latency_page_beside_the_warning_with_its_own_triage():
    """The p99 page that began at a model change while the p95 warning fired as drift is its own line."""
    from rag_monitor.demo.summary import _firing_first

    def alert(quantile: str, severity: str, triage: str) -> dict:
        return {"status": "firing", "labels": {"alertname": "RagQueryLatencyOverSLO", "variant": "production",
                                               "quantile": quantile, "severity": severity, "triage": triage}}

    lines = _firing_first([alert("p95", "warning", "drift"), alert("p99", "page", "regression"), alert("p95", "warning", "drift")])
    assert [(a["labels"]["quantile"], a["labels"]["triage"]) for a in lines] == [("p95", "drift"), ("p99", "regression")]


def test_signal_lines_from_known_metrics():
    """The summary's freshness, stale share, cache and cost-by-component figures, from known counts."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from rag_monitor.alerts.metrics import AgentMetrics
    from rag_monitor.demo.signals import render_signals, signal_lines

    m = AgentMetrics(CollectorRegistry())
    for usd in (0.003, 0.001):
        m.query_cost.labels("r1", "production").observe(usd)
    for component, usd in (("generation", 0.002), ("generation", 0.001), ("rerank", 0.001)):
        m.component_cost.labels("r1", "production", component).observe(usd)
    m.index_checked_queries.labels("r1", "production").inc(4)
    m.index_stale_queries.labels("r1", "production").inc(1)
    m.cache_requests.labels("r1", "production", "embedding", "hit").inc(3)
    m.cache_requests.labels("r1", "production", "embedding", "miss").inc(1)
    m.tokens.labels("r1", "production", "prompt", "x").inc(1000)
    m.tokens.labels("r1", "production", "cached_prompt", "x").inc(400)
    phases = [SimpleNamespace(release="r1", index_lag={60.0: 1, 120.0: 2, float("inf"): 2}), SimpleNamespace(release="r1", index_lag={})]
    (line,) = signal_lines(m.registry, ["r1"], phases)
    assert line.index_events == 2 and line.freshness_p50_p99_s == (60.0, pytest.approx(118.8))  # interpolated in (60, 120]
    assert (line.stale_share, line.checked_queries) == (0.25, 4)
    assert line.cache_hit_rates == {"embedding": 0.75, "retrieval": None, "prompt": 0.4}
    assert line.cost_by_component == {"embedding": None, "retrieval": None, "rerank": pytest.approx(0.0005),
                                      "generation": pytest.approx(0.0015), "storage": None}
    assert "1.0m/2.0m (2)" in render_signals([line])[-1] and render_signals([line])[-1].endswith("-/-/0.5/1.5/-")
