"""Nearest-neighbour stability: a fixed probe set retrieved on a schedule and compared with a pinned baseline.

An index rebuild, a re-chunking or an embedding-model migration that silently reshuffles what
the app retrieves shows here first: vectors of two model versions are not comparable, but the
documents a fixed query retrieves are.

The probe set (setting ``probes_path``) is a YAML file, or a golden-set export (``*.jsonl``,
``rag-monitor export golden``) whose questions become probes::

    k: 10                       # optional: every probe's k (default: the setting probes_k)
    probes:
      - name: refund-window     # optional: shown by `rag-monitor probes show` (default probe-<n>)
        query: How many days do I have to ask for a refund?
        k: 5                    # optional, this probe only
      - Can I change my delivery address?   # a bare query

The retrieval hook (setting ``probes_url``) is an HTTP endpoint the app exposes::

    POST <probes_url>   {"query": "...", "k": 10}
    200                 {"documents": [{"id": "doc-a", ...}, {"id": "doc-b"}, ...]}    (rank order)

Extra fields are ignored; the first ``k`` distinct ids are the probe's top-k. The agent calls it
off any request path, ``probes_concurrency`` at a time, each within ``probes_timeout_s``. A probe
whose endpoint is down, slow or answers something else is a counted error
(``rag_probe_errors_total{reason}``) and yields no overlap at all, never a low one.

    runner = ProbeRunner(store.probes, load_probe_set("probes.yaml", k=10), HttpRetriever(url, timeout_s=5))
    summary = runner.run(holder="agent-1")         # RunSummary(compared=..., errors={...})
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_monitor.detectors.overlap import DEFAULT_RBO_P, jaccard, rbo
from rag_monitor.store.probes import Comparison, ProbeStates

log = logging.getLogger(__name__)

ERROR_REASONS = ("unreachable", "timeout", "http_status", "malformed")
"""Why a probe failed: connection refused or reset; no full answer within the timeout; a non-2xx
status; a body that is not ``{"documents": [{"id": ...}, ...]}``."""


@dataclass(frozen=True)
class Probe:
    name: str
    query: str
    k: int

    @property
    def id(self) -> str:
        """Stable across restarts and replicas; a changed query or k is a new probe (and baseline)."""
        return hashlib.sha256(f"{self.k}\0{self.query}".encode()).hexdigest()[:32]


class ProbeSetError(ValueError):
    """The probe set file is malformed; the message names the file and entry."""


def _probe(entry: Any, n: int, k: int, where: str) -> Probe:
    if isinstance(entry, str):
        entry = {"query": entry}
    if not isinstance(entry, Mapping):
        raise ProbeSetError(f"{where}: probe {n} must be a query or a mapping with 'query', got {entry!r}")
    unknown = set(entry) - {"name", "query", "k"}
    if unknown:
        raise ProbeSetError(f"{where}: probe {n}: unknown keys {sorted(unknown)} (known: name, query, k)")
    query, name, probe_k = entry.get("query"), entry.get("name", f"probe-{n}"), entry.get("k", k)
    if not isinstance(query, str) or not query.strip():
        raise ProbeSetError(f"{where}: probe {n} has no query")
    if not isinstance(name, str) or not name:
        raise ProbeSetError(f"{where}: probe {n}: name must be a non-empty string")
    if isinstance(probe_k, bool) or not isinstance(probe_k, int) or probe_k < 1:
        raise ProbeSetError(f"{where}: probe {n}: k must be a positive whole number, got {probe_k!r}")
    return Probe(name, query.strip(), probe_k)


def load_probe_set(path: str | Path, *, k: int = 10, limit: int = 100) -> list[Probe]:
    """Probes from a YAML probe set, or the first ``limit`` distinct questions of a golden-set JSONL export."""
    import yaml

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        questions: dict[str, None] = {}
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                question = json.loads(line)["question"]
            except (ValueError, KeyError, TypeError):
                raise ProbeSetError(f"{path}:{line_no}: not a golden-set row with a 'question'") from None
            if isinstance(question, str) and question.strip():
                questions.setdefault(question.strip())
            if len(questions) >= limit:
                break
        entries: list[Any] = [{"name": f"golden-{n}", "query": q} for n, q in enumerate(questions, 1)]
    else:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ProbeSetError(f"{path}: not YAML: {exc}") from None
        if isinstance(doc, Mapping):
            if set(doc) - {"k", "probes"}:
                raise ProbeSetError(f"{path}: unknown keys {sorted(set(doc) - {'k', 'probes'})} (known: k, probes)")
            k, entries = doc.get("k", k), doc.get("probes")
        else:
            entries = doc
        if not isinstance(entries, list):
            raise ProbeSetError(f"{path}: expected a list of probes (or 'probes:' with one)")
    probes = [_probe(entry, n, k, str(path)) for n, entry in enumerate(entries, 1)]
    if not probes:
        raise ProbeSetError(f"{path}: the probe set is empty")
    for kind, values in (("names", [p.name for p in probes]), ("probes", [p.id for p in probes])):
        if len(set(values)) != len(values):
            raise ProbeSetError(f"{path}: duplicate {kind} in the probe set")
    return probes


class ProbeError(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_documents(body: bytes, k: int) -> tuple[str, ...]:
    """The first ``k`` distinct document ids of a retrieval hook's reply; ``ProbeError("malformed")`` otherwise."""
    try:
        reply = json.loads(body)
    except ValueError:
        raise ProbeError("malformed", "the reply is not JSON") from None
    documents = reply.get("documents") if isinstance(reply, dict) else None
    if not isinstance(documents, list):
        raise ProbeError("malformed", 'the reply has no "documents" list')
    ids: dict[str, None] = {}
    for doc in documents:
        doc_id = doc.get("id") if isinstance(doc, dict) else None
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
            raise ProbeError("malformed", 'a document without a string "id"')
        ids.setdefault(str(doc_id))
        if len(ids) == k:
            break
    return tuple(ids)


class HttpRetriever:
    """Calls the app's retrieval hook: ``POST url {"query", "k"} -> {"documents": [{"id"}...]}``."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, headers: Mapping[str, str] | None = None):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"probes_url must be an http(s) URL, got {url!r}")
        self.url = url
        # One timeout for the whole exchange: a server that trickles its reply is as slow as a silent one.
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s), headers=dict(headers or {}))
        self._timeout_s = timeout_s

    def __call__(self, query: str, k: int) -> tuple[str, ...]:
        import httpx

        try:
            with self._client.stream("POST", self.url, json={"query": query, "k": k}) as response:
                body = response.read()
        except httpx.TimeoutException:
            raise ProbeError("timeout", f"no reply within {self._timeout_s:g} s") from None
        except httpx.TransportError as exc:
            raise ProbeError("unreachable", type(exc).__name__) from None
        if not 200 <= response.status_code < 300:
            raise ProbeError("http_status", f"HTTP {response.status_code}")
        return parse_documents(body, k)

    def close(self) -> None:
        self._client.close()


@dataclass
class RunSummary:
    run_id: int | None = None
    compared: int = 0
    pinned: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class ProbeRunner:
    """Retrieves every probe (``concurrency`` at a time) and stores each success's overlap with its baseline."""

    def __init__(self, states: ProbeStates, probes: Sequence[Probe], retrieve: Callable[[str, int], Sequence[str]], *,
                 concurrency: int = 4, rbo_p: float = DEFAULT_RBO_P,
                 on_query: Callable[[], None] = lambda: None, on_error: Callable[[str], None] = lambda reason: None):
        if concurrency < 1:
            raise ValueError(f"probes_concurrency must be at least 1, got {concurrency!r}")
        rbo([], [], rbo_p)  # a bad p fails here, at start, not on the first run
        self.states = states
        """``store.probes``: baselines, runs and announcements (the only part of the store used)."""
        self.probes = list(probes)
        self.retrieve = retrieve
        self.concurrency = concurrency
        self.rbo_p = rbo_p
        self.on_query = on_query
        self.on_error = on_error
        self._failing = ""
        """The failure reasons the last run logged: a run that fails the same way logs at DEBUG
        (the errors are counted in metrics), so an endpoint that is down is one warning, not one a run."""

    def _one(self, probe: Probe) -> tuple[str, ...] | ProbeError:
        self.on_query()
        try:
            return tuple(self.retrieve(probe.query, probe.k))
        except ProbeError as exc:
            log.debug("probe %s failed: %s", probe.name, exc)
            self.on_error(exc.reason)
            return exc

    def retrieve_all(self) -> dict[Probe, tuple[str, ...] | ProbeError]:
        """Every probe's top-k, or the error it failed with."""
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(self.probes) or 1),
                                thread_name_prefix="probe") as pool:
            return dict(zip(self.probes, pool.map(self._one, self.probes)))

    def run(self, holder: str) -> RunSummary:
        """One run of the probe set (the ``probes`` job); a probe without a baseline pins its top-k."""
        probes = self.states
        run_id = probes.start_run(holder)
        baselines = probes.baselines([p.id for p in self.probes])
        results = self.retrieve_all()
        summary = RunSummary(run_id=run_id)
        comparisons = []
        for probe, result in results.items():
            if isinstance(result, ProbeError):
                summary.errors[result.reason] = summary.errors.get(result.reason, 0) + 1
                continue
            baseline = baselines.get(probe.id)
            if baseline is None:
                summary.pinned += 1  # the first run pins: compared with itself, overlap 1
                comparisons.append(Comparison(probe.id, probe.name, probe.k, result, 1.0, 1.0, None))
                continue
            comparisons.append(Comparison(
                probe.id, probe.name, probe.k, result,
                jaccard(baseline.baseline_ids, result), rbo(baseline.baseline_ids, result, self.rbo_p), baseline.pinned_at,
            ))
        summary.compared = probes.finish_run(run_id, comparisons, errors=sum(summary.errors.values()))
        self._log_failures(run_id, summary)
        return summary

    def _log_failures(self, run_id: int, summary: RunSummary) -> None:
        failing = ", ".join(f"{reason} {n}" for reason, n in sorted(summary.errors.items()))
        if failing:
            level = logging.DEBUG if failing == self._failing else logging.WARNING
            log.log(level, "probe run %d: %d of %d probes failed (%s); no overlap from them", run_id,
                    sum(summary.errors.values()), len(self.probes), failing)
        elif self._failing:
            log.info("probe run %d: every probe answered again", run_id)
        self._failing = failing

    def pin(self, by: str = "cli") -> tuple[int, dict[str, str]]:
        """Retrieve every probe now and make the answers the new baseline; (pinned, {probe name: error}).

        A probe that fails loses its old baseline, so the next run that reaches it pins it: after an
        intended change, the old top-k would only raise a false alarm.
        """
        results = self.retrieve_all()
        ok = {p.id: (p.name, p.k, ids) for p, ids in results.items() if not isinstance(ids, ProbeError)}
        failed = {p: e for p, e in results.items() if isinstance(e, ProbeError)}
        self.states.unpin([p.id for p in failed])
        return self.states.pin(ok, by=by), {p.name: str(e) for p, e in failed.items()}


class ProbeExporter:
    """The latest finished run's overlap, from the store at scrape time: every replica exports the same."""

    MEASURES = ("jaccard", "rbo")

    def __init__(self, states: ProbeStates, metrics):
        self.states = states
        self.metrics = metrics

    def export(self) -> None:
        m = self.metrics
        until = self.states.announced_until()
        m.probe_change_announced.set(0 if until is None else 1)
        run = self.states.latest_run()
        if run is None:
            return
        results = self.states.results(run.id)
        m.probe_last_run.set(run.finished_at)
        m.probe_compared.set(len(results))
        m.probe_changed.set(sum(r.latest_ids != r.baseline_ids for r in results))
        for measure in self.MEASURES:
            values = [getattr(r, measure) for r in results]
            if values:
                m.probe_overlap.labels(measure).set(sum(values) / len(values))
                m.probe_overlap_min.labels(measure).set(min(values))
            else:  # nothing compared (every probe failed): no overlap, never a stale or a zero one
                for gauge in (m.probe_overlap, m.probe_overlap_min):
                    try:
                        gauge.remove(measure)
                    except KeyError:
                        pass


def describe_probes(store, probes: Sequence[Probe]) -> list[str]:
    """``rag-monitor probes show``: the latest run, any announced change, and each probe's baseline and overlap."""
    import datetime as dt

    def when(t: float) -> str:
        return f"{dt.datetime.fromtimestamp(t, dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"

    states = store.probes
    run = states.latest_run()
    until = states.announced_until()
    lines = ["no probe run yet" if run is None else
             f"latest run {run.id} finished {when(run.finished_at)} on {run.holder}: "
             f"{run.compared} compared, {run.errors} failed of {run.probes}"]
    if until is not None:
        lines.append(f"index change announced until {when(until)}")
    baselines = states.baselines([p.id for p in probes])
    for p in probes:
        b = baselines.get(p.id)
        if b is None:
            lines.append(f"{p.name} (k={p.k}): no baseline yet (the next run pins it)")
            continue
        latest = ("not compared yet" if b.run_id is None else
                  f"run {b.run_id}: jaccard {b.jaccard:.3f}, rbo {b.rbo:.3f}"
                  + ("" if run is not None and b.run_id == run.id else " (failed in the latest run)"))
        lines.append(f"{p.name} (k={p.k}): pinned {when(b.pinned_at)} by {b.pinned_by} [{', '.join(b.baseline_ids)}]; {latest}")
    return lines
