"""The upstream side of the recorder: httpx with raw streaming.

Owns building the request to the origin (same target, Host set, hop-by-hop
fields removed) and reading the response as raw frames, never decoded. The
replay code path does not import this module.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpcore._backends.anyio  # noqa: F401  (loaded here, not on the first forwarded request)
import httpx

from wiretape.errors import InvalidUpstream
from wiretape.model import Request
from wiretape.proxy.hop import upstream_request_headers

#: Upstream timeouts (s). Reads wait long: a model may think for minutes and
#: keep-alive comments can be 15 s apart.
DEFAULT_TIMEOUT = httpx.Timeout(connect=30.0, read=900.0, write=120.0, pool=60.0)


def parse_upstream(value: str) -> tuple[str, str, str]:
    """Split an upstream URL into (scheme://host[:port], host header, base path).

    Raises InvalidUpstream.
    """
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidUpstream(value, str(exc)) from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidUpstream(value, "the scheme must be http or https")
    if not parts.hostname:
        raise InvalidUpstream(value, "it names no host")
    if parts.query or parts.fragment:
        raise InvalidUpstream(value, "it must not carry a query or fragment")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{netloc}", netloc, parts.path.rstrip("/")
    del port


def new_client() -> httpx.AsyncClient:
    """An httpx client for forwarding: no redirects followed, no env proxies,
    no automatic headers (requests are built with ``httpx.Request``)."""
    return httpx.AsyncClient(
        timeout=DEFAULT_TIMEOUT,
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )


def build_request(origin_root: str, host: str, request: Request) -> httpx.Request:
    """The request to send upstream for ``request`` (target unchanged)."""
    url = httpx.URL(origin_root + request.target.decode("latin-1"))
    headers = upstream_request_headers(request.headers, host.encode("latin-1"))
    return httpx.Request(
        request.method.decode("ascii"), url, headers=list(headers), content=request.body
    )
