"""The blind review page and its API, served by the agent's HTTP server.

    GET  /review                       the page (a login form without a session)
    POST /review/login                 form field ``token``; sets an HttpOnly SameSite=Strict cookie
    POST /review/logout
    POST /api/review/claim             the reviewer's current item, or the next one (204: queue empty)
    POST /api/review/items/{id}/labels labels for the claimed item
    GET  /api/review/stats             queue depth (admin)

Every API call needs a session (401 without, 403 for the wrong role or another reviewer's
item) and, for POSTs, the session's CSRF token in ``X-CSRF-Token`` plus a same-origin
``Origin`` when the browser sends one. Failed logins are rate-limited per client address.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from rag_monitor.record import QueryRecord
from rag_monitor.review.auth import LoginRateLimiter, Reviewer, Reviewers, Session, Sessions
from rag_monitor.review.blind import blind_view, unblind_labels

log = logging.getLogger(__name__)

COOKIE = "rag_monitor_review"
MAX_ITEM_ID_DIGITS = 18  # every 18-digit number fits in an int64
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send Origin: null
    "Cache-Control": "no-store",
}


def _asset(name: str) -> str:
    return resources.files("rag_monitor.review").joinpath("static", name).read_text()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=SECURITY_HEADERS)


class ReviewApp:
    """Routes of the review page; ``on_review(item, labels)`` runs after each stored review."""

    def __init__(self, store, reviewers: Reviewers, claim_s: float = 900.0, on_review=None, secure_cookie: bool = False):
        self.store = store
        self.reviewers = reviewers
        self.claim_s = claim_s
        self.sessions = Sessions()
        self.limiter = LoginRateLimiter()
        self.on_review = on_review
        self.secure_cookie = secure_cookie
        self._current: dict[str, int] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/review", self.page, methods=["GET"]),
            Route("/review/static/{name}", self.static, methods=["GET"]),
            Route("/review/login", self.login, methods=["POST"]),
            Route("/review/logout", self.logout, methods=["POST"]),
            Route("/api/review/claim", self.claim, methods=["POST"]),
            # {item_id}, not {item_id:int}: Starlette's int convertor fails (500) on a 5000-digit id
            Route("/api/review/items/{item_id}/labels", self.labels, methods=["POST"]),
            Route("/api/review/stats", self.stats, methods=["GET"]),
        ]

    # --- session plumbing -----------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE))

    @staticmethod
    def _same_origin(request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return True  # non-browser clients send no Origin; the CSRF token still applies
        return origin == f"{request.url.scheme}://{request.url.netloc}"

    def _authorize(self, request: Request, role: str = "reviewer", write: bool = True) -> Session | Response:
        session = self._session(request)
        if session is None:
            return _error(401, "log in first")
        if not session.reviewer.can(role):
            return _error(403, f"this needs the {role} role")
        if write and (request.headers.get("x-csrf-token") != session.csrf_token or not self._same_origin(request)):
            return _error(403, "missing or wrong CSRF token")
        return session

    # --- page -------------------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        session = self._session(request)
        html = _asset("login.html") if session is None else _asset("review.html").replace("{{csrf}}", session.csrf_token).replace("{{reviewer}}", session.reviewer.name)
        return HTMLResponse(html, headers=SECURITY_HEADERS)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("review.js", "review.css"):
            return _error(404, "no such asset")
        media = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(_asset(name), media_type=media, headers=SECURITY_HEADERS)

    async def login(self, request: Request) -> Response:
        client = request.client.host if request.client else "unknown"
        if not self._same_origin(request):
            return _error(403, "cross-site login refused")
        if self.limiter.blocked(client):
            return _error(429, "too many failed logins; wait a minute")
        try:
            form = await request.form()
        except HTTPException as exc:  # malformed multipart: Starlette's plain-text 400, made JSON
            return _error(400, f"unreadable login form: {exc.detail}")
        token = str(form.get("token", ""))
        reviewer = self.reviewers.authenticate(token) if token else None
        if reviewer is None:
            self.limiter.failed(client)
            log.info("failed review login from %s", client)  # never the token itself
            return HTMLResponse(_asset("login.html").replace("<!--error-->", '<p class="error">Unknown token.</p>'), status_code=401, headers=SECURITY_HEADERS)
        session_id, _ = self.sessions.create(reviewer)
        response = RedirectResponse("/review", status_code=303, headers=SECURITY_HEADERS)
        response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict", secure=self.secure_cookie, path="/")
        return response

    async def logout(self, request: Request) -> Response:
        auth = self._authorize(request)
        if isinstance(auth, Response):
            return auth
        self.sessions.drop(request.cookies.get(COOKIE))
        response = JSONResponse({"ok": True}, headers=SECURITY_HEADERS)
        response.delete_cookie(COOKIE, path="/")
        return response

    # --- API ----------------------------------------------------------------------------------

    def _paired(self, item) -> QueryRecord | None:
        if not item.pair_trace_id:
            return None
        # Stored with the item (the pair is kept whole); the cache only for items queued before that.
        return item.paired_record or self.store.get_recent(item.pair_trace_id)

    def _claim(self, reviewer: Reviewer) -> dict[str, Any] | None:
        item = None
        current = self._current.get(reviewer.name)
        if current is not None:
            held = self.store.get_item(current)
            if held.state == "claimed" and held.claimed_by == reviewer.name:
                item = held
        if item is None:
            item = self.store.claim(reviewer.name, self.claim_s, tenants=reviewer.tenants)
        if item is None:
            self._current.pop(reviewer.name, None)
            return None
        self._current[reviewer.name] = item.id
        return blind_view(item.id, item.query_record, self._paired(item))

    async def claim(self, request: Request) -> Response:
        auth = self._authorize(request)
        if isinstance(auth, Response):
            return auth
        view = await run_in_threadpool(self._claim, auth.reviewer)
        if view is None:
            return Response(status_code=204, headers=SECURITY_HEADERS)
        return JSONResponse(view, headers=SECURITY_HEADERS)

    def _submit(self, reviewer: Reviewer, item_id: int, labels: Any) -> Response:
        from rag_monitor.store import ClaimError, NotFound

        try:
            item = self.store.get_item(item_id)
        except NotFound:
            return _error(404, f"no review item {item_id}")
        if item.claimed_by != reviewer.name or item.state != "claimed":
            return _error(403, "this item is not claimed by you (it may have expired: claim again)")
        try:
            unblinded = unblind_labels(item_id, item.query_record, labels, self._paired(item))
            self.store.submit_review(item_id, reviewer.name, unblinded)
        except ValueError as exc:
            return _error(400, str(exc))
        except ClaimError as exc:
            return _error(409, str(exc))
        self._current.pop(reviewer.name, None)
        if self.on_review:
            self.on_review(item, unblinded)
        return JSONResponse({"ok": True}, headers=SECURITY_HEADERS)

    async def labels(self, request: Request) -> Response:
        auth = self._authorize(request)
        if isinstance(auth, Response):
            return auth
        raw_id = request.path_params["item_id"]
        # The store's ids are int64: a longer number would overflow the driver, so it is no item.
        if not (raw_id.isascii() and raw_id.isdigit() and len(raw_id) <= MAX_ITEM_ID_DIGITS):
            return _error(404, f"no review item {raw_id[:40]!r}")
        item_id = int(raw_id)
        try:
            labels = await request.json()
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's limit
            return _error(400, "the body must be a JSON object of labels")
        return await run_in_threadpool(self._submit, auth.reviewer, item_id, labels)

    async def stats(self, request: Request) -> Response:
        auth = self._authorize(request, role="admin", write=False)
        if isinstance(auth, Response):
            return auth
        depth = await run_in_threadpool(self.store.queue_depth)
        return JSONResponse({"queue": depth}, headers=SECURITY_HEADERS)
