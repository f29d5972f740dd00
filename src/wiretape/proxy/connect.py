"""The forward-proxy side: CONNECT requests (RFC 9110 §9.3.6) from an agent
given ``HTTPS_PROXY``.

A host on the intercept list gets a tunnel whose TLS wiretape terminates
with a leaf certificate from the run's own CA (the SNI and the CONNECT
authority name the same host); the requests inside are served by the same
record or replay handler as any origin. Any other host is tunnelled
untouched while recording (only its host, port and byte counts are kept,
never its bytes) and refused while replaying. A client that breaks off the
TLS handshake is remembered by host: it does not trust the run's CA.

With ``tools`` (``--tools``), every other host but the excepted ones is
intercepted the same way, its requests served under a tool origin
(:func:`tool_origin`).

Knows nothing of run files or of what the handlers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from wiretape.intercept.ca import RunCA
from wiretape.model import TOOL_ORIGIN_PREFIX, ConnectReportJSON, Request, TunnelJSON
from wiretape.proxy.http1 import ClientConnection, ErrorBody, Handler, plain_error, serve_connection
from wiretape.proxy.http2 import serve_h2

_COPY_SIZE = 65536
#: Seconds to reach a tunnelled host.
CONNECT_TIMEOUT = 30.0


@dataclass
class Tunnel:
    """One host:port tunnelled untouched: connections, bytes each way
    (``up``: agent to host), and the last error reaching it."""

    host: str
    port: int
    connections: int = 0
    up: int = 0
    down: int = 0
    error: str | None = None

    def to_json(self) -> TunnelJSON:
        return {"host": self.host, "port": self.port, "connections": self.connections,
                "bytes_up": self.up, "bytes_down": self.down, "error": self.error}


@dataclass
class ConnectReport:
    """What the forward proxy saw. ``rejected``: host to what happened when
    the client broke off the TLS handshake; ``refused``: host:port to the
    number of CONNECTs refused (replay)."""

    intercepted: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    tunnels: dict[tuple[str, int], Tunnel] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> ConnectReportJSON:
        return {"intercepted": dict(self.intercepted), "rejected": dict(self.rejected),
                "tunnels": [t.to_json() for t in self.tunnels.values()],
                "refused": dict(self.refused)}


def tool_origin(scheme: str, host: str, port: int) -> str:
    """The origin of a tool exchange (``model.TOOL_ORIGIN_PREFIX``):
    ``tool:https://docs.example.com``, the port named when it is not the
    scheme's default (443, 80; RFC 9110 §4.2); an IPv6 literal in brackets."""
    shown = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return f"{TOOL_ORIGIN_PREFIX}{scheme}://{shown}" + ("" if port == default else f":{port}")


def split_authority(target: bytes) -> tuple[str, int] | None:
    """``host:port`` of a CONNECT request-target (authority-form, RFC 9112
    §3.2.3; an IPv6 literal in brackets), lower-cased; None when malformed."""
    text = target.decode("latin-1").strip()
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not host or not 0 < int(port) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    return host.lower(), int(port)


def rejection(host: str, exc: BaseException) -> str:
    """The summary line for a client that broke off the handshake for ``host``."""
    detail = getattr(exc, "reason", None) or type(exc).__name__
    if detail == "HTTP_REQUEST":  # (OpenSSL: a plain-HTTP request where TLS was due)
        return (f"the client sent plain HTTP inside its tunnel to {host} (a CONNECT "
                "tunnel for an http:// URL, as curl --proxytunnel does): only HTTPS is "
                "intercepted in a tunnel; send plain http:// requests to the proxy directly")
    return (f"the client rejected the certificate for {host} ({detail}): it may pin "
            "certificates or ignore SSL_CERT_FILE")


class ConnectProxy:
    """Answers CONNECT requests; an instance is the ``connect`` handler of a
    listener.

    ``hosts`` maps each intercepted host (lower-case) to its origin name;
    ``handler_for(origin, authority, connection_id)`` serves the requests
    inside an intercepted tunnel. ``tunnel``: True while recording (other
    hosts are tunnelled), False while replaying (they are refused with
    403). ``tools``: every host but ``tools_except`` is intercepted, one not
    in ``hosts`` under its tool origin (:func:`tool_origin`). ``resolve``
    maps a host to the address actually dialled.
    """

    def __init__(self, ca: RunCA, hosts: Mapping[str, str],
                 handler_for: Callable[[str, str, int], Handler], *, tunnel: bool,
                 next_connection_id: Callable[[], int],
                 resolve: Mapping[str, tuple[str, int]] | None = None,
                 max_body: int, error_body: ErrorBody = plain_error,
                 on_refused: Callable[[int, str], None] | None = None,
                 on_change: Callable[[ConnectReport], None] | None = None,
                 tools: bool = False, tools_except: Sequence[str] = ()) -> None:
        self._ca = ca
        self._tools = tools
        self._tools_except = frozenset(h.lower() for h in tools_except)
        self._hosts = {h.lower(): name for h, name in hosts.items()}
        self._handler_for = handler_for
        self._tunnel = tunnel
        self._next_id = next_connection_id
        self._resolve = dict(resolve or {})
        self._max_body = max_body
        self._error_body = error_body
        self._on_refused = on_refused
        self._on_change = on_change
        self.report = ConnectReport()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.report)

    async def __call__(self, conn: ClientConnection, request: Request) -> None:
        found = split_authority(request.target)
        if found is None:
            conn.note_refused(400, "malformed_connect")
            await conn.refuse_tunnel(400, "malformed_connect",
                                     f"CONNECT target {request.target!r} is not host:port")
            return
        host, port = found
        if host in self._hosts:
            await self._intercept(conn, host, port, self._hosts[host])
        elif self._tools and host not in self._tools_except:
            await self._intercept(conn, host, port, tool_origin("https", host, port))
        elif self._tunnel:
            await self._pass_through(conn, host, port)
        else:
            self.report.refused[f"{host}:{port}"] = self.report.refused.get(f"{host}:{port}", 0) + 1
            self._changed()
            listed = ", ".join(sorted(self._hosts)) or "none"
            answered = ("the recorded tool hosts and " if self._tools else "") + \
                f"the intercepted provider hosts ({listed})"
            await conn.refuse_tunnel(
                403, "tunnel_refused",
                f"a replay answers only {answered}; "
                f"{host}:{port} was refused: nothing leaves this machine during a replay")

    async def _intercept(self, conn: ClientConnection, host: str, port: int,
                         origin: str) -> None:
        trailing = await conn.accept_tunnel()
        if trailing:
            # TLS bytes sent before our answer cannot be handed to the TLS layer.
            await conn.close()
            return
        try:
            await conn.start_tls(self._ca.server_context(host, alpn=("h2", "http/1.1")))
        except (ssl.SSLError, ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            self.report.rejected[host] = rejection(host, exc)
            self._changed()
            await conn.close()
            return
        self.report.intercepted[host] = self.report.intercepted.get(host, 0) + 1
        authority = host if port == 443 else f"{host}:{port}"
        inner = conn.tunnelled(authority, max_body=self._max_body, error_body=self._error_body,
                               on_refused=self._on_refused)
        await serve_connection(inner, self._handler_for(origin, authority, self._next_id()),
                               http2=serve_h2)

    async def _pass_through(self, conn: ClientConnection, host: str, port: int) -> None:
        tunnel = self.report.tunnels.setdefault((host, port), Tunnel(host, port))
        tunnel.connections += 1
        dial_host, dial_port = self._resolve.get(host, (host, port))
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(dial_host, dial_port), CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            tunnel.error = f"{type(exc).__name__}: {exc}"
            self._changed()
            await conn.refuse_tunnel(502, "tunnel_failed", f"cannot reach {host}:{port}: {exc}")
            return
        conn.busy = True
        try:
            # the upstream socket is closed however this ends: the client
            # may leave before the 200, or while bytes are copied
            trailing = await conn.accept_tunnel()
            reader, writer = conn.streams
            if trailing:
                up_writer.write(trailing)
            up, down = await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            tunnel.up += up + len(trailing)
            tunnel.down += down
        finally:
            up_writer.close()
            with contextlib.suppress(OSError, RuntimeError, TimeoutError):
                await asyncio.wait_for(up_writer.wait_closed(), 1.0)
            self._changed()


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> int:
    """Copy until end of stream, then half-close ``sink``; return the bytes."""
    total = 0
    try:
        while data := await source.read(_COPY_SIZE):
            sink.write(data)
            total += len(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        sink.close()
    return total
