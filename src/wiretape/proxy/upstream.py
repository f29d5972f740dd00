"""The upstream side of the recorder: a lean HTTP/1.1 forwarding client.

Owns the client that forwards to origins and building the request to the
origin (same target, Host set, hop-by-hop fields removed). The request head
is written as bytes, its fields in the order and case given: the proxy's
server side parsed and checked them with h11 already. The origin's
response is parsed by h11 (RFC 9112 framing: chunked, Content-Length,
close-delimited, no body for HEAD, 1xx, 204 and 304) and its body is read
as raw frames, de-chunked and never decoded. Connections are asyncio
streams (TLS with the origin's certificate verified) kept alive in a pool
per (scheme, address, port, SNI name).

Errors are httpx's exception classes (only those: httpx sends nothing
here), so callers catch what they caught when httpx's transport was the
client: ``httpx.ConnectError``/``ConnectTimeout`` before anything was sent,
``httpx.ReadTimeout``, ``ReadError``, ``RemoteProtocolError``,
``WriteTimeout``, ``WriteError``, ``PoolTimeout`` (all
``httpx.TransportError``) and ``httpx.InvalidURL``.

Parsing upstream URLs and addresses is ``wiretape.origins``'s. Only the
recorder imports this module: nothing on the replay path does (an import
contract in pyproject.toml, and tests/unit/test_import_boundaries.py, hold
it to that).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import h11
import httpx

from wiretape.model import Headers, Request
from wiretape.origins import UpstreamOptions
from wiretape.proxy.hop import upstream_request_headers


@dataclass(frozen=True)
class Timeouts:
    """Upstream timeouts (s): ``connect`` to open a connection (TCP and
    TLS handshake), ``read`` between two reads that bring bytes, ``write``
    for one write to drain, ``pool`` to wait for a free connection when
    ``MAX_CONNECTIONS`` are open."""

    connect: float = 30.0
    read: float = 900.0
    write: float = 120.0
    pool: float = 60.0


#: Reads wait long: a model may think for minutes and keep-alive comments
#: can be 15 s apart.
DEFAULT_TIMEOUT = Timeouts()
#: Connections open at once, over every origin; idle ones kept, over every
#: origin; seconds an idle one is kept.
MAX_CONNECTIONS = 200
MAX_IDLE = 50
IDLE_EXPIRY = 5.0
#: Bytes asked of the socket per read; largest response head (bytes).
READ_SIZE = 64 * 1024
MAX_HEAD = 100 * 1024
#: Bodies up to this size (bytes) go out in one write with their head.
_JOIN_BODY = 256 * 1024

#: (scheme, address dialled, port, TLS server name or None)
PoolKey = tuple[str, str, int, str | None]


@dataclass(frozen=True, slots=True)
class OutgoingRequest:
    """A request ready for the wire: its head as bytes (request line, fields
    and the blank line, RFC 9112 §2.1), its body, and where it goes."""

    method: bytes
    head: bytes
    body: bytes
    key: PoolKey


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str  # lower-case, as ``--resolve`` names it
    ascii_host: str  # IDNA-encoded (RFC 5891): dialled, and the TLS name
    port: int


@functools.lru_cache(maxsize=256)
def _origin(origin_root: str) -> _Origin:
    """``scheme://host[:port]`` parsed once per origin. Raises httpx.InvalidURL."""
    url = httpx.URL(origin_root)
    if url.scheme not in ("http", "https") or not url.host:
        raise httpx.InvalidURL(f"upstream {origin_root!r} is not an http(s) URL with a host")
    return _Origin(url.scheme, url.host, url.raw_host.decode("ascii"),
                   url.port or (443 if url.scheme == "https" else 80))


#: Methods whose empty body is still announced (``Content-Length: 0``), as
#: httpx did: RFC 9110 §8.6 says a user agent SHOULD for a method that
#: defines a meaning for an enclosed content.
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


def build_request(origin_root: str, host: str, request: Request,
                  resolve: Mapping[str, tuple[str, int]] | None = None) -> OutgoingRequest:
    """The request to send upstream for ``request`` (target unchanged).

    The target must be in origin-form (``/path?query``, RFC 9112 §3.2.1):
    it is sent as it came, so it cannot name another host or port.
    ``Host`` (``host``) comes first (RFC 9112 §3.2: a client SHOULD send it
    first), the other fields follow in the order and case given;
    ``Content-Length`` is the body's real length (added after the others
    for a body that came chunked). ``resolve`` maps a host to the (address,
    port) dialled, the certificate still checked against the host's name.
    Raises httpx.InvalidURL for any other target or a bad ``origin_root``,
    httpx.LocalProtocolError for a field with a line break in it.
    """
    target = request.target
    if not target.startswith(b"/") or b"#" in target:
        raise httpx.InvalidURL(f"request target {target[:80]!r} is not in origin-form")
    origin = _origin(origin_root)
    body = request.body
    fields = upstream_request_headers(request.headers, host.encode("latin-1"), len(body))
    method = request.method
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    length: bytes | None = None  # a Content-Length field added
    for name, value in fields:  # Host first (one, set by upstream_request_headers)
        if len(name) == 4 and name.lower() == b"host":
            lines += (name, b": ", value, b"\r\n")
    if (body or method in _BODY_METHODS) and not any(
            len(k) == 14 and k.lower() == b"content-length" for k, _ in fields):
        length = b"Content-Length: %d\r\n" % len(body)
        if not body:
            lines.append(length)
    for name, value in fields:
        if not (len(name) == 4 and name.lower() == b"host"):
            lines += (name, b": ", value, b"\r\n")
    if body and length is not None:
        lines.append(length)
    lines.append(b"\r\n")
    head = b"".join(lines)
    # One line per field: a CR or LF inside a value or the target would
    # start a field (or a message) of its own.
    ends = 1 + len(fields) + (length is not None) + 1  # request line, fields, blank line
    if head.count(b"\n") != ends or head.count(b"\r") != ends:
        raise httpx.LocalProtocolError("a request field or the target carries a line break")
    if resolve and origin.host in resolve:
        address, port = resolve[origin.host]
        key: PoolKey = (origin.scheme, address, port, origin.ascii_host)
    else:
        key = (origin.scheme, origin.ascii_host, origin.port,
               origin.ascii_host if origin.scheme == "https" else None)
    return OutgoingRequest(method, head, body, key)


class _Stale(Exception):
    """A reused connection the origin had closed: nothing of a response came."""


#: What h11 is told of each request: only its method matters to how the
#: response is framed (RFC 9112 §6.3); the head itself is written as given.
_STUBS: dict[bytes, h11.Request] = {}


def _stub(method: bytes) -> h11.Request:
    stub = _STUBS.get(method)
    if stub is None:
        stub = h11.Request(method=method, target=b"/", headers=[(b"Host", b"origin")])
        if len(_STUBS) < 64:
            _STUBS[method] = stub
    return stub


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, but the bytes received can go to a
    ``sink`` instead of the reader: called in the event loop's callback for
    their arrival, so that a body's frame is relayed with nothing awaited
    in between (``OriginResponse.relay``). ``poke`` is called when the
    origin ends the stream or the connection is lost (the reader has the
    end or the error, as without a sink)."""

    sink: Callable[[bytes], None] | None = None
    poke: Callable[[], None] | None = None

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:
            super().data_received(data)
        else:
            sink(data)

    def eof_received(self) -> bool | None:
        keep_open = super().eof_received()
        if self.poke is not None:
            self.poke()
        return keep_open

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.poke is not None:
            self.poke()


class _Connection:
    """One connection to an origin and its h11 state."""

    __slots__ = ("closed", "h11", "idle_since", "key", "protocol", "reader", "received",
                 "reused", "writer")

    def __init__(self, key: PoolKey, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, protocol: _Protocol) -> None:
        self.key = key
        self.reader = reader
        self.writer = writer
        self.protocol = protocol
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.idle_since = 0.0
        self.reused = False
        self.closed = False
        self.received = False  # whether a byte came since the request was written

    def usable(self) -> bool:
        """Whether an idle connection may carry a request: the origin has not
        closed it (an end of stream or an error pending on its reader) and
        sent nothing since its last response ended (bytes that would be
        taken for the next request's response)."""
        reader = self.reader
        return not (self.writer.transport.is_closing() or reader.exception() is not None
                    or reader.at_eof() or self.unread() or self.h11.trailing_data[0])

    def unread(self) -> bool:
        """Whether the reader holds bytes not read yet."""
        return bool(getattr(self.reader, "_buffer", b""))  # (no public view)

    def close(self) -> None:
        self.closed = True
        self.writer.close()

    async def read(self, timeouts: Timeouts) -> bytes:
        """Up to READ_SIZE bytes, b"" at the end of the stream. Raises
        httpx.ReadTimeout, httpx.ReadError."""
        try:
            async with asyncio.timeout(timeouts.read):
                data = await self.reader.read(READ_SIZE)
        except TimeoutError:
            raise httpx.ReadTimeout(
                f"the origin sent nothing for {timeouts.read:g} s") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        if data:
            self.received = True
        return data

    async def next_event(self, timeouts: Timeouts) -> h11.Event:
        """The origin's next event (h11 reads the framing). Raises
        httpx.RemoteProtocolError, httpx.ReadTimeout, httpx.ReadError."""
        machine = self.h11
        while True:
            try:
                event = machine.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                assert not isinstance(event, type)  # (never PAUSED: one request at a time)
                return event
            data = await self.read(timeouts)
            if not data and machine.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            machine.receive_data(data)


#: A data chunk's size line as the fast path reads it (RFC 9112 §7.1:
#: chunk-size CRLF): any other line (the last chunk, one with an extension,
#: a malformed one) is h11's to read.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,15})\r\n")
#: What may begin such a line: more bytes are waited for.
_SIZE_START = re.compile(rb"[0-9A-Fa-f]{0,15}\r?")
_NO_BODY = frozenset({204, 304})


def _chunked(method: bytes, head: h11.Response) -> bool:
    """Whether h11 reads this response's body as chunked (RFC 9112 §6.3:
    no body for HEAD, CONNECT's 2xx, 204 and 304; else Transfer-Encoding,
    which h11 accepts only as ``chunked``, wins over Content-Length)."""
    if method in (b"HEAD", b"CONNECT") or head.status_code in _NO_BODY:
        return False
    return any(name == b"transfer-encoding" for name, _ in head.headers)


class OriginResponse:
    """The origin's response, its body not read yet: ``status_code``,
    ``reason`` (bytes), ``headers`` (raw fields in order, original case),
    ``http_version`` (b"1.1" or b"1.0"). Read the body with ``aiter_raw``,
    then call ``aclose`` (always)."""

    __slots__ = (
        "_buf",
        "_complete",
        "_conn",
        "_fast",
        "_footer",
        "_left",
        "_pool",
        "_pos",
        "_timeouts",
        "headers",
        "http_version",
        "reason",
        "status_code",
    )

    def __init__(self, head: h11.Response, conn: _Connection, pool: _Pool,
                 timeouts: Timeouts, *, chunked: bool = False) -> None:
        """``chunked``: the body is chunked (``_chunked``); its data chunks
        are then read here, without h11's machinery per event, as long as
        they come as h11 would read them alike (``_deliver``)."""
        self.status_code: int = head.status_code
        self.reason: bytes = bytes(head.reason)
        self.headers: Headers = tuple((bytes(k), bytes(v)) for k, v in head.headers.raw_items())
        self.http_version: bytes = bytes(head.http_version)
        self._conn: _Connection | None = conn
        self._pool = pool
        self._timeouts = timeouts
        self._complete = False
        # The fast reading of a chunked body: from its start only (h11 holds
        # none of it), so h11 is at a chunk's start whenever it takes over.
        self._fast = chunked and not conn.h11.trailing_data[0]
        self._buf = b""  # bytes received that the fast path has not read,
        self._pos = 0  # from here
        self._left = 0  # bytes of the current chunk's data to come
        self._footer = 0  # bytes of the CRLF that ends it to come

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's frames as they arrive (``relay``'s). Raises
        httpx.ReadTimeout (nothing came for ``Timeouts.read`` s),
        httpx.ReadError, httpx.RemoteProtocolError (a body cut short, bad
        framing)."""
        frames: list[bytes] = []

        def take(frame: bytes) -> bool:
            frames.append(frame)
            return True

        more = True
        while more:
            more = await self.relay(take)
            for frame in frames:
                yield frame
            frames.clear()

    async def relay(self, on_frame: Callable[[bytes], bool]) -> bool:
        """Hand the body's frames (de-chunked, never decoded; one per part
        of a chunk, or of a body not chunked, at hand) to ``on_frame`` as
        they arrive: it is called in the
        event loop's callback for the bytes' arrival, nothing awaited in
        between, so it can write a frame on at once. ``on_frame`` returns
        True when its caller has something to await before the next frame
        (a client's full buffer, bytes to spool): this then returns True,
        and the frames after it wait (read, but not handed over) until this
        is called again. Returns False once the body has ended (all its
        frames handed over).

        One timer watches the origin's silence, re-armed when it expires
        (not per read): raises httpx.ReadTimeout once nothing came for
        ``Timeouts.read`` s; httpx.ReadError, httpx.RemoteProtocolError (a
        body cut short, bad framing), or what ``on_frame`` raised."""
        conn = self._conn
        if conn is None or self._complete:
            return False
        machine = conn.h11
        while True:
            delivered = self._deliver(machine, on_frame)
            if delivered is not None:
                return delivered
            reader = conn.reader
            if conn.unread() or reader.at_eof() or reader.exception() is not None:
                self._receive(machine, await conn.read(self._timeouts))
                continue
            outcome = await self._arrivals(conn, on_frame)
            if outcome is not None:
                return outcome

    def _receive(self, machine: h11.Connection, data: bytes) -> None:
        """Bytes from the origin (b"": the end of the stream)."""
        if not self._fast:
            machine.receive_data(data)
            return
        self._buf = self._buf[self._pos:] + data if self._pos < len(self._buf) else data
        self._pos = 0
        if not data:  # (what the end means, h11 says: at a chunk's start for it)
            self._hand_over(machine)
            machine.receive_data(b"")

    def _hand_over(self, machine: h11.Connection) -> None:
        """h11 reads the rest of the body, from a chunk's start."""
        self._fast = False
        rest, self._buf, self._pos = self._buf[self._pos:], b"", 0
        machine.receive_data(rest)

    def _deliver(self, machine: h11.Connection,
                 on_frame: Callable[[bytes], bool]) -> bool | None:
        """Hand over the frames at hand: True when ``on_frame`` asked to
        stop, False at the body's end, None when more bytes are needed.

        A chunked body's data chunks (size line, data, CRLF: RFC 9112 §7.1)
        are read here, each part of a chunk at hand one frame, as h11 gives
        them; from a line this does not take (the last chunk, an extension,
        anything malformed) h11 reads the rest. Raises
        httpx.RemoteProtocolError."""
        while self._fast:
            buf, pos = self._buf, self._pos
            if self._footer:
                end = min(len(buf), pos + self._footer)
                if buf[pos:end] != b"\r\n"[2 - self._footer:2 - self._footer + end - pos]:
                    raise httpx.RemoteProtocolError(
                        f"malformed chunk footer: {bytes(buf[pos:end])!r} (expected b'\\r\\n')")
                self._footer -= end - pos
                self._pos = pos = end
                if self._footer:
                    return None
            if self._left:
                if pos == len(buf):
                    return None
                end = min(len(buf), pos + self._left)
                frame = buf[pos:end]
                self._left -= end - pos
                self._pos = end
                if not self._left:
                    self._footer = 2
                if on_frame(frame):
                    return True
                continue
            line = _SIZE_LINE.match(buf, pos)
            if line is not None and (size := int(line[1], 16)):
                self._left = size
                self._pos = line.end()
                continue
            if line is None and len(buf) - pos < 17 and _SIZE_START.fullmatch(buf, pos):
                return None  # (the line's end is to come)
            self._hand_over(machine)
        while True:
            try:
                event = machine.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is h11.NEED_DATA:
                return None
            if type(event) is h11.Data:
                if on_frame(bytes(event.data)):
                    return True
            elif isinstance(event, h11.EndOfMessage):
                self._complete = True
                return False
            else:  # (h11 ends every body with EndOfMessage, or raises)
                raise httpx.RemoteProtocolError(
                    f"unexpected {type(event).__name__} in a body")

    async def _arrivals(self, conn: _Connection, on_frame: Callable[[bytes], bool],
                        ) -> bool | None:
        """Wait for the origin's bytes, each arrival read and its frames
        handed to ``on_frame`` by the protocol's sink, until ``on_frame``
        asks to stop (True) or the body ends (False), or the stream ends or
        breaks (None: the reader has the end or the error). Raises as
        ``relay``."""
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[bool | None] = loop.create_future()
        limit = self._timeouts.read
        last = loop.time()
        machine = conn.h11
        protocol = conn.protocol

        def stop(outcome: bool | None = None, error: BaseException | None = None) -> None:
            protocol.sink = protocol.poke = None
            if wake.done():
                return
            if error is not None:
                wake.set_exception(error)
            else:
                wake.set_result(outcome)

        def sink(data: bytes) -> None:
            nonlocal last
            try:
                self._receive(machine, data)
                delivered = self._deliver(machine, on_frame)
            except Exception as exc:  # raised by relay
                stop(error=exc)
                return
            finally:  # (after the frames' relay)
                last = loop.time()
                conn.received = True
            if delivered is not None:
                stop(delivered)

        timer: asyncio.TimerHandle

        def check() -> None:
            nonlocal timer
            if wake.done():
                return
            due = last + limit
            if loop.time() >= due:
                stop(error=httpx.ReadTimeout(f"the origin sent nothing for {limit:g} s"))
            else:  # bytes came meanwhile: watch from the last arrival
                timer = loop.call_at(due, check)

        timer = loop.call_at(last + limit, check)
        protocol.sink, protocol.poke = sink, stop
        try:
            return await wake
        finally:
            protocol.sink = protocol.poke = None
            timer.cancel()

    async def aclose(self) -> None:
        """Give the connection back to the pool when the response was read
        to its end and both sides may go on (h11: both DONE; no
        ``Connection: close``, not HTTP/1.0, not close-delimited); else
        close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        machine = conn.h11
        if (self._complete and machine.our_state is h11.DONE
                and machine.their_state is h11.DONE):
            machine.start_next_cycle()
            self._pool.release(conn)
        else:
            self._pool.discard(conn)


class _Pool:
    """Keep-alive connections by ``PoolKey``: at most ``MAX_CONNECTIONS``
    open, ``MAX_IDLE`` idle, each idle at most ``IDLE_EXPIRY`` s."""

    def __init__(self) -> None:
        self.idle: dict[PoolKey, list[_Connection]] = {}
        self.idle_count = 0
        self.open: set[_Connection] = set()
        self.reserved = 0  # connections being opened
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_idle(self, key: PoolKey) -> _Connection | None:
        """The most recently used idle connection for ``key`` that is still
        good; those expired or closed by the origin are closed on the way."""
        conns = self.idle.get(key)
        if not conns:
            return None
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            self.idle_count -= 1
            if now - conn.idle_since < IDLE_EXPIRY and conn.usable():
                conn.reused = True
                return conn
            self.discard(conn)
        return None

    async def acquire(self, key: PoolKey | None, timeouts: Timeouts) -> _Connection | None:
        """An idle connection for ``key`` (None: never one), else room for
        one more (None; then ``opened``), waiting while ``MAX_CONNECTIONS``
        are open and none idle. Raises httpx.PoolTimeout."""
        try:
            async with asyncio.timeout(timeouts.pool):
                while True:
                    if key is not None and (conn := self.take_idle(key)) is not None:
                        return conn
                    if len(self.open) + self.reserved < MAX_CONNECTIONS:
                        self.reserved += 1
                        return None
                    if self.idle_count:
                        self._evict_oldest()
                        continue
                    waiter = asyncio.get_running_loop().create_future()
                    self._waiters.append(waiter)
                    try:
                        await waiter
                    finally:
                        with contextlib.suppress(ValueError):
                            self._waiters.remove(waiter)
        except TimeoutError:
            raise httpx.PoolTimeout(f"no connection to an origin came free in "
                                    f"{timeouts.pool:g} s") from None

    def opened(self, conn: _Connection | None) -> None:
        """A reserved connection opened (``conn``) or failed to (None)."""
        self.reserved -= 1
        if conn is not None:
            self.open.add(conn)
        else:
            self._wake()

    def release(self, conn: _Connection) -> None:
        if conn.closed or not conn.usable():
            self.discard(conn)
            return
        conn.idle_since = time.monotonic()
        self.idle.setdefault(conn.key, []).append(conn)
        self.idle_count += 1
        if self.idle_count > MAX_IDLE:
            self._evict_oldest()
        self._wake()

    def discard(self, conn: _Connection) -> None:
        conn.close()
        self.open.discard(conn)
        self._wake()

    def _evict_oldest(self) -> None:
        key = min((k for k, conns in self.idle.items() if conns),
                  key=lambda k: self.idle[k][0].idle_since)
        conns = self.idle[key]
        conn = conns.pop(0)
        if not conns:
            del self.idle[key]
        self.idle_count -= 1
        self.discard(conn)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close_all(self) -> None:
        for conn in list(self.open):
            self.discard(conn)
        self.idle.clear()
        self.idle_count = 0


class UpstreamClient:
    """Sends requests to origins over one keep-alive pool: no redirects
    followed, no environment proxies, no cookie jar, no field added but
    ``Host`` and ``Content-Length``, the origin's certificate verified
    (``UpstreamOptions.verify``: the usual roots, or those plus
    ``--upstream-ca``), ALPN ``http/1.1``, the response streamed.

    A request on a connection taken from the pool that the origin had
    closed while it was idle (it ends, or is reset, before a byte of a
    response came) is sent once more on a new connection: an origin closes
    an idle connection between exchanges, so it did not act on a request
    that met that close (RFC 9112 §9.3.1, RFC 9110 §9.2.2). A new connection
    that closes before answering is not retried.
    """

    def __init__(self, options: UpstreamOptions | None = None,
                 timeouts: Timeouts | None = None) -> None:
        """Raises UsageError for a bad ``ca_file``."""
        verify = (options or UpstreamOptions()).verify()
        if verify is True:
            import certifi

            verify = ssl.create_default_context(cafile=certifi.where())
        assert isinstance(verify, ssl.SSLContext)  # (verification is never off)
        verify.set_alpn_protocols(["http/1.1"])
        self._tls = verify
        self._timeouts = timeouts
        self._pool = _Pool()

    async def warm_up(self) -> None:
        """Load now what the first connection would otherwise load on the
        event loop while an agent waits (the name resolver's worker thread
        and its libraries, the IDNA codec), so the first exchange costs what
        the next ones do."""
        with contextlib.suppress(OSError):
            await asyncio.get_running_loop().getaddrinfo("localhost", 80)

    async def send(self, request: OutgoingRequest) -> OriginResponse:
        """The origin's response, its body not read yet (``aiter_raw``, then
        ``aclose``); informational (1xx) responses are skipped. Raises
        httpx.TransportError: httpx.ConnectError, ConnectTimeout,
        WriteError, WriteTimeout, ReadError, ReadTimeout,
        RemoteProtocolError, PoolTimeout."""
        timeouts = self._timeouts or DEFAULT_TIMEOUT
        key = request.key
        conn = self._pool.take_idle(key) or await self._connect(key, timeouts, reuse=True)
        try:
            return await self._exchange(conn, request, timeouts)
        except _Stale:  # (only a reused connection is stale)
            pass  # the origin had closed it: once more, on a new connection
        return await self._exchange(await self._connect(key, timeouts), request, timeouts)

    async def open_stream(self, origin_root: str,
                          resolve: Mapping[str, tuple[str, int]] | None = None,
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection of its own to ``origin_root`` (``scheme://host[:port]``;
        not from the pool, never given back to it; the caller closes it),
        dialled and verified as forwarded requests are: ``resolve`` applied
        as in :func:`build_request`, the host IDNA-encoded (RFC 5891), TLS
        for https with the origin's certificate checked against that name,
        ALPN ``http/1.1`` (what a WebSocket upgrade goes over too, RFC 6455
        §4.1). Raises httpx.InvalidURL for a bad ``origin_root``,
        httpx.ConnectError (refused, no such host, a certificate that does
        not verify; the OSError as its cause), httpx.ConnectTimeout."""
        origin = _origin(origin_root)
        timeouts = self._timeouts or DEFAULT_TIMEOUT
        if resolve and origin.host in resolve:
            address, port = resolve[origin.host]
        else:
            address, port = origin.ascii_host, origin.port
        tls = self._tls if origin.scheme == "https" else None
        try:
            async with asyncio.timeout(timeouts.connect):
                return await asyncio.open_connection(
                    address, port, ssl=tls, server_hostname=origin.ascii_host if tls else None,
                    happy_eyeballs_delay=0.25, limit=READ_SIZE)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"cannot connect to {address}:{port} in "
                                       f"{timeouts.connect:g} s") from None
        except OSError as exc:  # (ssl.SSLError is one)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc

    async def _connect(self, key: PoolKey, timeouts: Timeouts, *,
                       reuse: bool = False) -> _Connection:
        """A new connection for ``key`` (with ``reuse``, an idle one that
        came free while waiting for room will do). Raises httpx.ConnectError
        (refused, no such host, a certificate that does not verify),
        ConnectTimeout, PoolTimeout."""
        idle = await self._pool.acquire(key if reuse else None, timeouts)
        if idle is not None:
            return idle
        scheme, address, port, server_name = key
        conn = None
        try:
            tls = self._tls if scheme == "https" else None
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader(limit=READ_SIZE, loop=loop)
            protocol = _Protocol(reader, loop=loop)
            async with asyncio.timeout(timeouts.connect):
                transport, _ = await loop.create_connection(
                    lambda: protocol, address, port, ssl=tls,
                    server_hostname=server_name if tls else None, happy_eyeballs_delay=0.25)
            conn = _Connection(key, reader, asyncio.StreamWriter(transport, protocol, reader, loop),
                               protocol)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"cannot connect to {address}:{port} in "
                                       f"{timeouts.connect:g} s") from None
        except OSError as exc:  # (ssl.SSLError is one)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        finally:
            self._pool.opened(conn)
        return conn

    async def _exchange(self, conn: _Connection, request: OutgoingRequest,
                        timeouts: Timeouts) -> OriginResponse:
        """Write ``request`` on ``conn`` and read up to the response's head.
        Raises _Stale for a reused connection the origin had closed, else
        httpx.TransportError; ``conn`` is given back (closed) on any error."""
        try:
            machine = conn.h11
            machine.send(_stub(request.method))
            machine.send(h11.EndOfMessage())
            conn.received = False
            writer = conn.writer
            try:
                if len(request.body) <= _JOIN_BODY:
                    writer.write(request.head + request.body)
                else:
                    writer.write(request.head)
                    writer.write(request.body)
                async with asyncio.timeout(timeouts.write):
                    await writer.drain()
            except TimeoutError:
                raise httpx.WriteTimeout(
                    f"the origin took nothing for {timeouts.write:g} s") from None
            except OSError as exc:
                if conn.reused:
                    raise _Stale from exc
                raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
            while True:
                try:
                    event = await conn.next_event(timeouts)
                except (httpx.RemoteProtocolError, httpx.ReadError):
                    if conn.reused and not conn.received:
                        raise _Stale from None
                    raise
                if isinstance(event, h11.Response):
                    return OriginResponse(event, conn, self._pool, timeouts,
                                          chunked=_chunked(request.method, event))
                if not isinstance(event, h11.InformationalResponse):
                    raise httpx.RemoteProtocolError(
                        f"unexpected {type(event).__name__} before a response")
        except BaseException:
            self._pool.discard(conn)
            raise

    async def aclose(self) -> None:
        """Close every connection, idle or in use, and wait (up to 1 s) for
        their sockets to be released."""
        writers = [conn.writer for conn in self._pool.open]
        self._pool.close_all()
        if writers:
            _done, pending = await asyncio.wait(
                [asyncio.ensure_future(_closed(w)) for w in writers], timeout=1.0)
            for task in pending:
                task.cancel()


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        await writer.wait_closed()


def new_client(options: UpstreamOptions | None = None) -> UpstreamClient:
    """A client for forwarding. Raises UsageError for a bad ``ca_file``."""
    return UpstreamClient(options)
