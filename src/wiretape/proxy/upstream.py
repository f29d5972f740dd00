"""The upstream side of the recorder: httpx with raw streaming.

Owns building the request to the origin (same target, Host set, hop-by-hop
fields removed) and reading the response as raw frames, never decoded. The
replay code path does not import this module.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import certifi

import httpcore._backends.anyio  # noqa: F401  (loaded here, not on the first forwarded request)
import httpx

from wiretape.errors import InvalidUpstream, UsageError
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


@dataclass(frozen=True)
class UpstreamOptions:
    """How origins are reached. ``ca_file``: a PEM file of CA certificates
    trusted for origins besides the usual roots (``--upstream-ca``: a private
    gateway, a test server); ``resolve``: host to the (address, port)
    actually dialled (``--resolve HOST=IP:PORT``, as curl's option), with
    the certificate still checked against the host's name (SNI, RFC 6066 §3)."""

    ca_file: Path | None = None
    resolve: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def verify(self) -> ssl.SSLContext | bool:
        """The TLS verification setting for the client: always on. Raises
        UsageError for a ``ca_file`` that is not a PEM file of certificates."""
        return True if self.ca_file is None else _trusting(self.ca_file)


@functools.lru_cache(maxsize=8)
def _trusting(ca_file: Path) -> ssl.SSLContext:
    """The usual roots plus ``ca_file``, read once per file."""
    context = ssl.create_default_context(cafile=certifi.where())
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot read --upstream-ca {ca_file}: {exc} (give a PEM file "
                         "of CA certificates)") from exc
    return context


def parse_resolve(values: Sequence[str]) -> dict[str, tuple[str, int]]:
    """``HOST=IP:PORT`` pairs (``--resolve``). Raises UsageError."""
    out = {}
    for value in values:
        host, eq, address = value.partition("=")
        ip, colon, port = address.rpartition(":")
        if not (eq and host and colon and ip and port.isdigit() and 0 < int(port) < 65536):
            raise UsageError(f"invalid --resolve {value!r}: expected HOST=IP:PORT, "
                             "e.g. api.openai.com=127.0.0.1:8443")
        out[host.strip().lower()] = (ip.strip("[]"), int(port))
    return out


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
