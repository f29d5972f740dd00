"""The listening side of the proxy: one client connection, driven by h11.

Owns reading requests (with a body cap, 100-continue, and clear errors for
HTTP/2 prior knowledge, CONNECT and WebSocket upgrades) and writing
responses byte for byte: the head is serialised here (order and case as
given), the body framed per ``hop.Framing``. h11 tracks the connection state
so keep-alive works; its own output for responses is not used.

Knows nothing of recording, replaying or origins.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Awaitable, Callable

import h11

from wiretape.model import DEFAULT_MAX_BODY, Headers, Request
from wiretape.proxy.hop import ClientHead, Framing, client_head

_READ_SIZE = 65536
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# HTTP/2 GOAWAY with HTTP_1_1_REQUIRED (RFC 9113 §6.8, §7: error code 0xd),
# preceded by an empty SETTINGS frame as the server preface (RFC 9113 §3.4).
_H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _h2_goaway(debug: bytes) -> bytes:
    payload = b"\x00\x00\x00\x00" + b"\x00\x00\x00\x0d" + debug
    return len(payload).to_bytes(3, "big") + b"\x07\x00\x00\x00\x00\x00" + payload


class ProtocolRefused(Exception):
    """A request this proxy will not serve; the response was already sent."""


ErrorBody = Callable[[int, str, str], tuple[Headers, bytes]]


def plain_error(status: int, code: str, message: str) -> tuple[Headers, bytes]:
    """An OpenAI-shaped JSON error; used where no origin shape is known."""
    body = json.dumps(
        {"error": {"message": message, "type": "wiretape_error", "param": None, "code": code}}
    ).encode()
    return (
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(body)).encode()),
        (b"x-should-retry", b"false"),
    ), body


class ClientConnection:
    """One accepted connection from an agent."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        error_body: ErrorBody = plain_error,
        on_refused: Callable[[int, str], None] | None = None,
        accept_connect: bool = False,
    ) -> None:
        self._on_refused = on_refused
        self._accept_connect = accept_connect
        self._reader = reader
        self._writer = writer
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=256 * 1024)
        self._max_body = max_body
        self._error_body = error_body
        self._head: ClientHead | None = None
        self._first_read = True
        self._request: h11.Request | None = None
        self.closed = False
        #: True while a request is being answered; False between requests.
        self.busy = False
        #: The connection served inside this one's tunnel (TLS interception).
        self.inner: ClientConnection | None = None

    # -- reading -----------------------------------------------------------

    async def _receive(self) -> bytes:
        data = await self._reader.read(_READ_SIZE)
        if self._first_read and data:
            self._first_read = False
            if _H2_PREFACE.startswith(data[: len(_H2_PREFACE)]) and data.startswith(b"PRI "):
                self._writer.write(
                    _H2_SETTINGS
                    + _h2_goaway(b"wiretape speaks HTTP/1.1 only; HTTP/2 is not supported yet")
                )
                await self._drain()
                raise ProtocolRefused("HTTP/2 prior knowledge")
        return data

    async def _next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self._h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self._h11.receive_data(await self._receive())

    async def read_request(self) -> Request | None:
        """The next complete request, or None when the client closed.

        Malformed requests get a 400, bodies over the cap a 413, CONNECT a
        405 and WebSocket upgrades a 501; each then raises ProtocolRefused.
        """
        try:
            event = await self._next_event()
        except h11.RemoteProtocolError as exc:
            await self._refuse(400, "malformed_request", f"malformed HTTP/1.1 request: {exc}")
            raise ProtocolRefused(str(exc)) from exc
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        assert isinstance(event, h11.Request)
        self._request = event
        headers: Headers = tuple((bytes(k), bytes(v)) for k, v in event.headers.raw_items())
        if event.method == b"CONNECT" and self._accept_connect:
            return Request(method=b"CONNECT", target=bytes(event.target), headers=headers,
                           body=b"", http_version=bytes(event.http_version))
        if event.method == b"CONNECT":
            await self._refuse(
                405, "connect_not_supported",
                "wiretape is listening as a base-URL endpoint, not as a forward proxy: "
                "CONNECT is not supported here; point the agent's base URL at this address",
            )
            raise ProtocolRefused("CONNECT")
        upgrade = [v.lower() for k, v in headers if k.lower() == b"upgrade"]
        if any(b"websocket" in v for v in upgrade):
            await self._refuse(501, "websocket_not_supported",
                               "wiretape does not support WebSocket upgrades yet")
            raise ProtocolRefused("WebSocket upgrade")
        declared = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > self._max_body:
            await self._refuse_too_large()
        if self._h11.they_are_waiting_for_100_continue:
            interim = h11.InformationalResponse(status_code=100, headers=[])
            self._writer.write(self._h11.send(interim) or b"")
        body = bytearray()
        while True:
            try:
                part = await self._next_event()
            except h11.RemoteProtocolError as exc:
                await self._refuse(400, "malformed_request", f"malformed request body: {exc}")
                raise ProtocolRefused(str(exc)) from exc
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > self._max_body:
                    await self._refuse_too_large()
            elif isinstance(part, h11.EndOfMessage):
                break
            elif isinstance(part, h11.ConnectionClosed):
                return None
        return Request(
            method=bytes(event.method),
            target=bytes(event.target),
            headers=headers,
            body=bytes(body),
            http_version=bytes(event.http_version),
        )

    async def _refuse_too_large(self) -> None:
        await self._refuse(
            413, "request_too_large",
            f"request body is over wiretape's cap of {self._max_body} bytes "
            "(raise it with --max-body)",
        )
        raise ProtocolRefused("body too large")

    async def _refuse(self, status: int, code: str, message: str, *, notify: bool = True) -> None:
        if notify and self._on_refused is not None:
            self._on_refused(status, code)
        headers, body = self._error_body(status, code, "wiretape: " + message)
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await self.send_head(status, _REASONS.get(status, b""), headers, keep_alive=False)
            await self.send_data(body)
            await self.end()
        await self.close()

    # -- tunnels (CONNECT, RFC 9110 §9.3.6) -------------------------------

    async def accept_tunnel(self) -> bytes:
        """Answer a CONNECT with 200: from here the connection carries the
        client's own bytes. Returns bytes the client already sent past the
        request head (usually none: clients wait for the answer)."""
        self._h11.send(h11.Response(status_code=200, headers=[]))
        self._writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await self._drain()
        trailing, _closed = self._h11.trailing_data
        return bytes(trailing)

    async def refuse_tunnel(self, status: int, code: str, message: str) -> None:
        """Answer a CONNECT with an error and close (the caller reports it)."""
        await self._refuse(status, code, message, notify=False)

    async def start_tls(self, context: ssl.SSLContext) -> None:
        """Upgrade this (tunnelled) connection to TLS as the server side.
        Raises ssl.SSLError or ConnectionError when the handshake fails."""
        await self._writer.start_tls(context)

    @property
    def streams(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return self._reader, self._writer

    # -- writing -----------------------------------------------------------

    async def send_head(
        self, status: int, reason: bytes, headers: Headers, *, keep_alive: bool = True
    ) -> ClientHead:
        """Write a response head; hop-by-hop fields are replaced per hop.py."""
        method = self._request.method if self._request is not None else b"GET"
        wants_close = self._request is not None and any(
            k.lower() == b"connection" and b"close" in v.lower()
            for k, v in self._request.headers.raw_items()
        )
        old_client = self._request is not None and self._request.http_version == b"1.0"
        head = client_head(
            status, reason, headers, method=bytes(method),
            keep_alive=keep_alive and not wants_close and not old_client,
        )
        self._head = head
        try:
            self._h11.send(
                h11.Response(status_code=status, reason=reason,
                             headers=[(k, v) for k, v in head.headers])
            )
        except h11.LocalProtocolError:
            self._head = head = ClientHead(head.status, head.reason, head.headers,
                                           head.framing, False, head.dropped)
        self._writer.write(head.encode())
        await self._drain()
        return head

    async def send_data(self, data: bytes) -> None:
        """Write one piece of the body (one chunk when chunked)."""
        if not data or self._head is None:
            return
        if self._head.framing is Framing.CHUNKED:
            self._writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
        elif self._head.framing is not Framing.NONE:
            self._writer.write(data)
        self._h11_send_quietly(h11.Data(data=data))
        await self._drain()

    async def end(self) -> None:
        """Finish the response normally (terminating chunk when chunked)."""
        head = self._head
        if head is not None and head.framing is Framing.CHUNKED:
            self._writer.write(b"0\r\n\r\n")
        self._h11_send_quietly(h11.EndOfMessage())
        await self._drain()
        if head is None or not head.keep_alive or head.framing is Framing.CLOSE:
            await self.close()

    async def abort(self) -> None:
        """Cut the response off where it is: close without a terminator."""
        transport = self._writer.transport
        if not self.closed:
            self.closed = True
            transport.abort() if hasattr(transport, "abort") else transport.close()

    def next_cycle(self) -> bool:
        """Prepare for the next request on this connection; False if it must close."""
        if self.closed:
            return False
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._head = None
            self._request = None
            return True
        return False

    def _h11_send_quietly(self, event: h11.Event) -> None:
        try:
            self._h11.send(event)
        except h11.LocalProtocolError:
            self._head = None if self._head is None else ClientHead(
                self._head.status, self._head.reason, self._head.headers,
                self._head.framing, False, self._head.dropped)

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self.closed = True
            raise ClientGone(str(exc)) from exc
        if self._writer.is_closing():
            self.closed = True
            raise ClientGone("client closed the connection")

    @property
    def idle(self) -> bool:
        """Between requests (here, or in the connection inside its tunnel)."""
        return self.inner.idle if self.inner is not None else not self.busy

    def hang_up(self) -> None:
        """Close the socket now (no await): a pending read sees end of stream."""
        self._writer.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
        except (ConnectionError, TimeoutError, RuntimeError, ssl.SSLError, OSError):
            pass


class ClientGone(Exception):
    """The agent closed its connection while a response was being written."""


_REASONS = {400: b"Bad Request", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
            413: b"Content Too Large", 501: b"Not Implemented", 502: b"Bad Gateway",
            504: b"Gateway Timeout"}


Handler = Callable[[ClientConnection, Request], Awaitable[None]]


async def serve_connection(conn: ClientConnection, handler: Handler,
                           connect: Handler | None = None) -> None:
    """Read requests from ``conn`` and hand each to ``handler`` until the
    connection ends. A CONNECT (when the connection accepts them) goes to
    ``connect``, which owns the connection from then on."""
    try:
        while True:
            try:
                request = await conn.read_request()
            except ProtocolRefused:
                return
            if request is None:
                return
            if request.method == b"CONNECT" and connect is not None:
                await connect(conn, request)
                return
            conn.busy = True
            try:
                await handler(conn, request)
            except ClientGone:
                return
            finally:
                conn.busy = False
            if not conn.next_cycle():
                return
    except (ConnectionError, asyncio.IncompleteReadError, ClientGone):
        # ClientGone here: the client left while a refusal was being written.
        return
    finally:
        await conn.close()
