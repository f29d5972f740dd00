"""The listening side of the proxy: one client connection, driven by h11.

Owns reading requests (with a body cap, 100-continue, timeouts, a cap on
header fields, and clear errors for CONNECT, malformed WebSocket upgrades
and request-targets or framings it will not relay; a connection opening
with the HTTP/2 preface is handed to ``proxy.http2``), answering an upgrade
with 101, and writing responses byte for byte: the head is serialised here
(order and case as given), the body framed per ``hop.Framing``. h11 tracks the
connection state so keep-alive works; its own output for responses is not
used.

Knows nothing of recording, replaying or origins.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn, Protocol
from urllib.parse import urlsplit

import h11

from wiretape.model import DEFAULT_MAX_BODY, Headers, Request
from wiretape.proxy.faults import internal_error, log, one_line
from wiretape.proxy.hop import ClientHead, Framing, client_head
from wiretape.proxy.websocket import handshake_problem, is_upgrade

#: Bytes asked of a client's socket per read (HTTP/1.1 and HTTP/2 alike).
READ_SIZE = 65536
#: Bytes held for one write (``more=True``) before they are sent anyway
#: (a response's data, HTTP/1.1 and HTTP/2 alike).
HOLD_AT_MOST = 256 * 1024
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# HTTP/2 GOAWAY with HTTP_1_1_REQUIRED (RFC 9113 §6.8, §7: error code 0xd),
# preceded by an empty SETTINGS frame as the server preface (RFC 9113 §3.4).
_H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class Leaving:
    """Whom to tell that a client left, and why (``Responder.on_leave``):
    one watcher at a time, told once, on the event loop. What a client
    connection's reader and an HTTP/2 stream share."""

    def __init__(self) -> None:
        #: why the client left (None: it has not); set once
        self.why: str | None = None
        self._watcher: Callable[[str], None] | None = None

    def leave(self, why: str) -> None:
        """The client left (the first ``why`` given is kept): tell the watcher."""
        if self.why is None:
            self.why = why
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher(self.why)

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(why)`` once the client leaves (soon, if it has);
        returns what stops watching."""
        if self.why is not None:
            return asyncio.get_running_loop().call_soon(callback, self.why).cancel
        self._watcher = callback

        def stop() -> None:
            if self._watcher is callback:
                self._watcher = None

        return stop

    async def wait(self) -> str:
        """Return why, once the client has left."""
        left: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def told(why: str) -> None:
            if not left.done():
                left.set_result(why)

        stop = self.watch(told)
        try:
            return await left
        finally:
            stop()


class WatchedReader(asyncio.StreamReader):
    """A client connection's reader that tells its watcher (``leaving``)
    when the stream ends (the client closed or half-closed: RFC 9112 §9.6)
    or breaks, as the transport reports it: no task has to be reading for
    a handler to learn that its client left. ``server.Listeners`` makes
    every accepted connection's reader one of these."""

    def __init__(self, limit: int = READ_SIZE) -> None:
        super().__init__(limit=limit)
        self.leaving = Leaving()

    def feed_eof(self) -> None:
        super().feed_eof()
        self.leaving.leave("the client closed the connection")

    def set_exception(self, exc: Exception) -> None:
        super().set_exception(exc)
        self.leaving.leave(f"the connection broke ({one_line(exc)})")


def _h2_goaway(debug: bytes) -> bytes:
    payload = b"\x00\x00\x00\x00" + b"\x00\x00\x00\x0d" + debug
    return len(payload).to_bytes(3, "big") + b"\x07\x00\x00\x00\x00\x00" + payload


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how much a client connection may take; the one place
    these are set. Times in seconds.

    ``head_timeout``: a request head must be complete this long after its
    first byte (a new connection's first head: after the connection was
    accepted); else 408. ``idle_timeout``: a keep-alive connection with no
    request is closed after this long. ``body_timeout``: the longest pause
    while a request body arrives (408), or while the client does not read
    the response (the connection is dropped). ``max_headers`` header fields
    and ``max_head_bytes`` bytes of head at most; more gets 431 (RFC 6585 §5).
    """

    head_timeout: float = 30.0
    idle_timeout: float = 300.0
    body_timeout: float = 300.0
    max_headers: int = 1000
    max_head_bytes: int = 256 * 1024


class ProtocolRefused(Exception):
    """A request this proxy will not serve; the response was already sent."""


class PriorKnowledge(Exception):
    """The client opened with the HTTP/2 connection preface (RFC 9113 §3.4);
    ``data`` holds the bytes read so far, preface first."""

    def __init__(self, data: bytes) -> None:
        super().__init__("HTTP/2 connection preface")
        self.data = data


class _ReadTimeout(Exception):
    """No bytes from the client in time; ``what`` is idle, head or body."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(what)
        self.what = what
        self.seconds = seconds


def origin_form(target: bytes, authority: str | None = None) -> bytes | str:
    """``target`` as origin-form (``/path?query``, RFC 9112 §3.2.1), or why
    it is refused.

    Only origin-form names nothing but a path on the origin the connection
    is for. With ``authority`` (the host of an intercepted tunnel, with its
    port when not 443) absolute-form naming that authority is accepted too
    (RFC 9112 §3.2.2) and turned into origin-form; any other authority,
    userinfo, or form is refused.
    """
    if target.startswith(b"/"):
        if b"#" in target:
            return "a request-target carries no fragment (#)"
        return target
    if authority is not None and b"://" in target:
        text = target.decode("latin-1")
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError:
            return "the absolute-form request-target is not a URL"
        host = (parts.hostname or "").lower()
        named = host if port in (None, 443) else f"{host}:{port}"
        if (parts.scheme.lower() != "https" or "@" in parts.netloc or parts.fragment
                or named != authority.lower()):
            return f"the request-target names another origin than {authority}"
        return (parts.path or "/").encode("latin-1") + (
            b"?" + parts.query.encode("latin-1") if parts.query else b"")
    return "the request-target must be a path starting with / (origin-form)"


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
    """One accepted connection from an agent.

    ``authority``: this connection is the inside of an intercepted tunnel
    to that host (absolute-form naming it is accepted). ``accept_connect``:
    a forward proxy's connection (CONNECT, and absolute-form for the
    handler to refuse). ``on_refused(status, code)`` counts requests refused
    before any exchange began, ``on_fault(kind)`` connections ended by an
    error; ``name`` says which connection in a logged line.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        error_body: ErrorBody = plain_error,
        on_refused: Callable[[int, str], None] | None = None,
        accept_connect: bool = False,
        limits: ConnectionLimits | None = None,
        on_fault: Callable[[str], None] | None = None,
        authority: str | None = None,
        name: str = "a connection",
    ) -> None:
        self._on_refused = on_refused
        self._accept_connect = accept_connect
        self._reader = reader
        self._writer = writer
        self.limits = limits or ConnectionLimits()
        self.on_fault = on_fault
        self.name = name
        self._authority = authority
        self._h11 = h11.Connection(h11.SERVER,
                                   max_incomplete_event_size=self.limits.max_head_bytes)
        self._max_body = max_body
        self._error_body = error_body
        self._head: ClientHead | None = None
        #: bytes written with ``more=True``: sent by the next write that
        #: flushes, in one piece (a client woken once, not once per part)
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._first_read = True
        self._request: h11.Request | None = None
        self._loop = asyncio.get_running_loop()
        #: when the head being read began: the connection's start for its
        #: first request, else the first byte of the request (None: none yet)
        self._head_since: float | None = self._loop.time()
        #: whether any byte of the request being read has arrived
        self._began = False
        self.closed = False
        #: True while a request is being answered; False between requests.
        self.busy = False
        #: Set when the proxy is stopping: the answer under way is the last.
        self.draining = False
        #: The connection served inside this one's tunnel (TLS interception).
        self.inner: ClientConnection | None = None
        #: Whether an HTTP/2 preface hands the connection to HTTP/2
        #: (PriorKnowledge); else it gets SETTINGS and GOAWAY.
        self.accepts_h2 = False

    def fault(self, kind: str) -> None:
        """Count a connection-level error."""
        if self.on_fault is not None:
            self.on_fault(kind)

    def stop_after_answer(self) -> None:
        """Answer the request under way (with ``Connection: close``), then
        close; here and in the connection inside this one's tunnel."""
        self.draining = True
        if self.inner is not None:
            self.inner.stop_after_answer()

    # -- reading -----------------------------------------------------------

    async def _receive(self) -> bytes:
        data = await self._reader.read(READ_SIZE)
        if self._first_read and data:
            self._first_read = False
            if _H2_PREFACE.startswith(data[: len(_H2_PREFACE)]) and data.startswith(b"PRI "):
                if self.accepts_h2:
                    raise PriorKnowledge(data)
                self.note_refused(505, "http2_not_supported")
                self._writer.write(
                    _H2_SETTINGS
                    + _h2_goaway(b"wiretape serves HTTP/1.1 only on this connection")
                )
                await self._drain()
                raise ProtocolRefused("HTTP/2 prior knowledge")
        return data

    def _read_deadline(self) -> tuple[str, float]:
        """What the next read waits for (idle, head, body) and for how long."""
        if self._h11.their_state is h11.IDLE:
            if self._head_since is None:
                return "idle", self.limits.idle_timeout
            left = self._head_since + self.limits.head_timeout - self._loop.time()
            return "head", max(left, 0.0)
        return "body", self.limits.body_timeout

    async def _next_event(self) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
        while True:
            event = self._h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            what, seconds = self._read_deadline()
            try:
                async with asyncio.timeout(seconds):
                    data = await self._receive()
            except TimeoutError:
                raise _ReadTimeout(what, seconds) from None
            if data and self._h11.their_state is h11.IDLE:
                self._began = True
                if self._head_since is None:
                    self._head_since = self._loop.time()
            self._h11.receive_data(data)

    async def read_request(self) -> Request | None:
        """The next complete request, or None when the client closed (or
        stayed idle past the idle timeout).

        Refused, each with its answer sent and then ProtocolRefused raised:
        malformed requests, request-targets that are not origin-form,
        Transfer-Encoding with Content-Length (400); too many or too large
        header fields (431); bodies over the cap (413); heads or bodies that
        stall (408); CONNECT (405); WebSocket upgrades whose handshake is
        malformed (400, ``proxy.websocket.handshake_problem``). A well-formed
        upgrade is returned like any request (``switch_protocols`` answers it).
        """
        try:
            event = await self._next_event()
        except h11.RemoteProtocolError as exc:
            await self._refuse_malformed(exc, head=True)
        except _ReadTimeout as timeout:
            if not self._began:  # not a byte of a request: an idle connection
                self.fault("idle_timeout")
                await self.close()
                return None
            await self._refuse_timeout(timeout)
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        assert isinstance(event, h11.Request)
        self._request = event
        self._head_since, self._began = None, False
        headers: Headers = tuple((bytes(k), bytes(v)) for k, v in event.headers.raw_items())
        if len(headers) > self.limits.max_headers:
            await self._refuse(431, "request_header_fields_too_large",
                               f"the request has {len(headers)} header fields; wiretape takes "
                               f"at most {self.limits.max_headers}")
            raise ProtocolRefused("too many header fields")
        target = bytes(event.target)
        if event.method == b"CONNECT" and self._accept_connect:
            return Request(method=b"CONNECT", target=target, headers=headers,
                           body=b"", http_version=bytes(event.http_version))
        if event.method == b"CONNECT":
            await self._refuse(
                405, "connect_not_supported",
                "wiretape is listening as a base-URL endpoint, not as a forward proxy: "
                "CONNECT is not supported here; point the agent's base URL at this address",
            )
            raise ProtocolRefused("CONNECT")
        checked = origin_form(target, self._authority)
        if isinstance(checked, str) and not (self._accept_connect and b"://" in target):
            await self._refuse(400, "malformed_request",
                               f"{checked}; got {target[:200].decode('latin-1')!r}")
            raise ProtocolRefused("request-target")
        if isinstance(checked, bytes):
            target = checked
        names = {k.lower() for k, _ in headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            # RFC 9112 §6.3: may be rejected, and a proxy must never pass both on.
            await self._refuse(400, "malformed_request",
                               "the request has both Transfer-Encoding and Content-Length; "
                               "send one of them")
            raise ProtocolRefused("Transfer-Encoding with Content-Length")
        if is_upgrade(headers):
            problem = handshake_problem(bytes(event.method), bytes(event.http_version), headers)
            if problem is not None:
                await self._refuse(400, "malformed_websocket_handshake", problem)
                raise ProtocolRefused("WebSocket handshake")
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
                await self._refuse_malformed(exc, head=False)
            except _ReadTimeout as timeout:
                await self._refuse_timeout(timeout)
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
            target=target,
            headers=headers,
            body=bytes(body),
            http_version=bytes(event.http_version),
        )

    async def _refuse_malformed(self, exc: h11.RemoteProtocolError, *, head: bool) -> NoReturn:
        hint = exc.error_status_hint
        if head and hint == 431:
            await self._refuse(431, "request_header_fields_too_large",
                               f"the request head is over wiretape's cap of "
                               f"{self.limits.max_head_bytes} bytes")
        elif head and hint == 501:
            await self._refuse(501, "not_implemented", f"{exc} (RFC 9112 §6.1)")
        else:
            where = "request" if head else "request body"
            await self._refuse(400, "malformed_request", f"malformed HTTP/1.1 {where}: {exc}")
        raise ProtocolRefused(str(exc)) from exc

    async def _refuse_timeout(self, timeout: _ReadTimeout) -> NoReturn:
        self.fault(f"{timeout.what}_timeout")
        what = "request head" if timeout.what == "head" else "request body"
        pause = "within" if timeout.what == "head" else "after a pause of"
        await self._refuse(408, "request_timeout",
                           f"the {what} did not arrive {pause} {timeout.seconds:g} s")
        raise ProtocolRefused(f"{timeout.what} timeout")

    async def _refuse_too_large(self) -> NoReturn:
        await self._refuse(
            413, "request_too_large",
            f"request body is over wiretape's cap of {self._max_body} bytes "
            "(raise it with --max-body)",
        )
        raise ProtocolRefused("body too large")

    # -- for the HTTP/2 streams served on this connection (proxy.http2) ---

    @property
    def authority(self) -> str | None:
        """The host of the intercepted tunnel this connection is inside."""
        return self._authority

    @property
    def max_body(self) -> int:
        """The cap on a request body (bytes); a WebSocket message's cap too."""
        return self._max_body

    def note_refused(self, status: int, code: str) -> None:
        """Count a request (or connection) refused before any exchange began."""
        if self._on_refused is not None:
            self._on_refused(status, code)

    def refusal(self, status: int, code: str, message: str, *,
                count: bool = True) -> tuple[Headers, bytes]:
        """The headers and body refusing a request with ``status``; counted
        (``note_refused``) unless ``count`` is False."""
        if count:
            self.note_refused(status, code)
        return self._error_body(status, code, "wiretape: " + message)

    async def _refuse(self, status: int, code: str, message: str, *, notify: bool = True) -> None:
        if notify:
            self.note_refused(status, code)
        headers, body = self._error_body(status, code, "wiretape: " + message)
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE) and not self.closed:
            await self.answer(status, _REASONS.get(status, b""), headers, body, keep_alive=False)
        await self.close()

    async def fail(self, exc: BaseException) -> None:
        """After a bug while answering: a 500 when no answer was begun, then
        close. Never raises."""
        try:
            if self._head is None:
                await self._refuse(500, "internal_error",
                                   f"internal error: {one_line(exc)}", notify=False)
        except Exception:  # the client may be gone as well; closing is all that is left
            pass
        await self.close()

    # -- tunnels (CONNECT, RFC 9110 §9.3.6) -------------------------------

    async def accept_tunnel(self) -> bytes:
        """Answer a CONNECT with 200: from here the connection carries the
        client's own bytes. Returns bytes the client already sent past the
        request head (usually none: clients wait for the answer). Raises
        ClientGone."""
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

    def tunnelled(self, authority: str, *, max_body: int, error_body: ErrorBody,
                  on_refused: Callable[[int, str], None] | None) -> ClientConnection:
        """The connection inside this one's intercepted tunnel to
        ``authority``: same limits and fault counter, its own requests."""
        inner = ClientConnection(self._reader, self._writer, max_body=max_body,
                                 error_body=error_body, on_refused=on_refused,
                                 limits=self.limits, on_fault=self.on_fault,
                                 authority=authority, name=f"{self.name} (tunnel to {authority})")
        inner.draining = self.draining
        self.inner = inner
        return inner

    async def switch_protocols(self, reason: bytes, headers: Headers) -> bytes:
        """Answer an upgrade with 101 (RFC 9110 §15.2.2), ``headers`` as
        given (order and case): from here the connection carries the new
        protocol (``streams``). Returns bytes the client already sent past
        the request. Raises ClientGone."""
        self._h11.send(h11.InformationalResponse(status_code=101, headers=list(headers),
                                                 reason=reason))
        self._writer.write(b"HTTP/1.1 101 " + reason + b"\r\n"
                           + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n")
        await self._drain()
        trailing, _closed = self._h11.trailing_data
        return bytes(trailing)

    @property
    def streams(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return self._reader, self._writer

    # -- writing -----------------------------------------------------------

    async def send_head(
        self, status: int, reason: bytes, headers: Headers, *, keep_alive: bool = True,
        more: bool = False,
    ) -> ClientHead:
        """Write a response head; hop-by-hop fields are replaced per hop.py.
        ``more``: the caller writes more at once (its body, its end), so the
        head is held and goes out with it (:meth:`flush` sends it now)."""
        method = self._request.method if self._request is not None else b"GET"
        wants_close = self._request is not None and any(
            k.lower() == b"connection" and b"close" in v.lower()
            for k, v in self._request.headers.raw_items()
        )
        old_client = self._request is not None and self._request.http_version == b"1.0"
        head = client_head(
            status, reason, headers, method=bytes(method),
            keep_alive=keep_alive and not wants_close and not old_client and not self.draining,
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
        self._hold(head.encode())
        if not more:
            await self.flush()
        return head

    async def send_data(self, data: bytes, *, more: bool = False) -> None:
        """Write one piece of the body (one chunk when chunked). ``more``:
        held, as for :meth:`send_head`."""
        if self._head is None:
            return
        if data:
            self._hold_data(data)
        if not more or self._held_bytes >= HOLD_AT_MOST:
            await self.flush()

    def send_data_now(self, data: bytes) -> bool:
        """Write one piece of the body (one chunk when chunked) with what
        was held, at once and without waiting (a relay in the event loop's
        callback for the bytes' arrival). Returns True when bytes are left
        in the client's buffer: await :meth:`drain` before writing more.
        Raises ClientGone (the connection is closing)."""
        head = self._head
        if head is None:
            return False
        transport = self._writer.transport
        if transport.is_closing():
            self.closed = True
            raise ClientGone("client closed the connection")
        if data and head.framing is Framing.CHUNKED and not self._held:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # (as _hold_data makes it)
        else:
            if data:
                self._hold_data(data)
            if not self._held:
                return transport.get_write_buffer_size() > 0
            held = self._take_held()
            transport.write(held[0] if len(held) == 1 else b"".join(held))
        if transport.is_closing():  # (the socket refused it)
            self.closed = True
            raise ClientGone("client closed the connection")
        return transport.get_write_buffer_size() > 0

    def _hold_data(self, data: bytes) -> None:
        head = self._head
        assert head is not None
        if head.framing is Framing.CHUNKED:
            # (h11 is not told: a chunk changes none of its state, and
            # the bytes it would make are these)
            self._hold(b"%x\r\n" % len(data) + data + b"\r\n")
        else:
            if head.framing is not Framing.NONE:
                self._hold(data)
            self._h11_send_quietly(h11.Data(data=data))

    async def answer(self, status: int, reason: bytes, headers: Headers, body: bytes, *,
                     keep_alive: bool = True) -> None:
        """A whole response (head, body, end) in one write. Raises ClientGone."""
        await self.send_head(status, reason, headers, keep_alive=keep_alive, more=True)
        await self.send_data(body, more=True)
        await self.end()

    def _hold(self, data: bytes) -> None:
        self._held.append(data)
        self._held_bytes += len(data)

    def _take_held(self) -> list[bytes]:
        held, self._held, self._held_bytes = self._held, [], 0
        return held

    async def flush(self) -> None:
        """Send what was held (``more=True``) now, and wait while the
        client's buffer is full. Raises ClientGone."""
        if self._held:
            held = self._take_held()
            self._writer.write(held[0] if len(held) == 1 else b"".join(held))
            await self._drain()

    async def drain(self) -> None:
        """Wait while the client's buffer is full (after
        :meth:`send_data_now`). Raises ClientGone."""
        await self._drain()

    async def end(self) -> None:
        """Finish the response normally (terminating chunk when chunked),
        with whatever was held."""
        head = self._head
        if head is not None and head.framing is Framing.CHUNKED:
            self._hold(b"0\r\n\r\n")
        self._h11_send_quietly(h11.EndOfMessage())
        if self._held:
            await self.flush()
        else:
            await self._drain()
        if head is None or not head.keep_alive or head.framing is Framing.CLOSE:
            await self.close()

    async def abort(self) -> None:
        """Cut the response off where it is: close without a terminator
        (what was held is handed to the socket first, as if sent)."""
        transport = self._writer.transport
        if self._held and not self.closed:
            held = self._take_held()
            with contextlib.suppress(RuntimeError, OSError):
                self._writer.write(b"".join(held))
        if not self.closed:
            self.closed = True
            transport.abort() if hasattr(transport, "abort") else transport.close()

    async def client_gone(self) -> str:
        """Return (why) once the client has closed the connection (EOF: RFC
        9112 §9.6, a client that closes has abandoned its request) or it
        broke, while its request is answered: :meth:`on_leave`, awaited.
        Bytes that arrive meanwhile (a pipelined request) stay for the next
        read. On a connection :meth:`on_leave` cannot watch, this waits
        until cancelled."""
        reader = self._reader
        if isinstance(reader, WatchedReader):
            return await reader.leaving.wait()
        await asyncio.Event().wait()  # (cancelled by the handler)
        raise AssertionError("unreachable")

    def on_leave(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(why)`` on the loop once the client leaves (EOF,
        RFC 9112 §9.6; or the connection breaks) while its request is
        answered; returns what stops watching (call it before answering
        goes on). Costs no task and no read: the transport tells the
        reader (``WatchedReader``); bytes that arrive meanwhile (a
        pipelined request) stay for the next read. On a connection whose
        reader is a plain ``asyncio.StreamReader`` (not accepted by
        ``server.Listeners``) nothing is watched."""
        reader = self._reader
        if isinstance(reader, WatchedReader):
            return reader.leaving.watch(callback)
        return _not_watching

    def next_cycle(self) -> bool:
        """Prepare for the next request on this connection; False if it must close."""
        if self.closed or self.draining:
            return False
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._head = None
            self._request = None
            # a pipelined request already begun is timed from now
            self._began = bool(self._h11.trailing_data[0])
            self._head_since = self._loop.time() if self._began else None
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
        writer = self._writer
        try:
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.limits.body_timeout):
                    await writer.drain()
            else:  # all handed to the socket: nothing to wait for (no timer)
                await writer.drain()
        except TimeoutError as exc:
            self.closed = True
            self._writer.transport.abort()
            raise ClientGone(f"the client read nothing for {self.limits.body_timeout:g} s"
                             ) from exc
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


def _not_watching() -> None:
    """What stops a watch that was never started."""


class ClientGone(Exception):
    """The agent closed its connection while a response was being written."""


_REASONS = {400: b"Bad Request", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
            408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large", 500: b"Internal Server Error",
            501: b"Not Implemented", 502: b"Bad Gateway", 504: b"Gateway Timeout"}


class Responder(Protocol):
    """What a handler answers a request through: an HTTP/1.1 connection
    (``ClientConnection``) or one HTTP/2 stream (``http2.H2Stream``).
    Each method raises ClientGone when the client can no longer be
    answered, but ``abort`` and ``client_gone``, which never raise. What is written with
    ``more=True`` may be held and sent with what follows (``flush``,
    ``end`` and ``abort`` send it)."""

    async def send_head(self, status: int, reason: bytes, headers: Headers, *,
                        keep_alive: bool = True, more: bool = False) -> ClientHead: ...

    async def send_data(self, data: bytes, *, more: bool = False) -> None: ...

    async def flush(self) -> None: ...

    async def answer(self, status: int, reason: bytes, headers: Headers, body: bytes, *,
                     keep_alive: bool = True) -> None: ...

    async def end(self) -> None: ...

    async def abort(self) -> None: ...

    async def client_gone(self) -> str:
        """Return (why) once the client has abandoned the request (closed
        the connection, reset the stream); never raises ClientGone."""
        ...

    def on_leave(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(why)`` on the loop once the client abandons the
        request, with no task of its own; returns what stops watching."""
        ...


#: Answers one request.
Handler = Callable[[Responder, Request], Awaitable[None]]
#: Answers a CONNECT, owning the connection from then on.
ConnectHandler = Callable[[ClientConnection, Request], Awaitable[None]]
#: Serves a connection as HTTP/2: (connection, bytes read so far, handler).
Http2Server = Callable[[ClientConnection, bytes, Handler], Awaitable[None]]


async def serve_connection(conn: ClientConnection, handler: Handler,
                           connect: ConnectHandler | None = None,
                           http2: Http2Server | None = None) -> None:
    """Read requests from ``conn`` and hand each to ``handler`` until the
    connection ends. A CONNECT (when the connection accepts them) goes to
    ``connect``, which owns the connection from then on. A connection
    opening with the HTTP/2 preface goes to ``http2`` (without it, it gets
    GOAWAY with HTTP_1_1_REQUIRED, counted as refused).

    Never raises (but CancelledError): a connection that breaks is counted
    (``conn.fault``); a bug is one logged line, and a 500 when no answer
    was begun.
    """
    conn.accepts_h2 = http2 is not None
    try:
        while True:
            try:
                request = await conn.read_request()
            except ProtocolRefused:
                return
            except PriorKnowledge as h2c:
                assert http2 is not None
                await http2(conn, h2c.data, handler)
                return
            if request is None:
                return
            if request.method == b"CONNECT" and connect is not None:
                await connect(conn, request)
                return
            conn.busy = True
            try:
                await handler(conn, request)
            finally:
                conn.busy = False
            if not conn.next_cycle():
                return
    except ClientGone:
        conn.fault("client_gone")
    except ssl.SSLError as exc:
        conn.fault("tls_error")
        log.warning("wiretape: TLS error on %s: %s", conn.name, one_line(exc))
    except (OSError, asyncio.IncompleteReadError):
        conn.fault("connection_error")
    except Exception as exc:
        conn.fault("internal_error")
        internal_error(conn.name, exc)
        await conn.fail(exc)
    finally:
        await conn.close()
