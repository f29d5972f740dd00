"""The upstream side of the recorder: httpx with raw streaming.

Owns the client that forwards to origins and building the request to the
origin (same target, Host set, hop-by-hop fields removed); the response is
read as raw frames, never decoded. Parsing upstream URLs and addresses is
``wiretape.origins``'s. Only the recorder imports this module: nothing on
the replay path does (an import contract in pyproject.toml, and
tests/unit/test_import_boundaries.py, hold it to that).
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import anyio.to_thread
import httpx

from wiretape.model import Request
from wiretape.origins import UpstreamOptions
from wiretape.proxy.hop import upstream_request_headers

#: Upstream timeouts (s). Reads wait long: a model may think for minutes and
#: keep-alive comments can be 15 s apart.
DEFAULT_TIMEOUT = httpx.Timeout(connect=30.0, read=900.0, write=120.0, pool=60.0)


class UpstreamClient:
    """Sends requests to origins over one connection pool: no redirects
    followed, no environment proxies, no cookie jar, no automatic headers
    (requests are built with ``httpx.Request``), the origin's certificate
    verified, the response streamed. The transport is used directly:
    httpx's client would copy each request's headers into a cookie-jar
    request per response, which costs time quadratic in their number."""

    def __init__(self, options: UpstreamOptions | None = None) -> None:
        self._transport = httpx.AsyncHTTPTransport(
            verify=(options or UpstreamOptions()).verify(), trust_env=False,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))

    async def warm_up(self) -> None:
        """Load now what the first connection would otherwise load on the
        event loop while an agent waits (anyio's asyncio backend and its
        worker thread, which resolves names: about 100 ms), so the first
        exchange costs what the next ones do."""
        anyio.current_time()
        await anyio.to_thread.run_sync(int)

    async def send(self, request: httpx.Request) -> httpx.Response:
        """The origin's response, its body not read yet (``aiter_raw``, then
        ``aclose``). Raises httpx.TransportError (httpx.TimeoutException)."""
        request.extensions.setdefault("timeout", DEFAULT_TIMEOUT.as_dict())
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()


def new_client(options: UpstreamOptions | None = None) -> UpstreamClient:
    """A client for forwarding. Raises UsageError for a bad ``ca_file``."""
    return UpstreamClient(options)


def build_request(origin_root: str, host: str, request: Request,
                  resolve: Mapping[str, tuple[str, int]] | None = None) -> httpx.Request:
    """The request to send upstream for ``request`` (target unchanged).

    The target must be in origin-form (``/path?query``, RFC 9112 §3.2.1):
    it is the URL's path and query, never more, so it cannot name another
    host or port. ``Content-Length`` is the body's real length. Raises
    httpx.InvalidURL for any other target.
    """
    target = request.target
    if not target.startswith(b"/") or b"#" in target:
        raise httpx.InvalidURL(f"request target {target[:80]!r} is not in origin-form")
    root = httpx.URL(origin_root)
    url = root.copy_with(raw_path=target)
    if (url.scheme, url.host, url.port) != (root.scheme, root.host, root.port):
        raise httpx.InvalidURL(f"request target {target[:80]!r} leaves the origin")
    headers = upstream_request_headers(request.headers, host.encode("latin-1"),
                                       len(request.body))
    extensions = {}
    if resolve and url.host in resolve:
        address, port = resolve[url.host]
        extensions["sni_hostname"] = url.host
        url = url.copy_with(host=address, port=port)
    return httpx.Request(
        request.method.decode("ascii"), url, headers=list(headers), content=request.body,
        extensions=extensions,
    )
