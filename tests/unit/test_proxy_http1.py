"""The proxy's listening side (``proxy/http1.py``, ``proxy/server.py``) in
this process, on a real 127.0.0.1 socket, with a handler that answers from
the test: keep-alive and pipelining, request bodies (chunked, capped,
100-continue), refused and malformed input, response framing, a client
that goes away, and closing the listeners."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from support.inproc import RawClient, in_loop, listening, request_bytes, settled
from wiretape.model import Headers, Request
from wiretape.proxy.http1 import ClientConnection, ClientGone, Handler


@dataclass
class Answering:
    """A handler that keeps each request it gets (with its connection id)
    and answers with ``status``, ``headers`` and the body ``pieces`` (one
    ``send_data`` each); ``body`` computes the pieces from the request."""

    headers: Headers = ((b"X-Request-ID", b"req_1"), (b"content-type", b"text/plain"))
    status: int = 200
    reason: bytes = b"OK"
    body: Callable[[Request], Sequence[bytes]] = lambda r: [r.method + b" " + r.target]
    length: bool = True  # add a Content-Length for the pieces
    seen: list[tuple[int, Request]] = field(default_factory=list)

    def handler_for(self, conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            self.seen.append((conn_id, request))
            pieces = self.body(request)
            headers = self.headers
            if self.length:
                headers += ((b"Content-Length", str(sum(map(len, pieces))).encode()),)
            await conn.send_head(self.status, self.reason, headers)
            if request.method != b"HEAD":
                for piece in pieces:
                    await conn.send_data(piece)
            await conn.end()

        return handle


HEAD_OK = b"HTTP/1.1 200 OK\r\nX-Request-ID: req_1\r\ncontent-type: text/plain\r\n"


@in_loop
async def test_keep_alive_and_pipelined_requests_on_one_connection() -> None:
    app = Answering()
    async with listening(app.handler_for) as (_, port), await RawClient.open(port) as client:
        await client.send(request_bytes("POST", "/v1/a", b'{"n":1}', [("X-Mixed-Case", "A")]))
        first = await client.response()
        await client.send(request_bytes("GET", "/v1/b?x=1"))
        second = await client.response(b"GET")
        # two requests in one write: answered in order
        await client.send(request_bytes("POST", "/v1/c", b"c")
                          + request_bytes("POST", "/v1/d", b"d"))
        third, fourth = await client.response(), await client.response()
    assert first.head == HEAD_OK + b"Content-Length: 10\r\n\r\n"
    assert [r.body for r in (first, second, third, fourth)] == [
        b"POST /v1/a", b"GET /v1/b?x=1", b"POST /v1/c", b"POST /v1/d"]
    assert {conn_id for conn_id, _ in app.seen} == {1}
    request = app.seen[0][1]
    assert request == Request(b"POST", b"/v1/a", (
        (b"Host", b"127.0.0.1"), (b"X-Mixed-Case", b"A"), (b"Content-Length", b"7")), b'{"n":1}')
    assert [r.body for _, r in app.seen] == [b'{"n":1}', b"", b"c", b"d"]


@in_loop
async def test_chunked_request_body_arriving_in_pieces_is_read_whole() -> None:
    app = Answering()
    async with listening(app.handler_for) as (_, port), await RawClient.open(port) as client:
        await client.send(b"POST /v1/chunked HTTP/1.1\r\nHost: h\r\n"
                          b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b'5;ext=1\r\n{"a":\r\n', b"3\r\n", b"12}\r\n", b"0\r\n\r\n"):
            await asyncio.sleep(0.01)  # each piece in its own segment
            await client.send(piece)
        reply = await client.response()
    assert reply.status == 200
    [(_, request)] = app.seen
    assert request.body == b'{"a":12}'
    assert request.headers == ((b"Host", b"h"), (b"Content-Type", b"application/json"),
                               (b"Transfer-Encoding", b"chunked"))


@pytest.mark.parametrize("too_large", [
    request_bytes("POST", "/v1/big", b"x" * 1001),  # declared
    b"POST /v1/big HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"  # grows
    + b"".join(b"190\r\n" + b"y" * 400 + b"\r\n" for _ in range(3)) + b"0\r\n\r\n",
], ids=["declared", "chunked"])
@in_loop
async def test_a_body_over_the_cap_gets_413_and_one_at_the_cap_is_served(too_large: bytes) -> None:
    app = Answering()
    async with listening(app.handler_for, max_body=1000) as (listeners, port):
        async with await RawClient.open(port) as client:
            await client.send(too_large)
            refused = await client.response()
            assert await client.ended()
        async with await RawClient.open(port) as client:
            await client.send(request_bytes("POST", "/v1/small", b"z" * 1000))
            served = await client.response()
    assert (refused.status, refused.reason) == (413, b"Content Too Large")
    assert refused.header("x-should-retry") == b"false"
    assert refused.header("connection") == b"close"
    error = refused.json()["error"]
    assert error["code"] == "request_too_large" and "1000 bytes" in error["message"]
    assert served.status == 200
    assert [r.target for _, r in app.seen] == [b"/v1/small"]
    assert listeners.refused == [(413, "request_too_large")]


@in_loop
async def test_a_large_body_over_the_cap_still_gets_its_413() -> None:
    """The client is still sending a body much larger than the cap when the
    413 goes out: it must read the answer, not a connection reset."""
    app = Answering()
    body = b"x" * (4 << 20)
    async with (listening(app.handler_for, max_body=1000) as (_, port),
                await RawClient.open(port) as client):
        sending = asyncio.create_task(client.send(request_bytes("POST", "/v1/huge", body)))
        try:
            refused = await client.response()
        finally:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
    assert refused.status == 413
    assert refused.json()["error"]["code"] == "request_too_large"
    assert app.seen == []


@pytest.mark.parametrize("garbage", [
    b"THIS IS NOT HTTP AT ALL\r\n\r\n",
    b"GET /v1/x\r\n\r\n",  # no version
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nno colon in this header\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: twelve\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
], ids=["not-http", "no-version", "no-colon", "bad-length", "bad-chunk"])
@in_loop
async def test_malformed_request_gets_400_without_a_traceback(garbage: bytes) -> None:
    app = Answering()
    async with listening(app.handler_for) as (listeners, port):
        async with await RawClient.open(port) as bad:
            await bad.send(garbage)
            reply = await bad.response()
            assert await bad.ended()
        async with await RawClient.open(port) as good:  # the proxy serves on
            await good.send(request_bytes("POST", "/v1/after", b"{}"))
            after = await good.response()
    assert (reply.status, reply.reason) == (400, b"Bad Request")
    assert reply.header("x-should-retry") == b"false"
    assert reply.header("content-type") == b"application/json"
    error = reply.json()["error"]
    assert error["code"] == "malformed_request" and error["message"].startswith("wiretape: ")
    assert after.status == 200
    assert [r.target for _, r in app.seen] == [b"/v1/after"]
    assert listeners.refused == [(400, "malformed_request")]


@pytest.mark.parametrize("hang_up", ["close", "reset"])
@in_loop
async def test_a_client_leaving_inside_its_request_body_is_not_served(hang_up: str) -> None:
    app = Answering()
    async with listening(app.handler_for) as (listeners, port):
        client = await RawClient.open(port)
        await client.send(b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n"
                          b"0123456789")
        await asyncio.sleep(0.02)
        if hang_up == "reset":
            client.writer.transport.abort()
        else:
            await client.aclose()
        assert await settled(listeners)
    assert app.seen == []


@pytest.mark.parametrize(("raw", "status", "code"), [
    (b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n",
     405, "connect_not_supported"),
    (request_bytes("GET", "/v1/realtime", headers=[
        ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]),
     400, "malformed_websocket_handshake"),
    (request_bytes("GET", "/v1/realtime", headers=[
        ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "8"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]), 400, "malformed_websocket_handshake"),
], ids=["connect", "websocket-without-key", "websocket-version-8"])
@in_loop
async def test_connect_and_malformed_websocket_handshakes_are_refused(raw: bytes, status: int,
                                                                     code: str) -> None:
    app = Answering()
    async with listening(app.handler_for) as (listeners, port), await RawClient.open(port) as c:
        await c.send(raw)
        reply = await c.response(raw.split(b" ", 1)[0])
        assert await c.ended()
    assert reply.status == status
    assert reply.header("x-should-retry") == b"false"
    assert reply.json()["error"]["code"] == code
    assert app.seen == []
    assert listeners.refused == [(status, code)]


@in_loop
async def test_expect_100_continue_is_answered_before_the_body() -> None:
    app = Answering()
    body = b'{"expect": "continue"}'
    async with listening(app.handler_for) as (_, port), await RawClient.open(port) as client:
        await client.send(b"POST /v1/expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body))
        interim = await client.response()
        assert app.seen == []
        await client.send(body)
        final = await client.response()
    assert interim.status == 100 and interim.headers == []
    assert final.status == 200
    assert app.seen[0][1].body == body


@pytest.mark.parametrize("raw", [
    request_bytes("GET", "/v1/x", headers=[("Connection", "close")]),
    b"GET /v1/x HTTP/1.0\r\nHost: a\r\n\r\n",
], ids=["connection-close", "http-1.0"])
@in_loop
async def test_a_client_that_will_not_keep_alive_gets_connection_close(raw: bytes) -> None:
    app = Answering()
    async with listening(app.handler_for) as (_, port), await RawClient.open(port) as client:
        await client.send(raw)
        reply = await client.response(b"GET")
        assert await client.ended()
    assert reply.head == HEAD_OK + b"Content-Length: 9\r\nConnection: close\r\n\r\n"
    assert reply.body == b"GET /v1/x"


@in_loop
async def test_response_framing_chunked_close_delimited_and_head() -> None:
    chunked = Answering(headers=((b"Content-Type", b"text/event-stream"),
                                 (b"Transfer-Encoding", b"chunked"), (b"X-After", b"1")),
                        body=lambda r: [b"a", b"bb", b"ccc"], length=False)
    async with listening(chunked.handler_for) as (_, port), await RawClient.open(port) as c:
        await c.send(request_bytes("POST", "/v1/stream", b"{}"))
        reply = await c.response()
        await c.send(request_bytes("POST", "/v1/stream", b"{}"))  # still open
        again = await c.response()
    assert reply.head == (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                          b"Transfer-Encoding: chunked\r\nX-After: 1\r\n\r\n")
    assert reply.chunks == again.chunks == [b"a", b"bb", b"ccc"]

    unframed = Answering(length=False, body=lambda r: [b"until ", b"the end"])
    async with listening(unframed.handler_for) as (_, port), await RawClient.open(port) as c:
        await c.send(request_bytes("POST", "/v1/x", b"{}"))
        reply = await c.response()
    assert reply.head == HEAD_OK + b"Connection: close\r\n\r\n"
    assert (reply.body, reply.complete) == (b"until the end", True)

    head = Answering()
    async with listening(head.handler_for) as (_, port), await RawClient.open(port) as c:
        await c.send(request_bytes("HEAD", "/v1/models"))
        reply = await c.response(b"HEAD")
        await c.send(request_bytes("GET", "/v1/models"))  # no body bytes were left behind
        after = await c.response(b"GET")
    assert reply.head == HEAD_OK + b"Content-Length: 15\r\n\r\n"
    assert after.body == b"GET /v1/models"


@in_loop
async def test_a_client_leaving_mid_response_raises_client_gone_in_the_handler() -> None:
    outcome: list[str] = []
    sent = 0

    def handler_for(conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            nonlocal sent
            await conn.send_head(200, b"OK", ((b"Transfer-Encoding", b"chunked"),))
            try:
                while sent < 500:
                    await conn.send_data(b"data: %d\n\n" % sent)
                    sent += 1
                    await asyncio.sleep(0.005)
            except ClientGone:
                outcome.append("client gone")
                raise
            outcome.append("sent all")

        return handle

    async with listening(handler_for) as (listeners, port):
        client = await RawClient.open(port)
        await client.send(request_bytes("POST", "/v1/stream", b"{}"))
        await client.reader.readuntil(b"data: 0\n\n")
        await client.aclose()
        assert await settled(listeners)
    assert outcome == ["client gone"]
    assert sent < 100


def slow_handler(release: asyncio.Event) -> Callable[[int], Handler]:
    """Answers ``/v1/slow`` once ``release`` is set, anything else at once."""

    def handler_for(conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            if request.target == b"/v1/slow":
                await release.wait()
            await conn.send_head(200, b"OK", ((b"Content-Length", b"2"),))
            await conn.send_data(b"ok")
            await conn.end()

        return handle

    return handler_for


@in_loop
async def test_close_hangs_up_idle_connections_at_once_and_lets_busy_ones_finish() -> None:
    release = asyncio.Event()
    async with listening(slow_handler(release)) as (listeners, port):
        idle = await RawClient.open(port)
        await idle.send(request_bytes("GET", "/v1/fast"))
        assert (await idle.response(b"GET")).body == b"ok"
        busy = await RawClient.open(port)
        await busy.send(request_bytes("GET", "/v1/slow"))
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(listeners.close(grace=5.0))
        assert await idle.ended(1.0)
        assert not closing.done()  # the busy connection is given its grace
        release.set()
        slow = await busy.response(b"GET")
        await busy.aclose()
        await asyncio.wait_for(closing, 1.0)
        await idle.aclose()
    assert slow.body == b"ok"


@in_loop
async def test_close_lets_a_connection_go_once_its_answer_is_done() -> None:
    release = asyncio.Event()
    async with (listening(slow_handler(release)) as (listeners, port),
                await RawClient.open(port) as busy):  # a pooled SDK connection
        await busy.send(request_bytes("GET", "/v1/slow"))
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(listeners.close(grace=0.6))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        release.set()
        assert (await busy.response(b"GET")).body == b"ok"
        assert await busy.ended(0.6)
        await closing
        elapsed = time.monotonic() - t0
    assert elapsed < 0.3, f"closing took {elapsed:.2f} s after the last answer"
