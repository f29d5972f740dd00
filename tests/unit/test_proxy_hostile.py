"""The proxy against a hostile local client, on real 127.0.0.1 sockets in
this process: request-targets that would name another host, framing that
would smuggle a request, header floods, clients that stall (slowloris) or
leave at the worst moment, TLS garbage inside an intercepted tunnel, a bug
in a handler, and the event loop's own error reports. Each is answered
(4xx, or the connection closed), counted, and never a traceback; the
proxy serves on, and the origin gets only origin-form requests."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import socket
import ssl
import time
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.inproc import RawClient, in_loop, listening, request_bytes, settled
from support.probe_origin import Probe, probe_origin
from wiretape.intercept.ca import RunCA
from wiretape.model import Origin, Request, RunInfo
from wiretape.proxy.connect import ConnectProxy
from wiretape.proxy.http1 import ClientConnection, ConnectionLimits, Handler, origin_form
from wiretape.proxy.record import Recorder
from wiretape.proxy.server import Listeners
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="test", argv=(), cwd="/",
               env_names=(), origins=(Origin("openai", "http://127.0.0.1:9/v1", 0, ()),),
               started_at_ns=1_760_000_000_000_000_000, mode="serve")

FAST = ConnectionLimits(head_timeout=0.4, idle_timeout=0.4, body_timeout=0.4)


@dataclass
class Recording:
    port: int
    probe: Probe
    listeners: Listeners
    path: Path


@contextlib.asynccontextmanager
async def recording(tmp_path: Path, limits: ConnectionLimits | None = None
                    ) -> AsyncIterator[Recording]:
    """The record proxy in front of a probe origin (base path ``/v1``)."""
    path = tmp_path / "r.wtape"
    async with probe_origin() as probe:
        run = RunFile.create(path, INFO)
        recorder = Recorder(run)
        listeners = Listeners(limits=limits)
        port = await listeners.listen(
            0, lambda conn_id: recorder.handler("openai", probe.url + "/v1", conn_id))
        try:
            yield Recording(port, probe, listeners, path)
        finally:
            await listeners.close(grace=1.0)
            await recorder.aclose()
            run.close()


async def exchange(port: int, raw: bytes, method: bytes = b"POST") -> tuple[int, bytes, bool]:
    """Send ``raw`` on a new connection: (status, body, and for an error
    whether the connection was closed after it)."""
    async with await RawClient.open(port) as client:
        await client.send(raw)
        reply = await client.response(method)
        return reply.status, reply.body, reply.status >= 400 and await client.ended(2.0)


async def works(rec: Recording) -> None:
    """A normal request is still relayed and answered."""
    before = len(rec.probe.seen)
    status, body, _ = await exchange(rec.port, request_bytes("POST", "/v1/ok", b"{}"))
    assert (status, body) == (200, b"ok")
    assert rec.probe.seen[before].target == b"/v1/ok"


# --- request-targets ---------------------------------------------------------------------


@pytest.mark.parametrize("target", [
    "@127.0.0.1:{canary}/x",          # userinfo: the authority becomes the canary
    "{digit}/x",                      # one more digit of port
    "{digit}",
    ":{canary}/x",
    "http://127.0.0.1:{canary}/x",    # absolute-form on a base-URL listener
    "https://api.openai.com/v1/x",
    "*",                              # asterisk-form
    "x/y",
    "/v1/x#@127.0.0.1:{canary}",      # a fragment
    ".127.0.0.1:{canary}/x",
])
@in_loop
async def test_a_target_that_is_not_origin_form_gets_400_and_reaches_nothing(
        tmp_path: Path, target: str) -> None:
    async with recording(tmp_path) as rec:
        raw = request_bytes("GET", target.format(canary=rec.probe.canary_port,
                                                 digit=rec.probe.digit))
        status, body, closed = await exchange(rec.port, raw, b"GET")
        assert (status, closed) == (400, True)
        assert b"origin-form" in body or b"fragment" in body
        await works(rec)
        assert rec.probe.canary_hits == 0
        assert [s.target for s in rec.probe.seen] == [b"/v1/ok"]
        assert rec.listeners.refused == [(400, "malformed_request")]
    with open_run(rec.path) as run:
        assert [e.request.target for e in run.exchanges()] == [b"/v1/ok"]


@in_loop
async def test_a_double_slash_path_stays_a_path_on_the_origin(tmp_path: Path) -> None:
    async with recording(tmp_path) as rec:
        target = f"//127.0.0.1:{rec.probe.canary_port}/x"
        status, body, _ = await exchange(rec.port, request_bytes("GET", target), b"GET")
        assert (status, body) == (200, b"ok")
        assert rec.probe.canary_hits == 0
        [seen] = rec.probe.seen
        assert seen.target == target.encode()
        assert seen.header(b"host") == [f"127.0.0.1:{rec.probe.port}".encode()]


@pytest.mark.parametrize(("target", "expected"), [
    (b"/v1/x?a=b", b"/v1/x?a=b"),
    (b"//x", b"//x"),
    (b"/x#y", None),
    (b"https://api.test/v1/x?q=1", b"/v1/x?q=1"),
    (b"HTTPS://API.TEST:443", b"/"),
    (b"https://api.test:8443/v1", None),
    (b"http://api.test/v1", None),
    (b"https://u@api.test/v1", None),
    (b"https://api.test.evil/v1", None),
    (b"api.test:443", None),
])
def test_origin_form_inside_a_tunnel_to_api_test(target: bytes, expected: bytes | None) -> None:
    checked = origin_form(target, "api.test")
    assert checked == expected if expected is not None else isinstance(checked, str)


# --- framing -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
], ids=["te-and-cl", "cl-and-te-smuggling", "two-lengths", "two-te", "te-gzip"])
@in_loop
async def test_ambiguous_framing_is_refused_and_never_forwarded(tmp_path: Path,
                                                                raw: bytes) -> None:
    async with recording(tmp_path) as rec:
        status, body, closed = await exchange(rec.port, raw)
        assert status in (400, 501) and closed
        assert b"wiretape:" in body
        await works(rec)
        assert [s.target for s in rec.probe.seen] == [b"/v1/ok"]


@in_loop
async def test_the_origin_gets_the_bodys_real_length(tmp_path: Path) -> None:
    async with recording(tmp_path) as rec:
        chunked = (b"POST /v1/c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n")
        same_twice = (b"POST /v1/d HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                      b"Content-Length: 2\r\n\r\nhi")
        for raw in (chunked, same_twice):
            assert (await exchange(rec.port, raw))[:2] == (200, b"ok")
        first, second = rec.probe.seen
        assert (first.body, first.header(b"content-length")) == (b"hello!", [b"6"])
        assert first.header(b"transfer-encoding") == []
        assert (second.body, second.header(b"content-length")) == (b"hi", [b"2"])


# --- header floods -------------------------------------------------------------------------


@in_loop
async def test_too_many_header_fields_get_431_at_once(tmp_path: Path) -> None:
    async with recording(tmp_path) as rec:
        raw = request_bytes("POST", "/v1/x", b"{}", [(f"X-H{i}", "v") for i in range(20_000)])
        t0 = time.monotonic()
        status, body, closed = await exchange(rec.port, raw)
        elapsed = time.monotonic() - t0
        assert (status, closed) == (431, True)
        assert b"20002 header fields" in body and b"at most 1000" in body
        assert elapsed < 2.0, f"{elapsed:.1f} s for 20,000 header fields"
        # at the cap: relayed, and quickly
        at_cap = request_bytes("POST", "/v1/x", b"{}", [(f"X-H{i}", "v") for i in range(998)])
        t0 = time.monotonic()
        assert (await exchange(rec.port, at_cap))[:2] == (200, b"ok")
        assert time.monotonic() - t0 < 2.0
        assert len(rec.probe.seen[0].headers) == 1000
        assert rec.listeners.refused == [(431, "request_header_fields_too_large")]


@in_loop
async def test_a_head_over_the_size_cap_gets_431(tmp_path: Path) -> None:
    async with recording(tmp_path) as rec:
        raw = b"GET /v1/x HTTP/1.1\r\nHost: a\r\nX-Huge: " + b"h" * (1 << 20) + b"\r\n\r\n"
        async with await RawClient.open(rec.port) as client:
            await client.send(raw)
            reply = await client.response(b"GET")
            assert await client.ended()
        assert (reply.status, reply.reason) == (431, b"Request Header Fields Too Large")
        assert reply.json()["error"]["code"] == "request_header_fields_too_large"
        await works(rec)


# --- timeouts ----------------------------------------------------------------------------


@in_loop
async def test_a_slowloris_head_gets_408_at_the_head_deadline(tmp_path: Path) -> None:
    """A byte every 50 ms keeps every read short; the head's deadline still
    comes 0.6 s after its first byte."""
    limits = ConnectionLimits(head_timeout=0.6, idle_timeout=10, body_timeout=10)
    async with recording(tmp_path, limits) as rec, await RawClient.open(rec.port) as client:
        t0 = time.monotonic()
        for byte in b"POST /v1/x HTTP/1.1":  # 0.5 s of bytes, then a pause of 0.1 s
            await client.send(bytes([byte]))
            await asyncio.sleep(0.5 / 19)
        reply = await client.response()
        assert await client.ended()
        elapsed = time.monotonic() - t0
        assert (reply.status, reply.json()["error"]["code"]) == (408, "request_timeout")
        assert 0.55 < elapsed < 1.5
        assert rec.listeners.faults["head_timeout"] == 1
        assert rec.probe.seen == []


@in_loop
async def test_a_stalled_body_gets_408(tmp_path: Path) -> None:
    async with recording(tmp_path, FAST) as rec, await RawClient.open(rec.port) as client:
        await client.send(b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n012")
        reply = await client.response()
        assert await client.ended()
        assert reply.status == 408 and b"request body" in reply.body
        assert rec.listeners.faults["body_timeout"] == 1
        assert rec.probe.seen == []


@in_loop
async def test_silent_and_idle_connections_are_closed_without_a_word(tmp_path: Path) -> None:
    async with recording(tmp_path, FAST) as rec:
        async with await RawClient.open(rec.port) as silent:
            t0 = time.monotonic()
            assert await silent.ended(2.0)  # no bytes before the close
            assert 0.35 < time.monotonic() - t0 < 1.5
        async with await RawClient.open(rec.port) as pooled:
            await pooled.send(request_bytes("POST", "/v1/x", b"{}"))
            assert (await pooled.response()).status == 200
            t0 = time.monotonic()
            assert await pooled.ended(2.0)
            assert 0.35 < time.monotonic() - t0 < 1.5
        assert rec.listeners.faults["idle_timeout"] == 2
        assert rec.listeners.refused == []


@in_loop
async def test_a_client_that_stops_reading_is_let_go() -> None:
    outcome: list[str] = []

    def handler_for(conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            await conn.send_head(200, b"OK", ((b"Transfer-Encoding", b"chunked"),))
            try:
                for _ in range(10_000):
                    await conn.send_data(b"x" * 65536)
            except BaseException as exc:
                outcome.append(type(exc).__name__)
                raise

        return handle

    listeners = Listeners(limits=FAST)
    port = await listeners.listen(0, handler_for)
    try:
        client = await RawClient.open(port)
        await client.send(request_bytes("POST", "/v1/x", b"{}"))  # and never reads
        assert await settled(listeners, 5.0)
        assert outcome == ["ClientGone"]
        assert listeners.faults["client_gone"] == 1
        client.writer.transport.abort()
    finally:
        await listeners.close(grace=0.5)


# --- clients leaving, bugs, and the loop's reports -------------------------------------------


@pytest.mark.parametrize("hang_up", ["close", "reset"])
@in_loop
async def test_a_malformed_request_and_a_hang_up_leave_no_traceback(hang_up: str) -> None:
    """The 400 finds the client gone: counted, not an error of the loop
    (``in_loop`` fails the test on any)."""
    async with listening(lambda _id: _never_called) as (listeners, port):
        for garbage in (b"NOT HTTP\r\n\r\n", b"GET @x:1/ HTTP/1.1\r\nHost: a\r\n\r\n",
                        b"GET /x HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n") * 10:
            client = await RawClient.open(port)
            await client.send(garbage)
            reset(client) if hang_up == "reset" else client.writer.close()
        assert await settled(listeners, 5.0)
        assert len(listeners.refused) == 30


async def _never_called(conn: ClientConnection, request: Request) -> None:
    raise AssertionError(f"a refused request reached the handler: {request.target!r}")


@in_loop(internal_errors=1)
async def test_a_bug_in_a_handler_is_one_line_and_a_500(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def handler_for(conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("boom\nsecond line")
            await conn.send_head(200, b"OK", ((b"Content-Length", b"2"),))
            await conn.send_data(b"ok")
            await conn.end()

        return handle

    with caplog.at_level(logging.WARNING, "wiretape"):
        async with listening(handler_for) as (listeners, port):
            async with await RawClient.open(port) as client:
                await client.send(request_bytes("POST", "/v1/x", b"{}"))
                reply = await client.response()
                assert await client.ended()
            assert (await exchange(port, request_bytes("POST", "/v1/y", b"{}")))[:2] == (
                200, b"ok")
            assert listeners.faults["internal_error"] == 1
    assert (reply.status, reply.json()["error"]["code"]) == (500, "internal_error")
    assert [r.getMessage() for r in caplog.records] == [
        "wiretape: internal error in connection 1: RuntimeError: boom second line"]
    assert all(r.exc_info is None for r in caplog.records)


@in_loop(internal_errors=1)
async def test_the_loops_reports_about_the_proxy_are_one_line_each(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    others: list[dict[str, object]] = []
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: others.append(context))
    listeners = Listeners()
    port = await listeners.listen(0, lambda _id: _never_called)
    server_socket = listeners._servers[0].sockets[0]  # what asyncio names in an accept report
    emfile = OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    accept_failed = {"message": "socket.accept() out of system resource",
                     "exception": emfile, "socket": server_socket}

    async def wiretape_task() -> None:
        raise ValueError("escaped")

    listeners._guard.burst_gap = 0.2
    with caplog.at_level(logging.WARNING, "wiretape"):
        for _ in range(5):  # asyncio retries each second, reporting every failure
            loop.call_exception_handler(accept_failed)
            await asyncio.sleep(0.05)
        async with await RawClient.open(port) as client:  # accepting works again a while
            await client.send(b"x")
            await asyncio.sleep(0.3)
        loop.call_exception_handler(accept_failed)
        task = loop.create_task(wiretape_task(), name="wiretape-store-7")
        await asyncio.gather(task, return_exceptions=True)
        loop.call_exception_handler({"message": "Task exception was never retrieved",
                                     "exception": task.exception(), "future": task})
        loop.call_exception_handler({"message": "someone else's", "exception": KeyError("k")})
        await listeners.close(grace=0.5)
        loop.call_exception_handler({"message": "after", "exception": emfile,
                                     "socket": server_socket})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("wiretape: cannot accept connections: OSError: [Errno 24] Too many")
    assert lines[1] == lines[0]
    assert lines[2] == "wiretape: internal error in task wiretape-store-7: ValueError: escaped"
    assert [c["message"] for c in others] == ["someone else's", "after"]
    assert listeners.faults["accept_out_of_resources"] == 6
    assert loop.get_exception_handler() is not None
    loop.set_exception_handler(before)


# --- tunnels -----------------------------------------------------------------------------------


@in_loop
async def test_a_tunnel_closes_its_upstream_when_the_client_left_before_the_200() -> None:
    """The far host's accept queue is full, so reaching it takes a SYN
    retransmission (about a second); the client resets its connection
    meanwhile, and the 200 finds it gone. The proxy closes the socket it
    opened to the far host itself, not the garbage collector."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await _tunnel_to_a_slow_host_left_early()
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


async def _tunnel_to_a_slow_host_left_early() -> None:
    loop = asyncio.get_running_loop()
    far = socket.socket()
    far.bind(("127.0.0.1", 0))
    far.listen(0)
    far.setblocking(False)
    far_port = far.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", far_port))  # the queue's one place
    with RunCA.create() as ca:
        listeners = Listeners()
        connect = ConnectProxy(ca, {}, lambda *_: _never_called, tunnel=True,
                               next_connection_id=listeners.next_connection_id, max_body=1000)
        port = await listeners.listen(0, lambda _id: _never_called, connect=connect)
        try:
            client = await RawClient.open(port)
            await client.send(f"CONNECT 127.0.0.1:{far_port} HTTP/1.1\r\n"
                              f"Host: 127.0.0.1:{far_port}\r\n\r\n".encode())
            await asyncio.sleep(0.2)  # the proxy is dialling
            reset(client)
            await asyncio.sleep(0.2)
            waiting, _ = await loop.sock_accept(far)  # frees the queue for the proxy's dial
            waiting.close()
            upstream, _ = await asyncio.wait_for(loop.sock_accept(far), 5.0)
            with upstream:
                upstream.setblocking(False)
                got = await asyncio.wait_for(loop.sock_recv(upstream, 100), 5.0)
            assert got == b""  # closed by the proxy, nothing sent
            assert await settled(listeners, 3.0)
            assert listeners.faults["client_gone"] == 1
            assert connect.report.tunnels[("127.0.0.1", far_port)].connections == 1
        finally:
            await listeners.close(grace=0.5)
            filler.close()
            far.close()


def reset(client: RawClient) -> None:
    """Hang up with a TCP reset rather than a FIN."""
    sock = client.writer.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.writer.transport.abort()


@in_loop
async def test_tls_garbage_inside_a_tunnel_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[bytes] = []

    def handler_for(name: str, authority: str, conn_id: int) -> Handler:
        async def handle(conn: ClientConnection, request: Request) -> None:
            seen.append(request.target)
            await conn.send_head(200, b"OK", ((b"Content-Length", b"2"),))
            await conn.send_data(b"ok")
            await conn.end()

        return handle

    with RunCA.create() as ca, caplog.at_level(logging.WARNING, "wiretape"):
        listeners = Listeners()
        connect = ConnectProxy(ca, {"api.test": "openai"}, handler_for, tunnel=False,
                               next_connection_id=listeners.next_connection_id, max_body=1000)
        port = await listeners.listen(0, lambda _id: _never_called, connect=connect)
        trusting = ssl.create_default_context(cadata=ca.cert_pem.decode())
        try:
            reply = await asyncio.to_thread(_tls_then_garbage, port, trusting)
            assert await settled(listeners, 3.0)
        finally:
            await listeners.close(grace=0.5)
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"ok")
    assert seen == [b"/v1/a"]  # absolute-form naming the tunnel's host, as origin-form
    assert listeners.faults["tls_error"] == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("wiretape: TLS error on connection 1 (tunnel to api.test): SSLError")


def _tls_then_garbage(port: int, context: ssl.SSLContext) -> bytes:
    """CONNECT, a TLS handshake and one request, then bytes that are no TLS
    record written under the TLS layer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        with context.wrap_socket(raw, server_hostname="api.test") as tls:
            tls.sendall(b"GET https://api.test/v1/a HTTP/1.1\r\nHost: api.test\r\n\r\n")
            reply = b""
            while not reply.endswith(b"ok"):
                reply += tls.recv(4096)
            with socket.socket(fileno=os.dup(tls.fileno())) as under:
                under.sendall(b"\x17\x03\x03\x00\x10" + b"\xee" * 16)
            with contextlib.suppress(OSError):
                while tls.recv(4096):
                    pass
    return reply
