"""The neighbour-stability rule: the probe set's top-k overlap with its pinned baseline fell, and
no index change was announced."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_monitor.alerts.rulekit import _alert, _num
from rag_monitor.alerts.thresholds import parse_duration


def _probe_groups(t: Mapping[str, Any]) -> list[dict[str, Any]]:
    n = t["neighbour_stability"]
    max_age = _num(parse_duration(n["max_result_age"]))
    # Every replica exports the store's latest run, so max deduplicates. An announced change
    # (`rag-monitor probes announce --for 2h`) silences the rule through `unless`; a re-pin ends it.
    alert = _alert(
        t, "RagNeighbourOverlapDropped",
        f"""
max by (measure) (rag_probe_topk_overlap{{measure="rbo"}}) < {_num(n['min_rbo'])}
and on ()
(max(rag_probe_compared_probes) >= {n['min_probes']})
and on ()
(time() - max(rag_probe_last_run_timestamp_seconds) < {max_age})
unless on ()
(max(rag_probe_index_change_announced) == 1)""",
        n["for"], n["severity"],
        "The probe set's top-k overlap with its pinned baseline fell to {{ $value | printf \"%.2f\" }} "
        f"(rank-biased overlap, mean over the probes; alert below {_num(n['min_rbo'])}) without an announced index change.",
        f"""
Meaning: the fixed probe queries no longer retrieve the documents (or the order) they retrieved when
the baseline was pinned: an index rebuild, a re-chunking, an embedding-model migration or a retriever
change reshuffled results, and nobody announced it; at least {n['min_probes']} probes were compared in a
run less than {n['max_result_age']} old, and failed probes (rag_probe_errors_total) never count.
Check first: `rag-monitor probes show` lists each probe's baseline, its latest top-k and overlap;
rag_probe_changed_probes says how many moved and rag_probe_topk_overlap_min how far the worst did;
in Phoenix, open recent traces of those queries and compare the retrieved documents with the baseline;
check faithfulness and regeneration alerts for the same period.
First step: if triage says regression, diff the release's index, chunking, embedding model and
retriever settings and roll back if the change was not meant; if the change was intended, check
answer quality on the probes, then `rag-monitor probes pin` (and next time `rag-monitor probes
announce --for 2h` before the rebuild); if drift, look for an index job that ran outside a release.""",
    )
    alert["annotations"]["changed"] = (
        '{{ with query "max(rag_probe_changed_probes)" }}{{ . | first | value | printf "%.0f" }}{{ end }} of '
        '{{ with query "max(rag_probe_compared_probes)" }}{{ . | first | value | printf "%.0f" }}{{ end }} probes changed; '
        'the worst overlaps {{ with query "max(rag_probe_topk_overlap_min{measure=\'rbo\'})" }}'
        '{{ . | first | value | printf "%.2f" }}{{ end }}'
    )
    return [{"name": "rag-probe-alerts", "rules": [alert]}]
