"""The blind review page and its API, served by the agent's HTTP server.

    GET  /review                              the page (a login form without a session)
    POST /review/login                        form fields ``reviewer`` and ``token``; sets the session cookie
    POST /review/logout
    POST /api/review/claim                    the reviewer's current item (step one or two), or the next one (204: none)
    POST /api/review/items/{id}/relevance     step one: relevant and gold candidate keys; answers with step two
    POST /api/review/items/{id}/labels        step two: faithful, correct, refusal_appropriate, corrected answer...;
                                              answers with the spans a span scorer flagged, now the verdict is saved
    POST /api/review/items/{id}/skip          ``{"reason": ...}``: the item goes to someone else
    GET  /api/review/progress                 per-reviewer progress and agreement (Cohen's kappa)
    GET  /api/review/stats                    queue depth and progress (admin)
    POST /api/review/assign                   ``{"to": "alice" | "group:nurses" | null, "count": n, "tenant": t}`` (admin)

Every API call needs a session (401 without, 403 for the wrong role or another reviewer's
item); every POST needs the session's CSRF token in ``X-CSRF-Token`` (compared in constant
time) and, when the browser sends ``Origin``, the external origin (see ``proxy.py``).
Sessions and the login throttle live in the store: any replica answers any request.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from rag_monitor.record import QueryRecord
from rag_monitor.review.agreement import agreement_by_label
from rag_monitor.review.auth import LoginThrottle, Reviewer, Reviewers, csrf_matches, hash_token, new_session_id
from rag_monitor.review.blind import (
    REASONS,
    TRISTATE,
    TYPED_LABELS,
    answer_labels,
    answer_view,
    neutralise,
    relevance_labels,
    relevance_view,
    shown_order,
)
from rag_monitor.review.guidelines import load_guidelines
from rag_monitor.review.proxy import ExternalView
from rag_monitor.review.spans import flagged_answers
from rag_monitor.templating import render

log = logging.getLogger(__name__)

COOKIE = "rag_monitor_review"
SECURE_COOKIE = "__Host-rag_monitor_review"  # the prefix makes browsers insist on Secure, Path=/, no Domain
MAX_ITEM_ID_DIGITS = 18  # every 18-digit number fits in an int64
SESSION_TTL_S = 8 * 3600.0
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chromium send Origin: null
    "Cache-Control": "no-store",
}
PACKAGE = "rag_monitor.review"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": neutralise(message)}, status_code=status, headers=SECURITY_HEADERS)


def _json(body: Any) -> JSONResponse:
    return JSONResponse(body, headers=SECURITY_HEADERS)


def needs_second_review(trace_id: str, share: float) -> bool:
    """Deterministic on the trace id: every replica agrees which items are reviewed twice."""
    u = int.from_bytes(hashlib.sha256(f"double-review:{trace_id}".encode()).digest()[:8], "big") / 2**64
    return u < share


class ReviewApp:
    """Routes of the review page; ``on_review(item, labels)`` runs after each stored review.

    ``redact_text``: what reviewers type (notes, corrected answers, skip reasons) goes through it
    before it is stored: the agent passes its span redactor, so the rules and pseudonyms are the same.
    """

    def __init__(self, store, reviewers: Reviewers, claim_s: float = 900.0, on_review=None, *,
                 redact_text: Callable[[str], str], external: ExternalView | None = None,
                 double_share: float = 0.0, guidelines: str = "", throttle: LoginThrottle | None = None):
        if not 0.0 <= double_share <= 1.0:
            raise ValueError(f"review_double_share must be within [0, 1], got {double_share!r}")
        self.store = store
        self.redact_text = redact_text
        self.reviewers = reviewers
        self.claim_s = claim_s
        self.on_review = on_review
        self.external = external or ExternalView()
        self.double_share = double_share
        self.guidelines = load_guidelines(guidelines)
        self.throttle = throttle or LoginThrottle(store)

    def routes(self) -> list[Route]:
        return [
            Route("/review", self.page, methods=["GET"]),
            Route("/review/static/{name}", self.static, methods=["GET"]),
            Route("/review/login", self.login, methods=["POST"]),
            Route("/review/logout", self.logout, methods=["POST"]),
            Route("/api/review/claim", self.claim, methods=["POST"]),
            # {item_id}, not {item_id:int}: Starlette's int convertor fails (500) on a 5000-digit id
            Route("/api/review/items/{item_id}/relevance", self.relevance, methods=["POST"]),
            Route("/api/review/items/{item_id}/labels", self.labels, methods=["POST"]),
            Route("/api/review/items/{item_id}/skip", self.skip, methods=["POST"]),
            Route("/api/review/progress", self.progress, methods=["GET"]),
            Route("/api/review/stats", self.stats, methods=["GET"]),
            Route("/api/review/assign", self.assign, methods=["POST"]),
        ]

    # --- session plumbing -----------------------------------------------------------------

    def _session(self, request: Request) -> tuple[Reviewer, str] | None:
        session_id = request.cookies.get(SECURE_COOKIE) or request.cookies.get(COOKIE)
        if not session_id:
            return None
        session = self.store.review_sessions.get(hash_token(session_id))
        reviewer = self.reviewers.get(session.reviewer) if session else None
        return (reviewer, session.csrf_token) if reviewer else None  # a removed reviewer's session ends

    def _same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is None:
            return True  # non-browser clients send no Origin; the CSRF token still applies
        return origin.lower() == self.external.origin(request)

    async def _authorize(self, request: Request, role: str = "reviewer", write: bool = True) -> Reviewer | Response:
        found = await run_in_threadpool(self._session, request)
        if found is None:
            return _error(401, "log in first")
        reviewer, csrf = found
        if not reviewer.can(role):
            return _error(403, f"this needs the {role} role")
        if write and not (csrf_matches(request.headers.get("x-csrf-token"), csrf) and self._same_origin(request)):
            return _error(403, "missing or wrong CSRF token, or a cross-site request")
        return reviewer

    # --- page -------------------------------------------------------------------------------

    def _login_page(self, error: str = "", reviewer: str = "", status: int = 200) -> HTMLResponse:
        html = render(PACKAGE, "login.html", error=error, reviewer=neutralise(reviewer)[:200])
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    async def page(self, request: Request) -> Response:
        found = await run_in_threadpool(self._session, request)
        if found is None:
            return self._login_page()
        reviewer, csrf = found
        html = render(PACKAGE, "review.html", csrf=csrf, reviewer=neutralise(reviewer.name),
                      guidelines=self.guidelines, tristate=TRISTATE, reasons=REASONS)
        return HTMLResponse(html, headers=SECURITY_HEADERS)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("review.js", "review.css"):
            return _error(404, "no such asset")
        media = "text/javascript" if name.endswith(".js") else "text/css"
        text = resources.files(PACKAGE).joinpath("static", name).read_text()
        return Response(text, media_type=media, headers=SECURITY_HEADERS)

    async def login(self, request: Request) -> Response:
        client = self.external.client(request)
        if not self._same_origin(request):
            return _error(403, "cross-site login refused")
        try:
            form = await request.form()
        except HTTPException as exc:  # malformed multipart: Starlette's plain-text 400, made JSON
            return _error(400, f"unreadable login form: {exc.detail}")
        name, token = str(form.get("reviewer", "")).strip(), str(form.get("token", ""))
        attempt = await run_in_threadpool(self.throttle.admit, name, client)
        if attempt is None:  # refused before the token is checked
            return self._login_page("Too many failed logins: wait a minute.", name, 429)
        reviewer = self.reviewers.authenticate(name, token) if name and token else None
        if reviewer is None:  # the attempt keeps its place in the counters
            log.info("failed review login from %s", client)  # never the token, nor the name typed (could be a token)
            return self._login_page("Unknown reviewer or token.", name, 401)
        await run_in_threadpool(self.throttle.succeeded, attempt)
        session_id, digest = new_session_id()
        await run_in_threadpool(self.store.review_sessions.create, digest, reviewer.name, new_session_id()[0], SESSION_TTL_S)
        response = RedirectResponse("/review", status_code=303, headers=SECURITY_HEADERS)
        secure = self.external.secure(request)
        response.set_cookie(SECURE_COOKIE if secure else COOKIE, session_id, max_age=int(SESSION_TTL_S),
                            httponly=True, samesite="strict", secure=secure, path="/")
        return response

    async def logout(self, request: Request) -> Response:
        auth = await self._authorize(request)
        if isinstance(auth, Response):
            return auth
        for name in (SECURE_COOKIE, COOKIE):
            if request.cookies.get(name):
                await run_in_threadpool(self.store.review_sessions.drop, hash_token(request.cookies[name]))
        response = _json({"ok": True})
        response.delete_cookie(SECURE_COOKIE, path="/", secure=True)
        response.delete_cookie(COOKIE, path="/")
        return response

    # --- items --------------------------------------------------------------------------------

    def _paired(self, item, reviewer: Reviewer) -> QueryRecord | None:
        """The other answer of a shadow pair, only when it belongs to the item's own tenant."""
        if not item.pair_trace_id:
            return None
        # Stored with the item (the pair is kept whole); the cache only for items queued before that.
        paired = item.paired_record or self.store.recent.get(item.pair_trace_id)
        if paired is None:
            return None
        if paired.tenant != item.tenant or not reviewer.sees_tenant(paired.tenant):
            log.warning("review item %s: its pair belongs to another tenant; shown alone", item.id)
            return None
        return paired

    def _swapped(self, item) -> bool:
        """A pair's second review sees the answers in the other order (position-swap consistency)."""
        return len(self.store.review.all_reviews([item.id]).get(item.id, [])) % 2 == 1

    def _view(self, item, reviewer: Reviewer) -> dict[str, Any]:
        record = item.query_record
        if item.draft is None:
            return relevance_view(item.id, record, reviewer.tenants)
        paired = self._paired(item, reviewer)
        return answer_view(item.id, record, paired, reviewer.tenants, swap=paired is not None and self._swapped(item))

    def _claim(self, reviewer: Reviewer) -> dict[str, Any] | None:
        item = self.store.review.current_claim(reviewer.name)
        if item is None:
            item = self.store.review.claim(reviewer.name, self.claim_s, tenants=reviewer.tenants, groups=reviewer.groups)
        return None if item is None else self._view(item, reviewer)

    async def claim(self, request: Request) -> Response:
        auth = await self._authorize(request)
        if isinstance(auth, Response):
            return auth
        view = await run_in_threadpool(self._claim, auth)
        return Response(status_code=204, headers=SECURITY_HEADERS) if view is None else _json(view)

    def _held(self, reviewer: Reviewer, item_id: int):
        from rag_monitor.store import NotFound

        try:
            item = self.store.queue.get_item(item_id)
        except NotFound:
            return _error(404, f"no review item {item_id}")
        if item.claimed_by != reviewer.name or item.state != "claimed" or not reviewer.sees_tenant(item.tenant):
            return _error(403, "this item is not claimed by you (it may have expired: claim again)")
        return item

    def _relevance(self, reviewer: Reviewer, item_id: int, body: Any) -> Response:
        from rag_monitor.store import ClaimError

        item = self._held(reviewer, item_id)
        if isinstance(item, Response):
            return item
        try:
            draft = relevance_labels(item.id, item.query_record, body, reviewer.tenants)
            self.store.review.save_draft(item.id, reviewer.name, draft)
        except ValueError as exc:
            return _error(400, str(exc))
        except ClaimError as exc:
            return _error(409, str(exc))
        return _json(self._view(self.store.queue.get_item(item.id), reviewer))

    def _submit(self, reviewer: Reviewer, item_id: int, body: Any) -> Response:
        from rag_monitor.store import ClaimError

        item = self._held(reviewer, item_id)
        if isinstance(item, Response):
            return item
        if item.draft is None:
            return _error(409, "give the relevance labels first (step one)")
        try:
            paired = self._paired(item, reviewer)
            swap = paired is not None and self._swapped(item)
            labels = {**item.draft, **answer_labels(item.id, item.query_record, body, paired, swap)}
            for name in TYPED_LABELS:
                if labels.get(name):
                    labels[name] = self.redact_text(labels[name])
            needed = 2 if needs_second_review(item.trace_id, self.double_share) else 1
            self.store.review.submit_review(item.id, reviewer.name, labels, reviews_needed=needed)
        except ValueError as exc:
            return _error(400, str(exc))
        except ClaimError as exc:
            return _error(409, str(exc))
        if self.on_review:
            self.on_review(item, labels)
        # Only now, with the verdict stored, may the reviewer see what the scorer flagged.
        shown = [("", item.query_record)] if paired is None else list(zip("AB", shown_order(item.id, item.query_record, paired, swap)))
        flagged = flagged_answers(self.store, shown)
        return _json({"ok": True, **({"flagged": flagged} if flagged else {})})

    def _skip(self, reviewer: Reviewer, item_id: int, body: Any) -> Response:
        from rag_monitor.store import ClaimError

        item = self._held(reviewer, item_id)
        if isinstance(item, Response):
            return item
        reason = body.get("reason") if isinstance(body, dict) else None
        if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
            return _error(400, "reason must be a non-empty string of at most 500 characters")
        try:
            self.store.review.skip(item.id, reviewer.name, self.redact_text(reason.strip()))
        except ClaimError as exc:
            return _error(409, str(exc))
        return _json({"ok": True})

    async def _item_call(self, request: Request, handler) -> Response:
        auth = await self._authorize(request)
        if isinstance(auth, Response):
            return auth
        raw_id = request.path_params["item_id"]
        # The store's ids are int64: a longer number would overflow the driver, so it is no item.
        if not (raw_id.isascii() and raw_id.isdigit() and len(raw_id) <= MAX_ITEM_ID_DIGITS):
            return _error(404, f"no review item {raw_id[:40]!r}")
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's limit
            return _error(400, "the body must be a JSON object of labels")
        return await run_in_threadpool(handler, auth, int(raw_id), body)

    async def relevance(self, request: Request) -> Response:
        return await self._item_call(request, self._relevance)

    async def labels(self, request: Request) -> Response:
        return await self._item_call(request, self._submit)

    async def skip(self, request: Request) -> Response:
        return await self._item_call(request, self._skip)

    # --- progress and administration ----------------------------------------------------------

    def _progress(self, reviewer: Reviewer) -> dict[str, Any]:
        progress = self.store.review.reviewer_progress()
        mine = progress.get(reviewer.name, {"reviews": 0, "recent": 0, "skips": 0, "assigned_open": 0})
        team = [{"reviewer": neutralise(r.name), **{k: progress.get(r.name, {}).get(k, 0) for k in ("reviews", "recent")}}
                for r in self.reviewers]
        agreement = agreement_by_label(self.store.review.all_reviews())
        return {
            "you": mine,
            "available": self.store.review.claimable_count(reviewer.name, tenants=reviewer.tenants, groups=reviewer.groups),
            "team": team,
            "agreement": [{"label": a.label, "kappa": a.kappa, "pairs": a.pairs} for a in agreement.values()],
        }

    async def progress(self, request: Request) -> Response:
        auth = await self._authorize(request, write=False)
        if isinstance(auth, Response):
            return auth
        return _json(await run_in_threadpool(self._progress, auth))

    async def stats(self, request: Request) -> Response:
        auth = await self._authorize(request, role="admin", write=False)
        if isinstance(auth, Response):
            return auth
        depth = await run_in_threadpool(self.store.queue.depth)
        progress = await run_in_threadpool(self.store.review.reviewer_progress)
        return _json({"queue": depth, "reviewers": progress})

    async def assign(self, request: Request) -> Response:
        auth = await self._authorize(request, role="admin")
        if isinstance(auth, Response):
            return auth
        try:
            body = await request.json()
        except (ValueError, RecursionError):
            return _error(400, "the body must be a JSON object")
        to, count, tenant = (body.get(k) for k in ("to", "count", "tenant")) if isinstance(body, dict) else (0, 0, 0)
        if to is not None and (not isinstance(to, str) or not to or len(to) > 200):
            return _error(400, "to must be a reviewer name, group:<name> or null")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
            return _error(400, "count must be a positive integer or null")
        if tenant is not None and not isinstance(tenant, str):
            return _error(400, "tenant must be a string or null")
        n = await run_in_threadpool(lambda: self.store.review.assign(to, count=count, tenant=tenant))
        return _json({"assigned": n})
