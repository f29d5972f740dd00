"""HTTP/2 on the proxy's listening side (``proxy/http2.py``) in this
process, on a real 127.0.0.1 socket, with the h2 library as the client:
requests mapped from pseudo-header fields, connection-specific response
fields dropped, streams kept apart, flow control per stream (a stream the
client does not read does not hold up another), a protocol error answered
with GOAWAY and counted, a connection preface refused (and counted) where
HTTP/2 is not served, and a malformed CONNECT counted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from support.h2wire import goaway_codes, h2_frames
from support.inproc import RawClient, in_loop, listening
from wiretape.intercept.ca import RunCA
from wiretape.model import Request
from wiretape.proxy import http2
from wiretape.proxy.connect import ConnectProxy
from wiretape.proxy.http1 import (
    ClientConnection,
    ConnectionLimits,
    Handler,
    Responder,
    serve_connection,
)
from wiretape.proxy.server import Listeners

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@dataclass
class Reply:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    frames: list[bytes] = field(default_factory=list)
    ended: bool = False
    reset: int | None = None

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


class H2Client:
    """An HTTP/2 client connection (prior knowledge) driven by the h2
    library; ``read_all`` acknowledges received data unless the stream is
    in ``unread`` (its window then stays shut)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 stream_window: int | None = None) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding=None))
        if stream_window is not None:
            self.h2.local_settings = h2.settings.Settings(
                client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                                             stream_window})
        self.h2.initiate_connection()
        if stream_window is not None:
            self.h2.increment_flow_control_window(1 << 24)  # the connection's own window
        self.replies: dict[int, Reply] = {}
        self.unread: set[int] = set()
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = False

    @classmethod
    async def open(cls, port: int, stream_window: int | None = None) -> H2Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer, stream_window)
        await client.flush()
        return client

    async def flush(self) -> None:
        self.writer.write(self.h2.data_to_send())
        await self.writer.drain()

    async def request(self, method: bytes, path: bytes, body: bytes = b"",
                      headers: Sequence[tuple[bytes, bytes]] = ()) -> int:
        sid = self.h2.get_next_available_stream_id()
        fields = [(b":method", method), (b":scheme", b"http"), (b":authority", b"127.0.0.1:1"),
                  (b":path", path), *headers]
        self.h2.send_headers(sid, fields, end_stream=not body)
        if body:
            self.h2.send_data(sid, body, end_stream=True)
        self.replies[sid] = Reply()
        await self.flush()
        return sid

    async def read_until(self, done: object, timeout: float = 5.0) -> None:
        """Read and handle frames until ``done()`` is true."""
        async with asyncio.timeout(timeout):
            while not done():  # type: ignore[operator]
                data = await self.reader.read(65536)
                if not data:
                    self.closed = True
                    return
                for event in self.h2.receive_data(data):
                    self._handle(event)
                await self.flush()

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            self.replies[event.stream_id].headers = list(event.headers)
        elif isinstance(event, h2.events.DataReceived):
            reply = self.replies[event.stream_id]
            reply.body += event.data
            if event.data:  # (not the empty DATA frame that only carries END_STREAM)
                reply.frames.append(event.data)
            if event.stream_id not in self.unread:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.replies[event.stream_id].ended = True
        elif isinstance(event, h2.events.StreamReset):
            self.replies[event.stream_id].reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    def read(self, sid: int) -> None:
        """Open ``sid``'s window for what it already got, and from now on."""
        self.unread.discard(sid)
        reply = self.replies[sid]
        if reply.body:
            self.h2.increment_flow_control_window(len(reply.body), stream_id=sid)

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


@dataclass
class Answering:
    """A handler keeping each request and answering with ``headers`` and the
    body ``pieces`` (one ``send_data`` each)."""

    headers: tuple[tuple[bytes, bytes], ...] = ((b"Content-Type", b"text/plain"),)
    pieces: dict[bytes, list[bytes]] = field(default_factory=dict)
    seen: list[tuple[int, Request]] = field(default_factory=list)

    def handler_for(self, conn_id: int) -> Handler:
        async def handle(conn: Responder, request: Request) -> None:
            self.seen.append((conn_id, request))
            await conn.send_head(200, b"OK", self.headers)
            for piece in self.pieces.get(request.target, [request.method + b" " + request.target]):
                await conn.send_data(piece)
            await conn.end()

        return handle


@in_loop
async def test_a_stream_is_a_request_with_its_pseudo_headers_mapped() -> None:
    app = Answering(headers=(
        (b"Content-Type", b"text/event-stream"), (b"Connection", b"keep-alive"),
        (b"Keep-Alive", b"timeout=5"), (b"Transfer-Encoding", b"chunked"),
        (b"X-Request-ID", b"req_1")))
    async with listening(app.handler_for) as (listeners, port):
        client = await H2Client.open(port)
        sid = await client.request(b"POST", b"/v1/chat?x=1", b'{"n":1}', [
            (b"content-type", b"application/json"), (b"cookie", b"a=1"), (b"cookie", b"b=2")])
        await client.read_until(lambda: client.replies[sid].ended)
        await client.aclose()
    [(_, request)] = app.seen
    assert request == Request(b"POST", b"/v1/chat?x=1", (
        (b"host", b"127.0.0.1:1"), (b"content-type", b"application/json"),
        (b"cookie", b"a=1; b=2")), b'{"n":1}', http_version=b"2")
    reply = client.replies[sid]
    # RFC 9113 §8.2.2: no connection-specific fields in an HTTP/2 response
    assert reply.headers == [(b":status", b"200"), (b"content-type", b"text/event-stream"),
                             (b"x-request-id", b"req_1")]
    assert bytes(reply.body) == b"POST /v1/chat?x=1"
    assert listeners.refused == []


@in_loop
async def test_concurrent_streams_are_kept_apart_each_send_data_one_frame() -> None:
    app = Answering(pieces={f"/v1/s{i}".encode(): [b"%d-a" % i, b"%d-b" % i, b"%d-c" % i]
                            for i in range(8)})
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port)
        sids = [await client.request(b"POST", f"/v1/s{i}".encode(), b"{}") for i in range(8)]
        await client.read_until(lambda: all(client.replies[s].ended for s in sids))
        await client.aclose()
    assert len({conn_id for conn_id, _ in app.seen}) == 1
    for i, sid in enumerate(sids):
        assert client.replies[sid].frames == [b"%d-a" % i, b"%d-b" % i, b"%d-c" % i]


@in_loop
async def test_a_stream_the_client_does_not_read_does_not_hold_up_another() -> None:
    big, small = b"x" * 50_000, b"y" * 5_000
    app = Answering(pieces={b"/v1/big": [big], b"/v1/small": [small]})
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port, stream_window=1000)
        slow = await client.request(b"GET", b"/v1/big")
        client.unread.add(slow)
        fast = await client.request(b"GET", b"/v1/small")
        await client.read_until(lambda: client.replies[fast].ended)
        # the small one is whole while the big one waits at its window
        assert bytes(client.replies[fast].body) == small
        assert len(client.replies[slow].body) == 1000 and not client.replies[slow].ended
        client.read(slow)
        await client.flush()
        await client.read_until(lambda: client.replies[slow].ended)
        await client.aclose()
    assert bytes(client.replies[slow].body) == big


@in_loop
async def test_a_protocol_error_gets_goaway_and_one_line_and_others_are_served(
        caplog: pytest.LogCaptureFixture) -> None:
    app = Answering()
    with caplog.at_level(logging.WARNING, logger="wiretape.proxy"):
        async with listening(app.handler_for) as (listeners, port):
            async with await RawClient.open(port) as raw:
                # a DATA frame on stream 0 is a connection error (RFC 9113 §6.1)
                await raw.send(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                               + b"\x00\x00\x01\x00\x01\x00\x00\x00\x00" + b"z")
                wire = await asyncio.wait_for(raw.reader.read(), 5)
            client = await H2Client.open(port)
            sid = await client.request(b"GET", b"/v1/after")
            await client.read_until(lambda: client.replies[sid].ended)
            await client.aclose()
    assert goaway_codes(wire) == [0x1]  # PROTOCOL_ERROR
    lines = [r.getMessage() for r in caplog.records if "HTTP/2" in r.getMessage()]
    assert len(lines) == 1 and "protocol error" in lines[0] and "\n" not in lines[0], lines
    assert listeners.refused == [(400, "http2_protocol_error")]
    assert [r.target for _, r in app.seen] == [b"/v1/after"]


@in_loop
async def test_a_body_over_the_cap_gets_413_on_its_stream_and_is_counted() -> None:
    app = Answering()
    async with listening(app.handler_for, max_body=1000) as (listeners, port):
        client = await H2Client.open(port)
        big = await client.request(b"POST", b"/v1/big", b"x" * 1001)
        ok = await client.request(b"POST", b"/v1/ok", b"x" * 1000)
        await client.read_until(lambda: client.replies[big].ended and client.replies[ok].ended)
        await client.aclose()
    assert client.replies[big].header(b":status") == b"413"
    assert b"request_too_large" in client.replies[big].body
    assert client.replies[ok].header(b":status") == b"200"
    assert [r.target for _, r in app.seen] == [b"/v1/ok"]
    assert listeners.refused == [(413, "request_too_large")]


@in_loop
async def test_without_http2_the_preface_gets_goaway_and_is_counted_as_refused() -> None:
    refused: list[tuple[int, str]] = []

    async def handle(conn: Responder, request: Request) -> None:
        raise AssertionError("no request expected")

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ClientConnection(reader, writer, on_refused=lambda s, c: refused.append((s, c)))
        await serve_connection(conn, handle)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with await RawClient.open(port) as raw:
        await raw.send(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        wire = await asyncio.wait_for(raw.reader.read(), 5)
    server.close()
    await server.wait_closed()
    assert [kind for kind, _ in h2_frames(wire)] == [0x4, 0x7]  # SETTINGS, then GOAWAY
    assert goaway_codes(wire) == [0xD]  # HTTP_1_1_REQUIRED
    assert b"HTTP/1.1 only" in h2_frames(wire)[1][1]
    assert refused == [(505, "http2_not_supported")]


@in_loop
async def test_expect_100_continue_gets_its_interim_answer_before_the_body() -> None:
    app = Answering()
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port)
        sid = client.h2.get_next_available_stream_id()
        client.h2.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                     (b":authority", b"h"), (b":path", b"/v1/later"),
                                     (b"expect", b"100-continue")])
        client.replies[sid] = Reply()
        await client.flush()
        interim: list[h2.events.InformationalResponseReceived] = []
        handle = client._handle

        def keep(event: h2.events.Event) -> None:
            if isinstance(event, h2.events.InformationalResponseReceived):
                interim.append(event)
            handle(event)

        client._handle = keep  # type: ignore[method-assign]
        await client.read_until(lambda: interim)
        assert app.seen == []  # nothing handled before the body
        client.h2.send_data(sid, b"body", end_stream=True)
        await client.flush()
        await client.read_until(lambda: client.replies[sid].ended)
        await client.aclose()
    assert interim[0].headers == [(b":status", b"100")]
    assert [r.body for _, r in app.seen] == [b"body"]


@in_loop
async def test_a_stalled_body_gets_408_a_reset_one_is_forgotten_the_rest_served() -> None:
    app = Answering()
    listeners = Listeners(limits=ConnectionLimits(body_timeout=0.3))
    port = await listeners.listen(0, app.handler_for)
    try:
        client = await H2Client.open(port)
        fields = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"h")]
        stalled = client.h2.get_next_available_stream_id()
        client.h2.send_headers(stalled, [*fields, (b":path", b"/v1/stalled")])
        client.h2.send_data(stalled, b"half")
        client.replies[stalled] = Reply()
        dropped = client.h2.get_next_available_stream_id()
        client.h2.send_headers(dropped, [*fields, (b":path", b"/v1/dropped")])
        client.h2.reset_stream(dropped)
        await client.flush()
        await client.read_until(lambda: client.replies[stalled].ended)
        served = await client.request(b"GET", b"/v1/after")
        await client.read_until(lambda: client.replies[served].ended)
        await client.aclose()
    finally:
        await listeners.close(grace=1.0)
    assert client.replies[stalled].header(b":status") == b"408"
    assert b"request_timeout" in client.replies[stalled].body
    assert client.replies[served].header(b":status") == b"200"
    assert [r.target for _, r in app.seen] == [b"/v1/after"]
    assert listeners.refused == [(408, "request_timeout")]
    assert listeners.faults["body_timeout"] == 1


@in_loop
async def test_stopping_lets_the_streams_under_way_finish_then_says_goaway() -> None:
    release = asyncio.Event()
    seen: list[bytes] = []

    def handler_for(conn_id: int) -> Handler:
        async def handle(conn: Responder, request: Request) -> None:
            seen.append(request.target)
            await conn.send_head(200, b"OK", ())
            await conn.send_data(b"first")
            await release.wait()
            await conn.send_data(b"last")
            await conn.end()

        return handle

    listeners = Listeners()
    port = await listeners.listen(0, handler_for)
    client = await H2Client.open(port)
    sid = await client.request(b"GET", b"/v1/slow")
    await client.read_until(lambda: client.replies[sid].body)
    closing = asyncio.create_task(listeners.close(grace=5.0))
    await asyncio.sleep(0.1)
    release.set()
    await client.read_until(lambda: client.closed)
    await closing
    await client.aclose()
    assert bytes(client.replies[sid].body) == b"firstlast" and client.replies[sid].ended
    assert client.goaway is not None and client.goaway.error_code == 0  # NO_ERROR


@in_loop
async def test_a_malformed_connect_is_counted_as_refused() -> None:
    async def never(conn: Responder, request: Request) -> None:
        raise AssertionError("no request expected")

    with RunCA.create() as ca:
        listeners = Listeners()
        connect = ConnectProxy(ca, {}, lambda *_: never, tunnel=True,
                               next_connection_id=listeners.next_connection_id, max_body=1000)
        port = await listeners.listen(0, lambda _id: never, connect=connect)
        try:
            async with await RawClient.open(port) as raw:
                await raw.send(b"CONNECT no-port-here HTTP/1.1\r\nHost: x\r\n\r\n")
                reply = await raw.response()
        finally:
            await listeners.close(grace=0.5)
    assert reply.status == 400 and b"malformed_connect" in reply.body
    assert listeners.refused == [(400, "malformed_connect")]


@in_loop
async def test_a_header_block_as_large_as_an_http1_head_may_be_is_served() -> None:
    app = Answering()
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port)
        await client.read_until(lambda: client.h2.remote_settings.max_header_list_size)
        announced = client.h2.remote_settings.max_header_list_size
        # (hpack's Huffman coding of 200 kB takes seconds in Python: send it raw)
        encode = client.h2.encoder.encode
        client.h2.encoder.encode = lambda headers, huffman=True: encode(headers, huffman=False)
        sid = await client.request(b"GET", b"/v1/big-head", headers=[(b"x-big", b"v" * 200_000)])
        await client.read_until(lambda: client.replies[sid].ended)
        await client.aclose()
    assert announced == 256 * 1024
    assert client.replies[sid].header(b":status") == b"200"
    assert dict(app.seen[0][1].headers)[b"x-big"] == b"v" * 200_000


async def upload(client: H2Client, sid: int, body: bytes, *, stop_when_answered: bool) -> int:
    """Send ``body`` on ``sid`` as its window allows, reading (and
    acknowledging) what comes back meanwhile, until the body is sent, the
    stream is reset, or (``stop_when_answered``) its answer is whole: then
    the upload is ended short with an empty END_STREAM, as curl does.
    Returns the bytes sent."""
    sent = 0
    while sent < len(body):
        reply = client.replies[sid]
        if reply.reset is not None:
            return sent
        if stop_when_answered and reply.ended:
            client.h2.end_stream(sid)
            await client.flush()
            return sent
        room = min(client.h2.local_flow_control_window(sid), client.h2.max_outbound_frame_size,
                   len(body) - sent)
        if room:
            client.h2.send_data(sid, body[sent:sent + room], end_stream=sent + room == len(body))
            sent += room
            await client.flush()
            continue
        data = await asyncio.wait_for(client.reader.read(65536), 5)
        assert data, "the proxy closed the connection during the upload"
        for event in client.h2.receive_data(data):
            client._handle(event)
        await client.flush()
    return sent


async def open_upload(client: H2Client, size: int) -> int:
    sid = client.h2.get_next_available_stream_id()
    client.h2.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"),
                                 (b":authority", b"h"), (b":path", b"/v1/big"),
                                 (b"content-length", b"%d" % size)])
    client.replies[sid] = Reply()
    await client.flush()
    return sid


@in_loop
async def test_over_the_cap_mid_upload_the_413_comes_whole_then_a_clean_reset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # what is thrown away past the refusal is bounded: then RST_STREAM(NO_ERROR)
    monkeypatch.setattr(http2, "DISCARD_AT_LEAST", 200_000)
    app = Answering()
    async with listening(app.handler_for, max_body=100_000) as (listeners, port):
        client = await H2Client.open(port)
        big = await open_upload(client, 3_000_000)
        sent = await upload(client, big, b"x" * 3_000_000, stop_when_answered=False)
        await client.read_until(lambda: client.replies[big].reset is not None)
        ok = await client.request(b"POST", b"/v1/ok", b"{}")
        await client.read_until(lambda: client.replies[ok].ended)
        await client.aclose()
    reply = client.replies[big]
    assert reply.header(b":status") == b"413" and reply.ended  # the answer whole first
    assert b"request_too_large" in reply.body
    assert reply.reset == 0  # NO_ERROR: stop sending, no fault (RFC 9113 §8.1)
    # the upload went on past the refusal (thrown away, its window kept
    # open) up to the bound, then the reset stopped it
    assert 300_000 < sent < 3_000_000
    assert client.goaway is None
    assert client.replies[ok].header(b":status") == b"200"
    assert [r.target for _, r in app.seen] == [b"/v1/ok"]
    assert listeners.refused == [(413, "request_too_large")]


@in_loop
async def test_over_the_cap_a_client_sending_on_gets_its_window_and_no_reset() -> None:
    app = Answering()
    async with listening(app.handler_for, max_body=100_000) as (listeners, port):
        client = await H2Client.open(port)
        big = await open_upload(client, 1_000_000)
        # a client that reads the answer only once its upload is done (httpx)
        sent = await upload(client, big, b"x" * 1_000_000, stop_when_answered=False)
        await client.read_until(lambda: client.replies[big].ended)
        ok = await client.request(b"POST", b"/v1/ok", b"{}")
        await client.read_until(lambda: client.replies[ok].ended)
        await client.aclose()
    assert sent == 1_000_000
    assert client.replies[big].header(b":status") == b"413"
    assert client.replies[big].reset is None
    assert client.replies[ok].header(b":status") == b"200"
    assert listeners.refused == [(413, "request_too_large")]


@in_loop
async def test_over_the_cap_a_client_ending_its_upload_short_keeps_its_connection() -> None:
    app = Answering()
    async with listening(app.handler_for, max_body=100_000) as (listeners, port):
        client = await H2Client.open(port)
        big = await open_upload(client, 3_000_000)
        # curl: once answered, it ends the stream short of its content-length
        sent = await upload(client, big, b"x" * 3_000_000, stop_when_answered=True)
        ok = await client.request(b"POST", b"/v1/ok", b"{}")
        await client.read_until(lambda: client.replies[ok].ended)
        await client.aclose()
    assert sent < 3_000_000
    assert client.replies[big].header(b":status") == b"413"
    assert client.replies[big].reset is None  # the client ended it: nothing to reset
    assert client.goaway is None  # a body short of its content-length costs no connection
    assert client.replies[ok].header(b":status") == b"200"
    assert listeners.refused == [(413, "request_too_large")]
