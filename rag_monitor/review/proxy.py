"""Who is asking, and where the browser thinks it is: forwarded headers from trusted proxies only.

Behind a TLS-terminating reverse proxy the agent sees the proxy's address and plain ``http``.
The proxy says what the browser used in ``X-Forwarded-For`` / ``X-Forwarded-Proto`` /
``X-Forwarded-Host``; anyone else could say the same, so those headers count only when the
connection comes from an address in ``trusted_proxies`` (uvicorn's own proxy-header handling,
which trusts loopback by default, is turned off by the agent).

The external origin (``https://review.example.com``) decides the ``Origin`` check and whether
the session cookie is ``Secure``: the ``review_external_url`` setting when given, else what a
trusted proxy forwarded, else the request's own scheme and host.

Usage::

    view = ExternalView.parse("10.0.0.0/8, 127.0.0.1", external_url="")
    view.client(request)   # '203.0.113.9' (the browser, not the ingress)
    view.origin(request)   # 'https://review.example.com'
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True)
class ExternalView:
    trusted: tuple[Network, ...] = ()
    external_origin: str = ""
    """``scheme://host[:port]`` from ``review_external_url``; empty: derived per request."""

    @classmethod
    def parse(cls, trusted_proxies: str, external_url: str = "") -> ExternalView:
        networks = []
        for entry in (e.strip() for e in trusted_proxies.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ValueError(f"trusted_proxies: {entry!r} is not an IP address or network") from None
        origin = ""
        if external_url:
            parts = urlsplit(external_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"review_external_url must look like https://host[:port], got {external_url!r}")
            origin = f"{parts.scheme}://{parts.netloc}".lower()
        return cls(tuple(networks), origin)

    def _is_trusted(self, host: str | None) -> bool:
        address = _address(host or "")
        return address is not None and any(address in network for network in self.trusted)

    def _from_proxy(self, request: Request) -> bool:
        return self._is_trusted(request.client.host if request.client else None)

    def client(self, request: Request) -> str:
        """The client's address: the right-most forwarded hop not itself a trusted proxy."""
        peer = request.client.host if request.client else "unknown"
        if not self._from_proxy(request):
            return peer
        hops = [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",") if h.strip()]
        for hop in reversed(hops):
            if not self._is_trusted(hop):
                return hop if _address(hop) is not None else peer
        return hops[0] if hops else peer

    def scheme(self, request: Request) -> str:
        if self.external_origin:
            return self.external_origin.split("://", 1)[0]
        if self._from_proxy(request):
            forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
            if forwarded in ("http", "https"):
                return forwarded
        return request.url.scheme

    def origin(self, request: Request) -> str:
        if self.external_origin:
            return self.external_origin
        host = request.headers.get("host", request.url.netloc)
        if self._from_proxy(request):
            host = request.headers.get("x-forwarded-host", host).split(",")[0].strip()
        return f"{self.scheme(request)}://{host}".lower()

    def secure(self, request: Request) -> bool:
        return self.scheme(request) == "https"
