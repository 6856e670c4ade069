"""A small OpenAI-compatible chat server on loopback, for the LLM judge's tests.

It serves ``POST /v1/chat/completions`` over real HTTP (``ThreadingHTTPServer``) and decides
its reply from a marker in the user message, so one server exercises every failure mode:

- ``[MALFORMED-ONCE]``: the first reply is not JSON, later ones are good;
- ``[MALFORMED]``: every reply's content is prose, never the schema;
- ``[TRUNCATED]``: every reply is cut off (``finish_reason: length``);
- ``[RATE-LIMITED-2]``: two 429s with ``Retry-After: 0``, then a good reply;
- ``[SERVER-ERROR-1]``: one 500, then a good reply;
- ``[SLOW]``: sleeps ``slow_s`` before replying (longer than the client's timeout);
- ``[BAD-REQUEST]``: a 400;
- otherwise a good reply: one claim per answer sentence, ``not_in_context`` when the sentence
  contains a number absent from the context, else ``supported``.

Every request body is recorded (``requests``), and so is the peak number in flight.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeJudgeState:
    def __init__(self, slow_s: float = 2.0, hold_s: float = 0.05) -> None:
        self.slow_s = slow_s
        self.hold_s = hold_s
        """Each reply takes at least this long, so concurrent requests overlap measurably."""
        self.requests: list[dict[str, Any]] = []
        self.seen: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0
        self.lock = threading.Lock()


def _good_claims(user: str) -> dict[str, Any]:
    context, _, answer = user.partition("\nAnswer:\n")
    claims = []
    for sentence in [s for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\[[A-Z0-9-]+\]", "", answer).strip()) if s]:
        novel = [n for n in re.findall(r"\d+", sentence) if n not in context]
        claims.append({"claim": sentence, "verdict": "not_in_context" if novel else "supported",
                       "evidence": "" if novel else context.strip().splitlines()[-1][:80]})
    return {"claims": claims}


def _completion(content: str, finish_reason: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": "judge-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}


def make_handler(state: FakeJudgeState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found"}})
                return
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            user = request["messages"][-1]["content"]
            marker = (re.search(r"\[([A-Z0-9-]+)\]", user.partition("\nAnswer:\n")[2]) or [None, ""])[1]
            with state.lock:
                state.requests.append(request)
                state.seen[marker] += 1
                count = state.seen[marker]
                state.in_flight += 1
                state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
            try:
                time.sleep(state.hold_s)
                self._reply(marker, count, user)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _reply(self, marker: str, count: int, user: str) -> None:
            good = json.dumps(_good_claims(user))
            if marker == "MALFORMED-ONCE" and count == 1 or marker == "MALFORMED":
                self._send(200, _completion("Sure! The answer looks supported to me."))
            elif marker == "TRUNCATED":
                self._send(200, _completion(good[: len(good) // 2], finish_reason="length"))
            elif marker == "RATE-LIMITED-2" and count <= 2:
                self._send(429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"})
            elif marker == "SERVER-ERROR-1" and count == 1:
                self._send(500, {"error": {"message": "overloaded"}})
            elif marker == "BAD-REQUEST":
                self._send(400, {"error": {"message": "unknown model"}})
            else:
                if marker == "SLOW":
                    time.sleep(state.slow_s)
                self._send(200, _completion(good))

    return Handler


class FakeJudgeServer:
    """``with FakeJudgeServer() as server: server.base_url`` (http://127.0.0.1:PORT/v1)."""

    def __init__(self, **state: Any) -> None:
        self.state = FakeJudgeState(**state)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.state))
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-judge", daemon=True)

    def __enter__(self) -> FakeJudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
