"""HTTP/2 on the listening side (RFC 9113), driven by the h2 library.

A connection whose first bytes are the HTTP/2 connection preface (RFC 9113
§3.4: prior knowledge on a plain port, or after ALPN chose ``h2`` inside an
intercepted tunnel) is handed here by ``http1.serve_connection``. Each
stream is one request, handed to the same per-request handler as an
HTTP/1.1 request, with an :class:`H2Stream` as the thing it answers
through (``http1.Responder``: ``send_head``, ``send_data``, ``end``,
``abort``). Streams are served concurrently, each by a task of its own; a
stream's DATA waits for its own flow-control window (RFC 9113 §5.2), so a
client slow to read one stream does not hold up the others.

Requests: the pseudo-header fields give the method and target
(``:path``); ``:authority`` becomes a ``host`` field when the request has
none (RFC 9113 §8.3.1); split ``cookie`` fields are joined with ``; ``
(§8.2.3); the request's ``http_version`` is ``b"2"``. Responses: the
connection-specific fields h2 forbids (§8.2.2: Connection and the fields
it names, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade, TE)
are dropped, names are lower-cased; each ``send_data`` call is one DATA
frame unless the peer's window or frame size cuts it. ``abort`` resets the
stream (RST_STREAM, INTERNAL_ERROR).

A request refused while its body still arrives (413 over the cap, 408
after a pause, 431, CONNECT) gets its whole answer first (HEADERS, DATA,
END_STREAM); the rest of its upload is then read and thrown away, its
flow-control window kept open, until the client ends or resets the stream.
When the client sends more than :data:`DISCARD_AT_LEAST` bytes (or the cap,
when larger) past the refusal, or pauses for :data:`LINGER_PAUSE` seconds,
the stream is reset with NO_ERROR, which asks the client to stop sending
without error (RFC 9113 §8.1). The reset does not come at once because
clients still uploading do not all keep the answer they got (curl 7.88
fails with "Stream error in the HTTP/2 framing layer", httpx waits for a
window that never opens).

A protocol error from the client (a malformed frame, a bad header block)
gets the GOAWAY h2 makes for it and one logged line; the other connections
are served on.

Knows nothing of recording, replaying or origins.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes

from wiretape.model import Headers, Request
from wiretape.proxy.faults import internal_error, log, one_line
from wiretape.proxy.hop import HOP_BY_HOP, ClientHead, Framing, client_head, connection_options
from wiretape.proxy.http1 import (
    HOLD_AT_MOST,
    READ_SIZE,
    ClientConnection,
    ClientGone,
    Handler,
    Leaving,
    origin_form,
)

#: Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
MAX_STREAMS = 100
#: Bytes of a refused request's upload read and thrown away after its answer
#: (at least; the body cap when it is larger) before the stream is reset.
DISCARD_AT_LEAST = 16 * 1024 * 1024
#: Seconds a refused request's upload may pause (at most; the body timeout
#: when it is shorter) before the stream is reset.
LINGER_PAUSE = 5.0


def response_fields(status: int, headers: Headers) -> list[tuple[bytes, bytes]]:
    """The HTTP/2 header block for a response: ``:status`` first, then
    ``headers`` in order with lower-cased names, without the fields HTTP/2
    forbids (RFC 9113 §8.2.2) or that ``Connection`` names."""
    drop = HOP_BY_HOP | connection_options(headers) | {b"proxy-connection"}
    fields = [(b":status", b"%d" % status)]
    fields.extend((k.lower(), v) for k, v in headers if k.lower() not in drop)
    return fields


def request_of(fields: list[tuple[bytes, bytes]], body: bytes) -> Request:
    """A ``Request`` from an HTTP/2 request's header block (h2 checked the
    pseudo-header fields are there, first, and valid: RFC 9113 §8.3.1)."""
    pseudo: dict[bytes, bytes] = {}
    headers: list[tuple[bytes, bytes]] = []
    cookies: list[bytes] = []
    at_cookie = -1
    for name, value in fields:
        if name.startswith(b":"):
            pseudo[name] = value
        elif name == b"cookie":
            if at_cookie < 0:
                at_cookie = len(headers)
                headers.append((name, b""))
            cookies.append(value)
        else:
            headers.append((name, value))
    if cookies:
        headers[at_cookie] = (b"cookie", b"; ".join(cookies))
    authority = pseudo.get(b":authority")
    if authority and not any(k == b"host" for k, _ in headers):
        headers.insert(0, (b"host", authority))
    return Request(method=pseudo.get(b":method", b""), target=pseudo.get(b":path", b""),
                   headers=tuple(headers), body=body, http_version=b"2")


class H2Stream:
    """One HTTP/2 stream's answer: the ``http1.Responder`` a handler writes
    its response through. Raises ClientGone when the client reset the
    stream, closed the connection, or gave no window for the body's
    timeout."""

    def __init__(self, server: H2Server, stream_id: int) -> None:
        self._server = server
        self.stream_id = stream_id
        self.fields: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        #: why the client can no longer be answered (None: it can)
        self.gone: str | None = None
        #: the request was refused while it arrived (its answer is under way)
        self.refused = False
        #: a task answers it (the request is complete, or was refused)
        self.started = False
        self.method = b"GET"
        self.head: ClientHead | None = None
        self.done = False
        #: bytes of a refused request's body thrown away
        self.discarded = 0
        #: the client ended its side of the stream (END_STREAM)
        self.upload_ended = False
        #: set by :meth:`wake`: a WINDOW_UPDATE, new settings, DATA,
        #: END_STREAM or a reset for the stream, or the connection's end (one
        #: event for all: the one task answering a stream waits for a window
        #: while it writes, and only after that, for a refused request's
        #: upload, for arrivals)
        self._woken = asyncio.Event()
        #: told by :meth:`wake` once ``gone`` is (``on_leave``, ``client_gone``)
        self._leaving = Leaving()
        #: DATA bytes queued since the last write (``more=True``)
        self._held = 0

    def wake(self) -> None:
        """The stream's window (or state) may have changed."""
        self._woken.set()
        if self.gone is not None:
            self._leaving.leave(self.gone)

    def on_leave(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(why)`` once the client reset the stream or the
        connection ended (``http1.Responder``): soon, if it has."""
        if self.gone is not None:
            self._leaving.leave(self.gone)
        return self._leaving.watch(callback)

    async def client_gone(self) -> str:
        """Return (why) once the client reset the stream or the connection
        ended (``http1.Responder``)."""
        if self.gone is not None:
            self._leaving.leave(self.gone)
        return await self._leaving.wait()

    async def arrival(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for DATA, END_STREAM or a reset on the
        stream (or the connection's end); False when none came."""
        self._woken.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._woken.wait()
        except TimeoutError:
            return False
        return True

    def _check(self) -> None:
        if self.gone is not None:
            raise ClientGone(self.gone)

    async def send_head(self, status: int, reason: bytes, headers: Headers, *,
                        keep_alive: bool = True, more: bool = False) -> ClientHead:
        """Send the response's HEADERS frame; the reason phrase is not
        carried (HTTP/2 has none). ``keep_alive`` has no meaning here.
        ``more``: held, to go out with what follows (``http1.Responder``)."""
        self._check()
        base = client_head(status, reason, headers, method=self.method, keep_alive=True)
        fields = response_fields(status, base.headers)
        kept = {k for k, _ in fields}
        dropped = tuple(k.decode("latin-1") for k, _ in base.headers if k.lower() not in kept)
        self.head = ClientHead(status, reason, tuple(fields[1:]), base.framing, True,
                               base.dropped + dropped)
        try:
            self._server.h2.send_headers(self.stream_id, fields)
        except h2.exceptions.H2Error as exc:
            self.gone = f"the stream cannot be answered: {one_line(exc)}"
            raise ClientGone(self.gone) from exc
        if not more:
            await self._server.flush()
        return self.head

    async def send_data(self, data: bytes, *, more: bool = False) -> None:
        """Send one piece of the body: one DATA frame, or several when the
        peer's flow-control window or largest frame is smaller. ``more``:
        held, to go out with what follows (at most 256 KiB is held)."""
        if not data or self.head is None or self.head.framing is Framing.NONE:
            if not more:
                await self.flush()
            return
        view = memoryview(data)
        while view:
            size = await self._room(len(view))
            try:
                self._server.h2.send_data(self.stream_id, bytes(view[:size]))
            except h2.exceptions.H2Error as exc:
                self.gone = f"the stream cannot be answered: {one_line(exc)}"
                raise ClientGone(self.gone) from exc
            view = view[size:]
            self._held += size
            if not more or view or self._held >= HOLD_AT_MOST:
                await self.flush()

    async def flush(self) -> None:
        """Send what was held now."""
        self._held = 0
        await self._server.flush()

    async def answer(self, status: int, reason: bytes, headers: Headers, body: bytes, *,
                     keep_alive: bool = True) -> None:
        """A whole response (HEADERS, DATA, END_STREAM) in one write."""
        await self.send_head(status, reason, headers, more=True)
        await self.send_data(body, more=True)
        await self.end()

    async def _room(self, wanted: int) -> int:
        """Bytes that may be sent now (at least 1): waits for a
        WINDOW_UPDATE up to the body timeout (RFC 9113 §6.9)."""
        h2conn = self._server.h2
        timeout = self._server.conn.limits.body_timeout
        while True:
            self._check()
            try:
                room = min(wanted, h2conn.local_flow_control_window(self.stream_id),
                           h2conn.max_outbound_frame_size)
            except h2.exceptions.H2Error as exc:
                self.gone = f"the stream is closed: {one_line(exc)}"
                raise ClientGone(self.gone) from exc
            if room > 0:
                return room
            await self.flush()  # (what is held is what the peer's window waits for)
            self._woken.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._woken.wait()
            except TimeoutError:
                self.gone = f"the client read nothing of the stream for {timeout:g} s"
                await self.abort()
                raise ClientGone(self.gone) from None

    async def end(self) -> None:
        """End the response (END_STREAM)."""
        self._check()
        if self.done:
            return
        try:
            self._server.h2.end_stream(self.stream_id)
        except h2.exceptions.H2Error as exc:
            self.gone = f"the stream cannot be ended: {one_line(exc)}"
            raise ClientGone(self.gone) from exc
        self.done = True
        await self._server.flush()

    async def abort(self) -> None:
        """Cut the response off where it is (RST_STREAM with INTERNAL_ERROR).
        Never raises."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(h2.exceptions.H2Error):
            self._server.h2.reset_stream(self.stream_id, ErrorCodes.INTERNAL_ERROR)
        with contextlib.suppress(ClientGone):
            await self._server.flush()


class H2Server:
    """One client connection spoken as HTTP/2 (server side)."""

    def __init__(self, conn: ClientConnection, handler: Handler) -> None:
        self.conn = conn
        self._handler = handler
        self._reader, self._writer = conn.streams
        config = h2.config.H2Configuration(client_side=False, header_encoding=None,
                                           validate_inbound_headers=True)
        self.h2 = h2.connection.H2Connection(config=config)
        # Announced in the server preface (RFC 9113 §6.5.2): the header
        # block may be as large as an HTTP/1.1 head may be.
        head_bytes = conn.limits.max_head_bytes
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: head_bytes})
        self.h2.decoder.max_header_list_size = head_bytes
        self._streams: dict[int, H2Stream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        #: the connection can carry nothing more
        self._over = False

    async def flush(self) -> None:
        """Write what h2 has queued and wait until the socket takes it.
        Raises ClientGone when the client is gone or reads nothing for the
        body timeout."""
        data = self.h2.data_to_send()
        if self._over or self.conn.closed:
            raise ClientGone("the connection is closed")
        if data:
            self._writer.write(data)
        timeout = self.conn.limits.body_timeout
        try:
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError as exc:
            self._lost(f"the client read nothing for {timeout:g} s")
            self._writer.transport.abort()
            raise ClientGone(f"the client read nothing for {timeout:g} s") from exc
        except (ConnectionError, RuntimeError, ssl.SSLError) as exc:
            self._lost(str(exc) or type(exc).__name__)
            raise ClientGone(str(exc)) from exc

    def _lost(self, why: str) -> None:
        """The connection is over: no stream can be answered any more."""
        self._over = True
        for stream in self._streams.values():
            stream.gone = stream.gone or why
            stream.wake()

    async def serve(self, first: bytes) -> None:
        """Serve streams until the client closes, goes idle past the idle
        timeout, breaks the protocol, or the proxy stops; then wait for the
        streams under way. Raises what ``flush`` and reading raise
        (ClientGone, OSError, ssl.SSLError); the caller counts them."""
        self.h2.initiate_connection()
        try:
            data = first
            while True:
                if data and not await self._receive(data):
                    break
                await self.flush()
                if self._closing or self._finish_if_draining():
                    break
                limits = self.conn.limits
                arriving = [s for s in self._streams.values() if not s.started]
                wait = (limits.body_timeout if arriving
                        else None if self._streams else limits.idle_timeout)
                try:
                    async with asyncio.timeout(wait):
                        data = await self._reader.read(READ_SIZE)
                except TimeoutError:
                    if not arriving:
                        self.conn.fault("idle_timeout")
                        self._goodbye()
                        break
                    self.conn.fault("body_timeout")
                    for stream in arriving:  # requests begun, stalled
                        self._refuse(stream, 408, "request_timeout",
                                     f"the request body did not arrive after a pause of "
                                     f"{limits.body_timeout:g} s")
                    data = b""
                    continue
                if not data:
                    break
        except asyncio.CancelledError:
            # the proxy is stopping past its grace: so are the streams under way
            for task in self._tasks:
                task.cancel()
            raise
        finally:
            self._lost("the client closed the connection")
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _receive(self, data: bytes) -> bool:
        """Feed ``data`` to h2 and act on its events; False when the
        connection is over (a protocol error, or the client's GOAWAY)."""
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self.conn.note_refused(400, "http2_protocol_error")
            code = getattr(exc, "error_code", ErrorCodes.PROTOCOL_ERROR)
            log.warning("wiretape: HTTP/2 protocol error from the client on %s: %s; it got a "
                        "GOAWAY (%s) and was closed, the other connections are served on",
                        self.conn.name, one_line(exc), getattr(code, "name", code))
            with contextlib.suppress(ClientGone):
                await self.flush()
            return False
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._began(event)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                self._ended(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                stream = self._streams.get(event.stream_id)
                if stream is not None:
                    stream.gone = "the client reset the stream"
                    stream.done = True
                    stream.wake()
                    if not stream.started:  # nothing answers it: forget it now
                        self._forget(stream)
            elif isinstance(event, h2.events.WindowUpdated):
                self._wake(event.stream_id)
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self._wake(0)
            elif isinstance(event, h2.events.ConnectionTerminated):
                return False
        return True

    def _wake(self, stream_id: int | None) -> None:
        if not stream_id:
            for each in self._streams.values():
                each.wake()
        elif (stream := self._streams.get(stream_id)) is not None:
            stream.wake()

    def _began(self, event: h2.events.RequestReceived) -> None:
        assert event.stream_id is not None
        stream = H2Stream(self, event.stream_id)
        stream.fields = [(bytes(k), bytes(v)) for k, v in event.headers or ()]
        stream.method = next((v for k, v in stream.fields if k == b":method"), b"GET")
        self._streams[stream.stream_id] = stream
        self.conn.busy = True
        if len(stream.fields) > self.conn.limits.max_headers:
            self._refuse(stream, 431, "request_header_fields_too_large",
                         f"the request has {len(stream.fields)} header fields; wiretape takes "
                         f"at most {self.conn.limits.max_headers}")
        elif stream.method == b"CONNECT":
            self._refuse(stream, 405, "connect_not_supported",
                         "CONNECT inside HTTP/2 is not supported; send the request itself")
        elif (not event.stream_ended
              and (b"expect", b"100-continue") in ((k, v.lower()) for k, v in stream.fields)):
            # the body is read whole here: ask for it (RFC 9110 §10.1.1)
            with contextlib.suppress(h2.exceptions.H2Error):
                self.h2.send_headers(stream.stream_id, [(b":status", b"100")])

    def _data(self, event: h2.events.DataReceived) -> None:
        assert event.stream_id is not None
        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        stream = self._streams.get(event.stream_id)
        if stream is None:
            return
        if stream.refused:  # thrown away, the window kept open (acknowledged above)
            stream.discarded += len(event.data or b"")
            stream.wake()
            return
        stream.body += event.data or b""
        if len(stream.body) > self.conn.max_body:
            self._refuse(stream, 413, "request_too_large",
                         f"request body is over wiretape's cap of {self.conn.max_body} bytes "
                         "(raise it with --max-body)")

    def _ended(self, stream_id: int | None) -> None:
        stream = self._streams.get(stream_id or 0)
        if stream is None:
            return
        stream.upload_ended = True
        if stream.refused:
            stream.wake()
            return
        request = request_of(stream.fields, bytes(stream.body))
        stream.body = bytearray()
        checked = origin_form(request.target, self.conn.authority)
        if isinstance(checked, str):
            self._refuse(stream, 400, "malformed_request",
                         f"{checked}; got {request.target[:200].decode('latin-1')!r}")
            return
        request = Request(request.method, checked, request.headers, request.body,
                          request.http_version)
        self._start(stream, self._handler(stream, request))

    def _refuse(self, stream: H2Stream, status: int, code: str, message: str) -> None:
        stream.refused = True
        if not stream.upload_ended:
            # The client may end its upload short once it has the answer (curl
            # does): a body shorter than its content-length is then no error
            # worth the connection (h2 would make it one: RFC 9113 §8.1.1
            # makes it a stream error, and the stream is answered already).
            h2_stream = self.h2.streams.get(stream.stream_id)
            if h2_stream is not None:
                h2_stream._expected_content_length = None
        headers, body = self.conn.refusal(status, code, message)

        async def answer() -> None:
            await stream.answer(status, b"", headers, body)
            await self._linger(stream)

        self._start(stream, answer())

    async def _linger(self, stream: H2Stream) -> None:
        """After a refused request's answer: throw its upload away until the
        client ends or resets the stream; past :data:`DISCARD_AT_LEAST`
        bytes (or the cap) or a pause of :data:`LINGER_PAUSE` s, reset it
        with NO_ERROR: the rest is not wanted (RFC 9113 §8.1). Raises
        ClientGone when the connection is lost."""
        most = max(self.conn.max_body, DISCARD_AT_LEAST)
        pause = min(self.conn.limits.body_timeout, LINGER_PAUSE)
        while stream.gone is None and not stream.upload_ended and stream.discarded <= most:
            if not await stream.arrival(pause):
                break
        if stream.gone is None and not stream.upload_ended:
            with contextlib.suppress(h2.exceptions.H2Error):
                self.h2.reset_stream(stream.stream_id, ErrorCodes.NO_ERROR)
            await self.flush()

    def _forget(self, stream: H2Stream) -> None:
        self._streams.pop(stream.stream_id, None)
        self.conn.busy = bool(self._streams)

    def _start(self, stream: H2Stream, work: Awaitable[None]) -> None:
        stream.started = True

        async def run() -> None:
            try:
                await work
            except ClientGone:
                self.conn.fault("client_gone")
            except (OSError, ssl.SSLError):
                self.conn.fault("connection_error")
            except Exception as exc:
                self.conn.fault("internal_error")
                internal_error(f"{self.conn.name} (HTTP/2 stream {stream.stream_id})", exc)
                await self._fail(stream, exc)
            finally:
                if not stream.done:
                    await stream.abort()
                self._forget(stream)
                if self._finish_if_draining():
                    with contextlib.suppress(ClientGone):
                        await self.flush()

        task = asyncio.create_task(run(), name=f"wiretape-{self.conn.name}-h2-{stream.stream_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fail(self, stream: H2Stream, exc: BaseException) -> None:
        """After a bug while answering: a 500 when no answer was begun."""
        if stream.head is not None or stream.gone:
            return
        headers, body = self.conn.refusal(500, "internal_error",
                                          f"internal error: {one_line(exc)}", count=False)
        with contextlib.suppress(ClientGone):
            await stream.answer(500, b"", headers, body)

    def _finish_if_draining(self) -> bool:
        """When the proxy is stopping and no stream is under way: GOAWAY,
        then the connection closes. True when it did."""
        if self.conn.draining and not self._streams and not self._closing:
            self._goodbye()
            self.conn.hang_up()
            return True
        return False

    def _goodbye(self) -> None:
        self._closing = True
        with contextlib.suppress(h2.exceptions.H2Error):
            self.h2.close_connection(ErrorCodes.NO_ERROR)
        data = self.h2.data_to_send()
        if data and not (self._over or self.conn.closed):
            self._writer.write(data)


async def serve_h2(conn: ClientConnection, first: bytes, handler: Handler) -> None:
    """Serve ``conn`` as HTTP/2, ``first`` being the bytes already read
    (they begin with the connection preface). Raises what
    ``H2Server.serve`` raises."""
    await H2Server(conn, handler).serve(first)
