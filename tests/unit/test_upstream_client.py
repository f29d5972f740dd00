"""The upstream client (``wiretape.proxy.upstream``) against scripted origins
on real 127.0.0.1 sockets: the head it writes, keep-alive reuse, a stale
pooled connection retried, response framing (close-delimited, chunked
frames raw, HEAD, 1xx skipped), TLS verified against a local CA, and each
failure raised as the httpx exception the recorder catches.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from support.inproc import in_loop
from wiretape.intercept.ca import RunCA
from wiretape.model import Request
from wiretape.origins import UpstreamOptions
from wiretape.proxy import upstream
from wiretape.proxy.upstream import OriginResponse, Timeouts, UpstreamClient, build_request

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
JSON = ((b"Content-Type", b"application/json"),)


class Origin:
    """An origin on 127.0.0.1 running ``serve(reader, writer, n)`` for its
    n-th connection (from 0); ``heads`` are the request heads it read."""

    def __init__(self, serve: Serve) -> None:
        self._serve = serve
        self.connections = 0
        self.heads: list[bytes] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def head(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        return head

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n, self.connections = self.connections, self.connections + 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.append(task)
        # (cancelled when the test ends: a handler task must not end cancelled)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError,
                                 asyncio.CancelledError):
            await self._serve(reader, writer, n)
        writer.close()

    @contextlib.asynccontextmanager
    async def running(self, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=ssl_context)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks)


def post(body: bytes = b"{}", target: bytes = b"/v1/chat", *,
         headers: tuple[tuple[bytes, bytes], ...] = JSON, method: bytes = b"POST") -> Request:
    return Request(method, target, headers, body)


async def fetch(client: UpstreamClient, port: int, request: Request, *,
                scheme: str = "http", host: str = "127.0.0.1",
                resolve: dict[str, tuple[str, int]] | None = None,
                ) -> tuple[OriginResponse, list[bytes]]:
    """Send, read the body's frames, close."""
    root = f"{scheme}://{host}:{port}"
    response = await client.send(build_request(root, f"{host}:{port}", request, resolve))
    try:
        frames = [frame async for frame in response.aiter_raw()]
    finally:
        await response.aclose()
    return response, frames


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     origin: Origin, body: bytes = b'{"ok":true}') -> None:
    while True:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                     b"Content-Length: %d\r\nX-Case: Kept\r\n\r\n%s" % (len(body), body))
        await writer.drain()


@in_loop
async def test_the_head_is_written_as_given_and_one_connection_is_reused() -> None:
    origin = Origin(lambda r, w, n: keep_alive(r, w, origin))
    client = UpstreamClient()
    request = post(b'{"a":1}', b"/v1/chat?x=1", headers=(
        (b"content-type", b"application/json"), (b"HOST", b"localhost:1"),
        (b"Content-Length", b"999"), (b"X-Mixed-Case", b"v"), (b"Connection", b"X-Hop"),
        (b"X-Hop", b"1"), (b"Expect", b"100-continue")))
    async with origin.running() as port:
        first, frames = await fetch(client, port, request)
        second, again = await fetch(client, port, post(
            b"[]", headers=((b"Transfer-Encoding", b"chunked"), (b"Accept", b"*/*"))))
        await client.aclose()
    assert origin.connections == 1  # kept alive, reused
    assert origin.heads == [
        b"POST /v1/chat?x=1 HTTP/1.1\r\nHOST: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"Content-Length: 7\r\nX-Mixed-Case: v\r\n\r\n" % port,
        # no Host given: it comes first; a body that came chunked gets its length, last
        b"POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: */*\r\n"
        b"Content-Length: 2\r\n\r\n" % port]
    for response, got in ((first, frames), (second, again)):
        assert (response.status_code, response.reason, response.http_version) == (
            200, b"OK", b"1.1")
        assert response.headers == ((b"content-type", b"application/json"),
                                    (b"Content-Length", b"11"), (b"X-Case", b"Kept"))
        assert got == [b'{"ok":true}']


@in_loop
async def test_a_redirect_is_returned_as_is_and_no_environment_proxy_is_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: nothing there

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response, frames = await fetch(client, port, post())
        await client.aclose()
    assert (response.status_code, response.headers, frames) == (
        302, ((b"Location", b"/elsewhere"), (b"Content-Length", b"0")), [])
    assert len(origin.heads) == 1  # not followed


@in_loop
async def test_an_empty_post_says_its_length_and_a_get_says_none() -> None:
    origin = Origin(lambda r, w, n: keep_alive(r, w, origin))
    client = UpstreamClient()
    async with origin.running() as port:
        await fetch(client, port, post(b"", headers=((b"Accept", b"*/*"),)))
        await fetch(client, port, post(b"", b"/v1/models", headers=(), method=b"GET"))
        await client.aclose()
    assert origin.heads == [
        b"POST /v1/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 0\r\n"
        b"Accept: */*\r\n\r\n" % port,
        b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port]


@in_loop
async def test_a_connection_the_origin_closed_while_idle_is_retried_on_a_new_one() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        if n == 0:
            # reads the next request, then closes without a word: the
            # client cannot tell this from a close while idle
            await reader.readuntil(b"\r\n\r\n")
            return
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        statuses = [(await fetch(client, port, post()))[0].status_code for _ in range(3)]
        await client.aclose()
    assert statuses == [200, 200, 200]
    assert origin.connections == 2  # the second request, once more on a new connection
    assert len(origin.heads) == 3


@in_loop
async def test_a_connection_seen_closed_while_idle_is_replaced() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()  # and closes: the client sees the end while idle

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        await fetch(client, port, post())
        await asyncio.sleep(0.1)
        response, frames = await fetch(client, port, post())
        await client.aclose()
    assert (response.status_code, frames, origin.connections) == (200, [b"ok"], 2)


@in_loop
async def test_bytes_after_a_response_end_its_connection() -> None:
    # a body longer than its Content-Length, and a response nobody asked
    # for arriving while idle: neither is taken for the next request's answer
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 2:
            await keep_alive(reader, writer, origin, b"mine")
        await origin.head(reader)
        if n == 0:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
        await keep_alive(reader, writer, origin, b"reused")

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        bodies = [(await fetch(client, port, post()))[1] for _ in range(2)]
        await asyncio.sleep(0.5)  # (the stray response is there by then)
        bodies.append((await fetch(client, port, post()))[1])
        await client.aclose()
    assert bodies == [[b"ok"], [b"ok"], [b"mine"]]
    assert origin.connections == 3


@in_loop
async def test_a_new_connection_closed_without_an_answer_is_not_retried() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await fetch(client, port, post())
        await client.aclose()
    assert origin.connections == 1


@in_loop
async def test_a_close_delimited_body_ends_with_the_connection() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"second")
        await writer.drain()

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        responses = [await fetch(client, port, post()) for _ in range(2)]
        await client.aclose()
    assert [b"".join(frames) for _, frames in responses] == [b"first second"] * 2
    assert origin.connections == 2  # never given back to the pool


@in_loop
async def test_chunks_come_one_frame_each_de_chunked_and_not_decoded() -> None:
    gzipped = bytes.fromhex("1f8b08000000000000ff4b4c4a06000e7aa0410300000000")  # not unzipped

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for part in (gzipped[:10], gzipped[10:]):
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
            await asyncio.sleep(0.05)
        writer.write(b"0\r\n\r\n")
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response, frames = await fetch(client, port, post())
        await fetch(client, port, post())
        await client.aclose()
    assert frames == [gzipped[:10], gzipped[10:]]
    assert response.headers == ((b"Content-Encoding", b"gzip"), (b"Transfer-Encoding", b"chunked"))
    assert origin.connections == 1  # the terminating chunk read: kept alive


@in_loop
async def test_informational_responses_are_skipped_and_head_204_304_have_no_body() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                     b"HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nnew")
        await origin.head(reader)  # a HEAD: a length, and no body after it
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")
        for status in (b"204 No Content", b"304 Not Modified"):  # never a body
            await origin.head(reader)
            writer.write(b"HTTP/1.1 %s\r\nX-N: 1\r\n\r\n" % status)
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        created, body = await fetch(client, port, post())
        head, none = await fetch(client, port, post(b"", headers=(), method=b"HEAD"))
        empty = [await fetch(client, port, post(method=m)) for m in (b"DELETE", b"GET")]
        after, ok = await fetch(client, port, post())
        await client.aclose()
    assert (created.status_code, created.reason, body) == (201, b"Created", [b"new"])
    assert (head.status_code, head.headers, none) == (200, ((b"Content-Length", b"50"),), [])
    assert [(r.status_code, f) for r, f in empty] == [(204, []), (304, [])]
    assert (after.status_code, ok, origin.connections) == (200, [b'{"ok":true}'], 1)


@in_loop
async def test_a_body_cut_short_is_a_remote_protocol_error_and_the_connection_is_dropped() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n > 0:
            await keep_alive(reader, writer, origin, b"whole")
        await origin.head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await writer.drain()

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}",
                                                   "127.0.0.1", post()))
        got = []
        with pytest.raises(httpx.RemoteProtocolError, match="received 4 bytes, expected 10"):
            async for frame in response.aiter_raw():
                got.append(frame)
        await response.aclose()
        _, whole = await fetch(client, port, post())
        await client.aclose()
    assert (got, whole, origin.connections) == ([b"half"], [b"whole"], 2)


@in_loop
async def test_an_answer_before_the_whole_body_arrived_is_kept_apart() -> None:
    # a response for a request the origin did not let finish: its body is
    # read whole, and the connection (the origin said close) is not reused
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n"
                     b"Content-Length: 4\r\n\r\nbig!")
        await writer.drain()

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        responses = [await fetch(client, port, post(b"x" * 1000)) for _ in range(2)]
        await client.aclose()
    assert [(r.status_code, f) for r, f in responses] == [(413, [b"big!"])] * 2
    assert origin.connections == 2


async def tls_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntls")
    await writer.drain()


@pytest.fixture
def upstream_ca(tmp_path: Path) -> tuple[RunCA, Path]:
    ca = RunCA.create(common_name="wiretape tests: upstream CA")
    pem = tmp_path / "upstream-ca.pem"
    pem.write_bytes(ca.cert_pem)
    return ca, pem


@in_loop
async def test_tls_is_verified_against_the_given_ca_for_the_resolved_name(
        upstream_ca: tuple[RunCA, Path]) -> None:
    ca, pem = upstream_ca
    names: list[str] = []
    origin = Origin(tls_ok)
    async with origin.running(ca.sni_context(names.append)) as port:
        resolve = {"api.example.test": ("127.0.0.1", port)}
        client = UpstreamClient(UpstreamOptions(ca_file=pem, resolve=resolve))
        response, frames = await fetch(client, 443, post(), scheme="https",
                                       host="api.example.test", resolve=resolve)
        await client.aclose()
        # the usual roots alone do not know the CA
        plain = UpstreamClient(UpstreamOptions(resolve=resolve))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await fetch(plain, 443, post(), scheme="https", host="api.example.test",
                        resolve=resolve)
        await plain.aclose()
    # the CA is trusted, but the certificate names another host
    async with Origin(tls_ok).running(ca.server_context("api.example.test")) as port:
        other = {"other.example.test": ("127.0.0.1", port)}
        wrong = UpstreamClient(UpstreamOptions(ca_file=pem, resolve=other))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await fetch(wrong, 443, post(), scheme="https", host="other.example.test",
                        resolve=other)
        await wrong.aclose()
    assert (response.status_code, frames) == (200, [b"tls"])
    assert names == ["api.example.test"] * 2  # the name sent (SNI), verified or not


@in_loop
async def test_a_stream_of_its_own_is_dialled_and_verified_as_requests_are(
        upstream_ca: tuple[RunCA, Path]) -> None:
    """``open_stream`` (a WebSocket session's connection): ``--resolve``
    applied, the host IDNA-encoded for SNI and the certificate check, the
    connection outside the pool."""
    ca, pem = upstream_ca

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(b"got " + await reader.readexactly(5))
        await writer.drain()

    names: list[str] = []
    async with Origin(echo).running(ca.sni_context(names.append)) as port:
        resolve = {"bücher.example.test": ("127.0.0.1", port)}
        client = UpstreamClient(UpstreamOptions(ca_file=pem, resolve=resolve))
        reader, writer = await client.open_stream("https://bücher.example.test", resolve)
        writer.write(b"hello")
        answer = await reader.readexactly(9)
        writer.close()
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await UpstreamClient(UpstreamOptions(resolve=resolve)).open_stream(
                "https://bücher.example.test", resolve)
        await client.aclose()
    assert answer == b"got hello"
    assert names == ["xn--bcher-kva.example.test"] * 2
    refused = Origin(echo)
    async with refused.running() as port:
        pass
    with pytest.raises(httpx.ConnectError) as caught:
        await UpstreamClient().open_stream(f"http://127.0.0.1:{port}")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)


@in_loop
async def test_refused_and_slow_origins_raise_the_errors_the_recorder_catches() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await asyncio.sleep(30)

    async def stalls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nsome")
        await writer.drain()
        await asyncio.sleep(30)

    quick = Timeouts(connect=0.3, read=0.3, write=0.3, pool=0.3)
    client = UpstreamClient(timeouts=quick)
    closed = Origin(silent)
    async with closed.running() as port:
        pass
    with pytest.raises(httpx.ConnectError):
        await fetch(client, port, post())
    async with Origin(silent).running() as port:
        with pytest.raises(httpx.ReadTimeout):  # no head
            await fetch(client, port, post())
        with pytest.raises(httpx.WriteTimeout):  # takes nothing in
            await fetch(client, port, post(b"x" * (64 << 20)))
        with pytest.raises(httpx.ConnectTimeout):  # a TLS handshake never answered
            await fetch(client, port, post(), scheme="https")
    async with Origin(stalls).running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        got = []
        with pytest.raises(httpx.ReadTimeout):  # a body that stops
            async for frame in response.aiter_raw():
                got.append(frame)
        await response.aclose()
    assert got == [b"some"]
    await client.aclose()


@in_loop
async def test_requests_wait_for_a_free_connection_when_all_are_busy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream, "MAX_CONNECTIONS", 1)
    origin = Origin(lambda r, w, n: keep_alive(r, w, origin))
    client = UpstreamClient(timeouts=Timeouts(pool=0.3))
    async with origin.running() as port:
        root = f"http://127.0.0.1:{port}"
        held = await client.send(build_request(root, "a", post()))
        with pytest.raises(httpx.PoolTimeout):
            await client.send(build_request(root, "a", post()))
        waiting = asyncio.ensure_future(fetch(client, port, post()))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert [f async for f in held.aiter_raw()] == [b'{"ok":true}']
        await held.aclose()  # its connection goes to the one waiting
        response, _ = await waiting
        await client.aclose()
    assert (response.status_code, origin.connections) == (200, 1)


def test_targets_and_fields_that_would_change_the_message_are_refused() -> None:
    for target in (b"http://evil.test/", b"*", b"/a#frag"):
        with pytest.raises(httpx.InvalidURL):
            build_request("http://127.0.0.1:1", "a", post(target=target))
    with pytest.raises(httpx.LocalProtocolError, match="line break"):
        build_request("http://127.0.0.1:1", "a",
                      post(headers=((b"X-A", b"1\r\nX-Injected: 1"),)))
    request = build_request("https://API.Example.test", "api.example.test", post(),
                            {"api.example.test": ("127.0.0.2", 8443)})
    assert request.key == ("https", "127.0.0.2", 8443, "api.example.test")
    assert build_request("http://[::1]:81", "[::1]:81", post()).key == ("http", "::1", 81, None)
    assert build_request("https://bücher.example", "xn--bcher-kva.example", post()).key == (
        "https", "xn--bcher-kva.example", 443, "xn--bcher-kva.example")


async def relayed(response: OriginResponse, stop_every: int = 0,
                  ) -> tuple[list[bytes], list[bool], int]:
    """Read the body through ``relay``: the frames, whether each was handed
    over with no task running (in the connection's callback), and how
    often relay returned asking for more (``on_frame`` True every
    ``stop_every`` frames)."""
    frames: list[bytes] = []
    in_callback: list[bool] = []

    def on_frame(frame: bytes) -> bool:
        frames.append(frame)
        in_callback.append(asyncio.current_task() is None)
        return bool(stop_every) and len(frames) % stop_every == 0

    stops = 0
    try:
        while await response.relay(on_frame):
            stops += 1
    finally:
        await response.aclose()
    return frames, in_callback, stops


def chunked_head() -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")


@in_loop
async def test_frames_are_handed_over_in_the_connections_callback_as_they_arrive() -> None:
    events = [b"data: %d\n\n" % i for i in range(5)]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(chunked_head())
        for event in events:
            await asyncio.sleep(0.03)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        frames, in_callback, stops = await relayed(response)
        _, again = await fetch(client, port, post())
        await client.aclose()
    assert frames == events
    assert in_callback == [True] * len(events)  # no task woken per frame
    assert stops == 0
    assert again == [b'{"ok":true}'] and origin.connections == 1  # the end read: kept alive


@in_loop
async def test_relay_stops_when_asked_and_goes_on_in_order_with_the_frames_held() -> None:
    events = [b"event %d " % i * (i % 4 + 1) for i in range(40)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(chunked_head())
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(body)  # every chunk in one write
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        frames, _, stops = await relayed(response, stop_every=7)
        await fetch(client, port, post())
        await client.aclose()
    assert frames == events
    assert stops == len(events) // 7
    assert origin.connections == 1


@pytest.mark.parametrize(("written", "frames"), [
    # an extension: h11 reads from that line on, alike
    (b"5\r\nhello\r\n3;name=value\r\nabc\r\n4\r\nwxyz\r\n0\r\n\r\n", [b"hello", b"abc", b"wxyz"]),
    # upper-case sizes, then a trailer section after the last chunk
    (b"A\r\n0123456789\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n", [b"0123456789", b"abc"]),
])
@in_loop
async def test_chunked_bodies_are_read_as_h11_reads_them(written: bytes,
                                                        frames: list[bytes]) -> None:
    assert await chunked_frames([written], pause=0.05) == frames


async def chunked_frames(pieces: list[bytes], *, pause: float) -> list[bytes]:
    """The frames relayed of a chunked body that a real origin writes after
    its head, in ``pieces``, ``pause`` s before each; the connection is then
    used again (so the body was read to its end, and no further)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(chunked_head())
        await writer.drain()
        for piece in pieces:
            await asyncio.sleep(pause)
            writer.write(piece)
            await writer.drain()
        await keep_alive(reader, writer, origin)

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        got, _, _ = await relayed(response)
        await fetch(client, port, post())
        await client.aclose()
    assert origin.connections == 1
    return got


@in_loop
async def test_a_chunked_body_split_anywhere_gives_each_chunks_bytes_in_its_own_frames() -> None:
    events = [b"data: {\"n\": %d}\n\n" % i for i in range(6)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    # three bytes at a time
    frames = await chunked_frames([body[i:i + 3] for i in range(0, len(body), 3)], pause=0.002)
    assert b"".join(frames) == b"".join(events)
    ends = list(itertools.accumulate(len(e) for e in events))
    cuts = list(itertools.accumulate(len(f) for f in frames))
    assert set(ends) <= set(cuts)  # no frame spans two chunks


@pytest.mark.parametrize(("written", "error"), [
    (b"3\r\nabcXY", "malformed chunk footer"),  # no CRLF after the data
    (b"3\r\nabc\r\nzz\r\n", "illegal chunk header"),  # h11's to say
    (b"9\r\nabc", "incomplete chunked read"),  # the stream ends inside a chunk
])
@in_loop
async def test_a_bad_or_cut_chunked_body_is_a_remote_protocol_error(written: bytes,
                                                                   error: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(chunked_head())
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(written)
        await writer.drain()
        writer.close()

    origin = Origin(serve)
    client = UpstreamClient()
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        with pytest.raises(httpx.RemoteProtocolError, match=error):
            await relayed(response)
        await client.aclose()


@in_loop
async def test_a_body_times_out_after_read_seconds_of_silence_not_of_streaming() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await origin.head(reader)
        writer.write(chunked_head())
        for i in range(12):  # 1.2 s of frames, 0.1 s apart: longer than the read timeout
            await asyncio.sleep(0.1)
            writer.write(b"2\r\n%02d\r\n" % i)
            await writer.drain()
        await asyncio.sleep(30)  # then silence

    origin = Origin(serve)
    client = UpstreamClient(timeouts=Timeouts(read=0.35))
    async with origin.running() as port:
        response = await client.send(build_request(f"http://127.0.0.1:{port}", "a", post()))
        frames: list[bytes] = []
        with pytest.raises(httpx.ReadTimeout, match=r"sent nothing for 0\.35 s"):
            await relayed_into(response, frames)
        await client.aclose()
    assert frames == [b"%02d" % i for i in range(12)]


async def relayed_into(response: OriginResponse, frames: list[bytes]) -> None:
    try:
        while await response.relay(lambda frame: frames.append(frame) is not None):
            pass
    finally:
        await response.aclose()
