"""The drift report's "what changed" section: rows when clusters moved, a reason when none did."""

from __future__ import annotations

from types import SimpleNamespace

from rag_monitor.templating import render


def _page(changes: dict | None, phoenix_url: str | None = None) -> str:
    result = {"decision": True, "log_evidence": 4.2, "p_value": 0.004, "seed": 1, "n_reference": 100, "n_current": 50,
              "reference": {"description": "the first 100 queries", "version": 1}, "changes": changes}
    row = {"profile": SimpleNamespace(name="queries", signal="query_embedding", detector="mmd"), "result": result,
           "waiting": "", "window": "2026-12-01 10:00 UTC .. 2026-12-01 10:05 UTC", "evidently": None,
           "log_threshold": 3.0, "css": "drift"}
    return render("rag_monitor.agent.drift", "drift_report.html", rows=[row], phoenix_url=phoenix_url)


def test_no_cluster_moved_says_why_instead_of_an_empty_heading():
    page = _page({"over": [], "under": []})
    assert "queries: what changed" in page
    assert "No cluster differs from the reference by that much" in page and "<h3>" not in page


def test_clusters_that_moved_are_listed_without_the_empty_note():
    cluster = {"cluster": "crypto", "current": 12, "current_share": 0.24, "reference": 1, "reference_share": 0.01,
               "z": 5.1, "examples": [{"query": "how do I buy crypto", "trace_id": "ab" * 16}]}
    page = _page({"over": [cluster], "under": []})
    assert "More common now" in page and "how do I buy crypto" in page
    assert "No cluster differs" not in page and "Less common now" not in page


def test_phoenix_links_only_for_examples_the_tail_sampler_forwarded():
    examples = [{"query": "sampled", "trace_id": "ab" * 16, "forwarded": True},
                {"query": "sampled out", "trace_id": "cd" * 16, "forwarded": False},
                {"query": "a run from before tail sampling", "trace_id": "ef" * 16}]
    cluster = {"cluster": "crypto", "current": 12, "current_share": 0.24, "reference": 1, "reference_share": 0.01,
               "z": 5.1, "examples": examples}
    page = _page({"over": [cluster], "under": []}, phoenix_url="http://phoenix:6006")
    assert f"/redirects/traces/{'ab' * 16}" in page and f"/redirects/traces/{'ef' * 16}" in page
    assert "cd" * 16 in page and f"/redirects/traces/{'cd' * 16}" not in page
