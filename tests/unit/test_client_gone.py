"""``Responder.client_gone``: what a handler waits for beside the origin's
answer, on real 127.0.0.1 sockets. HTTP/1.1: the client's EOF (a pipelined
request read meanwhile is kept and served next); HTTP/2: a reset stream,
the other streams served on."""

from __future__ import annotations

import asyncio
import contextlib

from test_proxy_http2 import H2Client

from support.inproc import in_loop, listening
from wiretape.model import Request
from wiretape.proxy.http1 import Handler, Responder
from wiretape.proxy.record import _unless_gone


class Watching:
    """Waits for the client to go on ``/wait`` (at most ``patience`` s, then
    answers ``waited``); answers other targets at once."""

    def __init__(self, patience: float = 30.0) -> None:
        self.patience = patience
        self.gone: list[str] = []
        self.watched = asyncio.Event()

    def handler_for(self, _conn_id: int) -> Handler:
        async def handle(conn: Responder, request: Request) -> None:
            if request.target == b"/wait":
                try:
                    async with asyncio.timeout(self.patience):
                        self.gone.append(await conn.client_gone())
                        self.watched.set()
                        await conn.abort()
                        return
                except TimeoutError:
                    body = b"waited"
            else:
                body = request.target
            await conn.answer(200, b"OK", ((b"Content-Length", str(len(body)).encode()),), body)
        return handle


@in_loop
async def test_http1_a_client_that_closes_is_gone() -> None:
    app = Watching()
    async with listening(app.handler_for) as (_, port):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # (the request is being answered)
        writer.close()
        await asyncio.wait_for(app.watched.wait(), 10)
    assert app.gone == ["the client closed the connection"]


@in_loop
async def test_http1_a_pipelined_request_read_while_watching_is_served_next() -> None:
    app = Watching(patience=0.5)
    async with listening(app.handler_for) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        got = b""
        async with asyncio.timeout(10):
            while got.count(b"HTTP/1.1 200") < 2 or not got.endswith(b"/next"):
                got += await reader.read(65536)
        writer.close()
    assert b"\r\n\r\nwaited" in got and got.endswith(b"\r\n\r\n/next"), got
    assert got.index(b"waited") < got.index(b"/next") and app.gone == []


@in_loop
async def test_http2_a_reset_stream_is_gone_and_the_others_are_served() -> None:
    app = Watching()
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port)
        waiting = await client.request(b"GET", b"/wait")
        await asyncio.sleep(0.2)
        client.h2.reset_stream(waiting)
        await client.flush()
        await asyncio.wait_for(app.watched.wait(), 10)
        other = await client.request(b"GET", b"/other")
        await client.read_until(lambda: client.replies[other].ended)
        with contextlib.suppress(Exception):
            await client.aclose()
    assert app.gone == ["the client reset the stream"]
    assert bytes(client.replies[other].body) == b"/other"


class LeaveWatching:
    """``Responder.on_leave``: the handler waits (in ``_unless_gone``, as
    the recorder waits for the origin) on a future that never completes,
    until the client leaves or its task is cancelled from elsewhere (as
    when wiretape stops)."""

    def __init__(self) -> None:
        self.results: list[object] = []
        self.done = asyncio.Event()
        self.handler_task: asyncio.Task[object] | None = None

    def handler_for(self, _conn_id: int) -> Handler:
        async def handle(conn: Responder, request: Request) -> None:
            never: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            self.handler_task = asyncio.current_task()  # type: ignore[assignment]
            try:
                self.results.append(await _unless_gone(conn, never))  # type: ignore[arg-type]
            except asyncio.CancelledError:
                self.results.append("cancelled")
                raise
            finally:
                self.done.set()
            await conn.abort()
        return handle


async def asking(port: int) -> asyncio.StreamWriter:
    """A client that has sent one request (its writer)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
    return writer


@in_loop
async def test_http1_on_leave_cancels_the_wait_for_the_origin_without_a_task() -> None:
    app = LeaveWatching()
    async with listening(app.handler_for) as (_, port):
        tasks_before = len(asyncio.all_tasks())
        writer = await asking(port)
        await writer.drain()
        await asyncio.sleep(0.2)
        # one task for the connection, none for watching it
        assert len(asyncio.all_tasks()) == tasks_before + 1
        writer.write_eof()  # a half-close is leaving too
        await asyncio.wait_for(app.done.wait(), 10)
        writer.close()
    assert app.results == [(None, "the client closed the connection")]


@in_loop
async def test_http1_a_client_gone_before_the_wait_is_seen_at_once() -> None:
    app = LeaveWatching()
    async with listening(app.handler_for) as (_, port):
        writer = await asking(port)
        writer.write_eof()
        await asyncio.wait_for(app.done.wait(), 10)
        writer.close()
    assert app.results == [(None, "the client closed the connection")]


@in_loop
async def test_a_cancellation_from_elsewhere_is_never_taken_for_the_client_leaving() -> None:
    app = LeaveWatching()
    async with listening(app.handler_for) as (_, port):
        writer = await asking(port)
        await writer.drain()
        async with asyncio.timeout(10):
            while app.handler_task is None:
                await asyncio.sleep(0.01)
        app.handler_task.cancel()
        writer.close()  # the client leaves as well, in the same turn of the loop
        await asyncio.wait_for(app.done.wait(), 10)
    assert app.results == ["cancelled"]


@in_loop
async def test_http2_on_leave_sees_a_reset_stream() -> None:
    app = LeaveWatching()
    async with listening(app.handler_for) as (_, port):
        client = await H2Client.open(port)
        waiting = await client.request(b"GET", b"/wait")
        await asyncio.sleep(0.2)
        client.h2.reset_stream(waiting)
        await client.flush()
        await asyncio.wait_for(app.done.wait(), 10)
        with contextlib.suppress(Exception):
            await client.aclose()
    assert app.results == [(None, "the client reset the stream")]
