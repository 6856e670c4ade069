"""A real retrieval hook on loopback for the probe tests: an HTTP server whose replies a test sets."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RetrievalHook:
    """``POST / {"query", "k"} -> {"documents": [{"id"}...]}`` from ``index``; ``mode`` breaks it.

    Modes: ``ok``; ``slow`` (holds the reply until the test ends); ``malformed`` (not JSON);
    ``no_documents`` (JSON without the list); ``no_id`` (a document without an id); ``status``
    (HTTP 500). ``stop()`` closes the port, so a later request finds it down.
    """

    def __init__(self, index: dict[str, list[str]]):
        self.index = index
        self.mode = "ok"
        self.requests: list[dict] = []
        self.release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.requests.append(body)
                mode = hook.mode
                if mode == "slow":
                    hook.release.wait(30)
                status, reply = 200, b""
                if mode == "malformed":
                    reply = b"<html>oops</html>"
                elif mode == "no_documents":
                    reply = json.dumps({"results": []}).encode()
                elif mode == "no_id":
                    reply = json.dumps({"documents": [{"text": "x"}]}).encode()
                elif mode == "status":
                    status, reply = 500, b"{}"
                else:
                    ids = hook.index[body["query"]][: body["k"]]
                    reply = json.dumps({"documents": [{"id": i, "score": 1.0} for i in ids]}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:  # the slow reply's client gave up long ago
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
