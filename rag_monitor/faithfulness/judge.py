"""An LLM judge on any OpenAI-compatible chat endpoint: ``llm-judge-v1``.

For teams that prefer a judge (vLLM, Ollama, OpenAI, Azure OpenAI: anything serving
``POST {base_url}/chat/completions``), beside HHEM or the offline scorer, never instead of
the named scorer metrics. The judge is asked, at temperature 0, for JSON that follows
``CLAIMS_SCHEMA`` (``response_format`` ``json_schema``): each claim of the answer with its
verdict (``supported`` / ``contradicted`` / ``not_in_context``) and the context span that
decides it. The score is the share of supported claims; below the threshold (1.0 by default:
one unsupported claim) the answer is flagged.

Failure is never a made-up score:

- 429 and 5xx, timeouts and refused connections are retried with exponential backoff
  (``Retry-After`` honoured up to ``MAX_BACKOFF_S``), ``max_retries`` times;
- malformed or truncated output (not JSON, not the schema, ``finish_reason == "length"``)
  gets one more try, then the verdict ``error``;
- anything still failing is ``error`` with the reason, counted apart.

At most ``concurrency`` requests are in flight. Every call reports its latency, tokens, cost
and outcome to ``on_call`` (the agent turns them into metrics). The judge's own HTTP calls
run with OpenTelemetry instrumentation suppressed, so an instrumented agent never traces
them back into its own ingest and review queue.

Usage::

    judge = JudgeScorer(JudgeConfig(base_url="http://vllm:8000/v1", model="qwen2.5-7b-instruct"))
    judge.assess(["The tower is 330 m tall."], "It is 330 metres tall.")
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from rag_monitor.faithfulness.claims import CLAIM_VERDICTS, SUPPORTED, Assessment, Claim, ClaimScorer

logger = logging.getLogger(__name__)

JUDGE_NAME = "llm-judge-v1"
JUDGE_THRESHOLD = 1.0
"""Flag an answer as soon as one claim is not supported (the score is the supported share)."""
MAX_BACKOFF_S = 30.0
CLAIMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["claims"],
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["claim", "verdict", "evidence"],
                "properties": {
                    "claim": {"type": "string"},
                    "verdict": {"type": "string", "enum": list(CLAIM_VERDICTS)},
                    "evidence": {"type": "string", "description": "the context span that supports or contradicts the claim; empty when none"},
                },
            },
        }
    },
}
SYSTEM_PROMPT = (
    "You check whether an answer is supported by the context it was generated from. Split the answer into "
    "its factual claims. For each claim give the verdict 'supported' (the context states it), 'contradicted' "
    "(the context states otherwise) or 'not_in_context' (the context does not say), and quote the deciding "
    "context span verbatim as evidence (empty string when there is none). Judge only against the context, "
    "not your own knowledge. An answer with no factual claim (a greeting, a refusal) has an empty claims list. "
    "Reply with JSON only, following the schema."
)


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to call the judge (see the agent settings ``judge_*``)."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    timeout_s: float = 30.0
    concurrency: int = 4
    max_retries: int = 3
    backoff_s: float = 0.5
    max_output_tokens: int = 1024
    usd_per_million_input: float = 0.0
    usd_per_million_output: float = 0.0
    threshold: float = JUDGE_THRESHOLD

    def __post_init__(self) -> None:
        if not self.base_url or not self.model:
            raise ValueError("the judge needs a base_url and a model")
        if self.concurrency < 1 or self.max_retries < 0 or self.timeout_s <= 0:
            raise ValueError("judge concurrency must be >= 1, max_retries >= 0 and timeout_s > 0")


@dataclass(frozen=True)
class JudgeCall:
    """One HTTP call to the judge, for metrics: ``outcome`` is ok / retried / malformed / error."""

    latency_s: float
    outcome: str
    status: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class MalformedOutput(ValueError):
    """The judge replied, but not with the schema's JSON (or it was cut off)."""


class TransientFailure(RuntimeError):
    """429, 5xx, timeout or connection failure: worth retrying after a backoff."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RejectedRequest(RuntimeError):
    """A 4xx other than 429 (bad model name, bad key): retrying will not help."""


@dataclass(frozen=True)
class JudgePair:
    contexts: tuple[str, ...]
    answer: str
    length: int
    truncated: bool = False


def parse_claims(content: str) -> tuple[Claim, ...]:
    """The schema's JSON -> claims; anything else raises ``MalformedOutput``."""
    try:
        document = json.loads(content)
    except (TypeError, json.JSONDecodeError) as exc:
        raise MalformedOutput(f"not JSON: {exc}") from exc
    rows = document.get("claims") if isinstance(document, dict) else None
    if not isinstance(rows, list):
        raise MalformedOutput("no 'claims' list")
    claims = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("claim"), str) or row.get("verdict") not in CLAIM_VERDICTS:
            raise MalformedOutput(f"claim does not follow the schema: {str(row)[:200]}")
        evidence = row.get("evidence")
        claims.append(Claim(row["claim"], row["verdict"], 1.0 if row["verdict"] == SUPPORTED else 0.0,
                            evidence=evidence if isinstance(evidence, str) and evidence else None))
    return tuple(claims)


def _suppressed():
    """A context in which OpenTelemetry instrumentations record nothing (the judge's own calls)."""
    from opentelemetry import context

    return context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))


class JudgeScorer(ClaimScorer):
    """``llm-judge-v1``: the scorer interface over an OpenAI-compatible chat endpoint."""

    name = JUDGE_NAME
    version = "1"

    def __init__(self, config: JudgeConfig, *, on_call: Callable[[JudgeCall], None] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        self.threshold = config.threshold
        self.on_call = on_call
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), timeout=config.timeout_s, headers=headers,
                                    transport=transport)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="llm-judge")
        self._rng = random.Random()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()

    # --- the scorer interface -----------------------------------------------------------

    def encode(self, premise: str | Sequence[str], hypothesis: str) -> JudgePair:
        contexts = (premise,) if isinstance(premise, str) else tuple(str(p) for p in premise)
        return JudgePair(contexts, hypothesis, sum(len(c.split()) for c in contexts) + len(hypothesis.split()))

    def assess_encoded(self, batch: Sequence[JudgePair]) -> list[Assessment]:
        """Judge a batch, at most ``concurrency`` requests at a time; results in order."""
        return list(self._pool.map(self._assess_one, batch))

    # --- one pair -----------------------------------------------------------------------

    def _assess_one(self, pair: JudgePair) -> Assessment:
        request = self._request(pair)
        malformed_tries = 0
        while True:
            try:
                claims = self._call_with_retries(request)
            except MalformedOutput as exc:
                malformed_tries += 1
                if malformed_tries > 1:  # one retry for malformed output, then an honest error
                    return Assessment(None, error=f"malformed judge output: {exc}")
                continue
            except (TransientFailure, RejectedRequest) as exc:
                return Assessment(None, error=f"judge unavailable: {exc}")
            if not claims:
                return Assessment(None)  # no claims: counted apart, never as faithful
            supported = sum(c.verdict == SUPPORTED for c in claims)
            return Assessment(supported / len(claims), claims)

    def _request(self, pair: JudgePair) -> dict[str, Any]:
        context = "\n\n".join(f"[{i + 1}] {c}" for i, c in enumerate(pair.contexts))
        return {
            "model": self.config.model,
            "temperature": 0,
            "max_tokens": self.config.max_output_tokens,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"Context:\n{context}\n\nAnswer:\n{pair.answer}"},
            ],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "faithfulness_claims", "strict": True, "schema": CLAIMS_SCHEMA}},
        }

    def _call_with_retries(self, request: dict[str, Any]) -> tuple[Claim, ...]:
        for attempt in range(self.config.max_retries + 1):
            try:
                return self._call(request)
            except TransientFailure as exc:
                if attempt == self.config.max_retries:
                    raise
                delay = min(MAX_BACKOFF_S, self.config.backoff_s * 2**attempt * (1 + 0.25 * self._rng.random()))
                if exc.retry_after is not None:
                    delay = min(MAX_BACKOFF_S, max(delay, exc.retry_after))
                logger.debug("judge call failed (%s); retrying in %.2fs", exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, request: dict[str, Any]) -> tuple[Claim, ...]:
        started = time.perf_counter()
        token = _suppressed()
        try:
            response = self._client.post("/chat/completions", json=request)
        except httpx.TimeoutException as exc:
            self._report(started, "retried", None)
            raise TransientFailure(f"timeout after {self.config.timeout_s}s") from exc
        except httpx.TransportError as exc:
            self._report(started, "retried", None)
            raise TransientFailure(f"{type(exc).__name__}: {exc}") from exc
        finally:
            from opentelemetry import context

            context.detach(token)
        if response.status_code == 429 or response.status_code >= 500:
            self._report(started, "retried", response.status_code)
            raise TransientFailure(f"HTTP {response.status_code}", _retry_after(response))
        if response.status_code != 200:
            self._report(started, "error", response.status_code)
            raise RejectedRequest(f"HTTP {response.status_code}: {response.text[:200]}")
        try:
            body = response.json()
            choice = body["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            self._report(started, "malformed", 200)
            raise MalformedOutput(f"not a chat completion: {exc}") from exc
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        tokens = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        try:
            if choice.get("finish_reason") == "length":
                raise MalformedOutput("truncated (finish_reason=length)")
            claims = parse_claims(content)
        except MalformedOutput:
            self._report(started, "malformed", 200, *tokens)
            raise
        self._report(started, "ok", 200, *tokens)
        return claims

    def _report(self, started: float, outcome: str, status: int | None, input_tokens: int = 0, output_tokens: int = 0) -> None:
        if self.on_call is None:
            return
        cost = (input_tokens * self.config.usd_per_million_input + output_tokens * self.config.usd_per_million_output) / 1e6
        try:
            self.on_call(JudgeCall(time.perf_counter() - started, outcome, status, input_tokens, output_tokens, cost))
        except Exception:  # noqa: BLE001 - a metrics bug must not fail the judgement
            logger.exception("judge on_call callback failed")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def judge_from_settings(settings: Any, on_call: Callable[[JudgeCall], None] | None = None) -> JudgeScorer | None:
    """The judge the agent's ``judge_*`` settings describe, or None when ``judge_url`` is empty."""
    if not settings.judge_url:
        return None
    config = JudgeConfig(
        base_url=settings.judge_url, model=settings.judge_model,
        api_key=os.environ.get(settings.judge_api_key_env, "") if settings.judge_api_key_env else "",
        timeout_s=settings.judge_timeout_s, concurrency=settings.judge_concurrency, max_retries=settings.judge_max_retries,
        usd_per_million_input=settings.judge_usd_per_million_input, usd_per_million_output=settings.judge_usd_per_million_output,
    )
    return JudgeScorer(config, on_call=on_call)
