"""The demo app's retrieval hook and probe set, and what the summary shows of the probes.

The hook serves whichever release is deployed (``deploy``), as a real app's endpoint would::

    with RetrievalHook() as hook:                    # POST {hook.url} {"query", "k"} -> {"documents": [...]}
        hook.deploy(app)                             # each phase deploys its release
        hook.record_phase(store, "baseline", "r1", deployed_at)   # its latest probe run, for the summary
    write_probe_set(corpus, path)                    # the agent's probes_path

The bad release's index rebuild (dense-only retrieval, ``ReleaseConfig.keyword_index``) reshuffles
the probes' top-k, so ``rag_probe_topk_overlap`` drops from 1 to the value ``expected_overlap``
computes from the two releases directly.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROBE_K = 8
"""The demo app's retrieval depth (``ReleaseConfig.top_k``)."""


def probe_queries(corpus: Any) -> list[str]:
    """Six policy and six CLAP NQ questions: the demo's fixed probe set."""
    return [q.text for q in corpus.policy_questions[:6]] + [q.text for q in corpus.nq_questions[:6]]


def write_probe_set(corpus: Any, path: Path) -> Path:
    import yaml

    probes = [{"name": f"probe-{n}", "query": q} for n, q in enumerate(probe_queries(corpus), 1)]
    path.write_text(yaml.safe_dump({"k": PROBE_K, "probes": probes}, sort_keys=False))
    return path


def expected_overlap(corpus: Any, before: Any, after: Any) -> dict[str, float]:
    """The mean Jaccard@k and RBO between two deployed apps' top-k over the probe set (the known truth)."""
    from rag_monitor.detectors.overlap import jaccard, rbo

    pairs = [([i for i, _ in before.retrieve_top_k(q, PROBE_K)], [i for i, _ in after.retrieve_top_k(q, PROBE_K)])
             for q in probe_queries(corpus)]
    return {"jaccard": sum(jaccard(a, b) for a, b in pairs) / len(pairs),
            "rbo": sum(rbo(a, b) for a, b in pairs) / len(pairs)}


class RetrievalHook:
    """``POST /retrieve`` on loopback, answered by the deployed app; 503 until one is deployed."""

    def __init__(self) -> None:
        self.app: Any = None
        self.phases: list[ProbePhase] = []
        """Each phase's latest probe run, in order (``record_phase``), for the summary."""
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    query, k = body["query"], int(body["k"])
                except (ValueError, KeyError, TypeError):
                    return self._reply(400, {"error": 'expected {"query": str, "k": int}'})
                app = hook.app
                if app is None:
                    return self._reply(503, {"error": "the app is starting"})
                return self._reply(200, {"documents": [{"id": i, "score": s} for i, s in app.retrieve_top_k(query, k)]})

            def _reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the probe gave up waiting (a busy machine): the agent counts its timeout

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/retrieve"
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-retrieval-hook", daemon=True)

    def start(self) -> RetrievalHook:
        self._thread.start()
        return self

    def deploy(self, app: Any) -> None:
        self.app = app

    def record_phase(self, store: Any, phase: str, release: str, deployed_at: float) -> None:
        self.phases.append(probe_phase(store, phase, release, deployed_at, probes=len(probe_queries(self.app.corpus))))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> RetrievalHook:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@dataclass(frozen=True)
class ProbePhase:
    """The latest probe run of a phase, after its release was deployed."""

    phase: str
    release: str
    jaccard: float | None
    rbo: float | None
    compared: int
    changed: int


def probe_phase(store: Any, phase: str, release: str, deployed_at: float, timeout_s: float = 60.0,
                probes: int = 1) -> ProbePhase:
    """The latest probe run that started after ``deployed_at`` and compared ``probes`` probes (on a
    busy machine a run can fail some on a timeout), read from the store; waits up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    results: list = []
    while True:
        run = store.probes.latest_run()
        if run is not None and run.started_at > deployed_at:
            results = store.probes.results(run.id)
        if len(results) >= probes or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return ProbePhase(phase, release, mean([r.jaccard for r in results]), mean([r.rbo for r in results]), len(results),
                      sum(r.latest_ids != r.baseline_ids for r in results))


def render_probes(phases: list[ProbePhase], errors: float) -> list[str]:
    lines = ["", "Neighbour stability (probe set's top-k against the baseline pinned by the first run)"]
    if not phases:
        lines.append("  no probe run")
    for p in phases:
        overlap = ("no probe compared" if p.jaccard is None else
                   f"Jaccard@{PROBE_K} {p.jaccard:.2f}, RBO {p.rbo:.2f}; {p.changed} of {p.compared} probes changed")
        lines.append(f"  {p.phase:<12} ({p.release}) {overlap}")
    lines.append(f"  probe errors: {errors:.0f} (the hook answers 503 until the app has loaded)")
    return lines
