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

import httpx

from wiretape.model import Request
from wiretape.origins import UpstreamOptions
from wiretape.proxy.hop import upstream_request_headers

#: Upstream timeouts (s). Reads wait long: a model may think for minutes and
#: keep-alive comments can be 15 s apart.
DEFAULT_TIMEOUT = httpx.Timeout(connect=30.0, read=900.0, write=120.0, pool=60.0)


def new_client(options: UpstreamOptions | None = None) -> httpx.AsyncClient:
    """An httpx client for forwarding: no redirects followed, no env proxies,
    no automatic headers (requests are built with ``httpx.Request``), the
    origin's certificate verified. Raises UsageError for a bad ``ca_file``."""
    return httpx.AsyncClient(
        timeout=DEFAULT_TIMEOUT,
        follow_redirects=False,
        trust_env=False,
        verify=(options or UpstreamOptions()).verify(),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )


def build_request(origin_root: str, host: str, request: Request,
                  resolve: Mapping[str, tuple[str, int]] | None = None) -> httpx.Request:
    """The request to send upstream for ``request`` (target unchanged)."""
    url = httpx.URL(origin_root + request.target.decode("latin-1"))
    headers = upstream_request_headers(request.headers, host.encode("latin-1"))
    extensions = {}
    if resolve and url.host in resolve:
        address, port = resolve[url.host]
        extensions["sni_hostname"] = url.host
        url = url.copy_with(host=address, port=port)
    return httpx.Request(
        request.method.decode("ascii"), url, headers=list(headers), content=request.body,
        extensions=extensions,
    )
