"""The proxy at its edges, on real sockets: protocols it refuses (and how
fast; HTTP/2, which it serves, is test_http2.py's), framing it must get
right (keep-alive, 100-continue, hop-by-hop headers, body caps, malformed
input), many streams at once, and the attach forms ``serve --record`` /
``serve --replay`` with their pacing.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.routed_upstream import RoutedUpstream, json_answer
from wiretape.store.runfile import open_run

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-edges-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- a raw HTTP/1.1 client -------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    chunk_times: list[float] = field(default_factory=list)  # monotonic s, one per chunk
    chunks: list[bytes] = field(default_factory=list)

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name.lower().encode()), None)

    def json(self) -> dict:
        return json.loads(self.body)


class Conn:
    """One client connection to the proxy, read with a timeout (a hang fails, not blocks)."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        self.buf += data

    def read_until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def reply(self, method: bytes = b"POST") -> Reply:
        head = self.read_until(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        _, status, reason = [*lines[0].split(b" ", 2), b""][:3]
        headers = [
            (k.strip(), v.strip()) for k, _, v in (line.partition(b":") for line in lines[1:])
        ]
        r = Reply(int(status), reason, headers)
        if r.status < 200 or r.status in (204, 304) or method == b"HEAD":
            return r
        if b"chunked" in (r.header("transfer-encoding") or b"").lower():
            while True:
                size = int(self.read_until(b"\r\n")[:-2].split(b";")[0], 16)
                if size == 0:
                    self.read_until(b"\r\n")
                    break
                data = self.read_exact(size + 2)[:-2]
                r.chunk_times.append(time.monotonic())
                r.chunks.append(data)
                r.body += data
        elif r.header("content-length") is not None:
            r.body = self.read_exact(int(r.header("content-length")))
        else:
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            r.body, self.buf = self.buf, b""
        return r

    def closed_within(self, timeout: float) -> bool:
        """Whether the peer closes the connection within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def request(method: str, target: str, body: bytes = b"", headers: list[tuple[str, str]] = (),
            host: str = "127.0.0.1") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def post(target: str, payload: dict, headers: list[tuple[str, str]] = ()) -> bytes:
    return request("POST", target, json.dumps(payload).encode(),
                   [("Content-Type", "application/json"), *headers])


# --- wiretape as a long-running process ------------------------------------------------------


class Wiretape:
    """``wiretape ARGS`` in the background, its stderr in a file."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.cwd = cwd
        self.err_path = cwd / f"wiretape-{time.monotonic_ns()}.err"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                                         env=env(), stdout=subprocess.PIPE, stderr=err)
        self.urls: dict[str, str] = {}

    def read_urls(self, name: str = "upstream", timeout: float = 20) -> dict[str, str]:
        """The ``NAME: URL`` lines serve prints once it listens, up to the one for ``name``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), False)
        pending = b""
        while name not in self.urls:
            if time.monotonic() > deadline:
                raise AssertionError(f"no URL lines from wiretape: {self.stderr()}")
            if self.proc.poll() is not None:
                raise AssertionError(f"wiretape exited {self.proc.returncode}: {self.stderr()}")
            chunk = self.proc.stdout.read()
            if chunk:
                pending += chunk
                *done, pending = pending.split(b"\n")
                for line in done:
                    label, _, url = line.decode().partition(": ")
                    # (the unnamed origin, ``upstream``, is printed as ``listening``)
                    self.urls["upstream" if label == "listening" else label] = url
            else:
                time.sleep(0.02)
        os.set_blocking(self.proc.stdout.fileno(), True)
        return self.urls

    def wait_listening(self, port: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"wiretape exited {self.proc.returncode}: {self.stderr()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.decode(), self.stderr()

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def upstream() -> Iterator[RoutedUpstream]:
    with RoutedUpstream() as up:
        yield up


@pytest.fixture
def serve_record(upstream: RoutedUpstream, tmp_path: Path) -> Iterator[tuple[Wiretape, int, Path]]:
    """``wiretape serve --record`` in front of the upstream on a fixed port."""
    port, run = free_port(), tmp_path / "served.wtape"
    wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{upstream.url}/v1",
                  "--port", str(port), "-o", str(run))
    try:
        urls = wt.read_urls()
        assert urls["upstream"] == f"http://127.0.0.1:{port}/v1"
        yield wt, port, run
    finally:
        wt.kill()


def stop_and_load(wt: Wiretape, run: Path) -> list:
    code, _, err = wt.stop(signal.SIGINT)
    assert code == 0, err
    with open_run(run) as rf:
        return rf.exchanges()


# --- refused protocols -----------------------------------------------------------------------

def test_websocket_upgrade_an_origin_does_not_switch_is_relayed_and_recorded(serve_record,
                                                                             upstream):
    wt, port, run = serve_record
    with Conn(port, timeout=5) as conn:
        conn.send(request("GET", "/v1/realtime?model=gpt-4o-realtime", headers=[
            ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]))
        reply = conn.reply(b"GET")
    # This origin answers 200 with JSON, not 101: that answer reaches the client.
    assert reply.status == 200
    assert reply.body == json_answer(b"GET", b"/v1/realtime?model=gpt-4o-realtime", b"")
    seen = upstream.seen()
    assert [s.target for s in seen] == [b"/v1/realtime?model=gpt-4o-realtime"]
    sent = {k.lower(): v for k, v in seen[0].headers}
    assert sent[b"upgrade"] == b"websocket"
    assert sent[b"sec-websocket-key"] == b"dGhlIHNhbXBsZSBub25jZQ=="
    stored = stop_and_load(wt, run)
    assert len(stored) == 1
    assert stored[0].response.status == 200 and stored[0].messages == ()
    assert stored[0].response.body == reply.body


def test_malformed_websocket_handshake_gets_one_clear_400(serve_record, upstream):
    wt, port, run = serve_record
    with Conn(port, timeout=5) as conn:
        conn.send(request("GET", "/v1/realtime", headers=[
            ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]))
        reply = conn.reply(b"GET")
        assert conn.closed_within(5)
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == "malformed_websocket_handshake"
    assert "no Sec-WebSocket-Key" in error["message"]
    assert "\n" not in error["message"]
    assert upstream.seen() == []
    assert stop_and_load(wt, run) == []


def test_connect_gets_405(serve_record, upstream):
    wt, port, run = serve_record
    with Conn(port, timeout=5) as conn:
        conn.send(b"CONNECT api.openai.com:443 HTTP/1.1\r\nHost: api.openai.com:443\r\n\r\n")
        reply = conn.reply(b"CONNECT")
        assert conn.closed_within(5)
    assert reply.status == 405
    assert "CONNECT" in reply.json()["error"]["message"]
    assert upstream.seen() == []
    assert stop_and_load(wt, run) == []


@pytest.mark.parametrize("garbage", [
    b"THIS IS NOT HTTP AT ALL\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nno colon in this header\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: twelve\r\n\r\n",
    b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
])
def test_malformed_request_gets_400_and_other_clients_are_served(serve_record, upstream, garbage):
    wt, port, run = serve_record
    with Conn(port) as idle:
        idle.send(post("/v1/before", {"n": 1}))  # a keep-alive client, open across the bad one
        assert idle.reply().status == 200
        with Conn(port, timeout=5) as bad:
            bad.send(garbage)
            reply = bad.reply()
            assert reply.status == 400
            assert reply.header("x-should-retry") == b"false"
            assert bad.closed_within(5)
        idle.send(post("/v1/after", {"n": 2}))
        assert idle.reply().status == 200
    with Conn(port) as fresh:
        fresh.send(post("/v1/fresh", {"n": 3}))
        assert fresh.reply().status == 200
    targets = [e.request.target for e in stop_and_load(wt, run)]
    assert targets == [b"/v1/before", b"/v1/after", b"/v1/fresh"]


def _hostile(upstream_port: int) -> list[bytes]:
    other = upstream_port + 1  # any other port on this machine
    return [
        b"GET @127.0.0.1:%d/x HTTP/1.1\r\nHost: a\r\n\r\n" % other,
        b"GET 1/x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http://127.0.0.1:%d/x HTTP/1.1\r\nHost: a\r\n\r\n" % other,
        b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
        b"\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST /v1/x HTTP/1.1\r\nHost: a\r\n" + b"X-F: v\r\n" * 20_000 + b"\r\n",
        b"POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe",
        b"GET /v1/x HTTP/1.1\r\nHost: a\r\nX: \x00\r\n\r\n",
    ]


def test_hostile_shapes_are_refused_without_a_traceback(serve_record, upstream):
    """What an attacker on this machine might send: answered 4xx or closed,
    nothing relayed but the normal request, and stderr free of tracebacks."""
    wt, port, run = serve_record
    statuses = []
    for raw in _hostile(int(upstream.url.rsplit(":", 1)[1])):
        with Conn(port, timeout=10) as conn:
            conn.send(raw)
            conn.sock.shutdown(socket.SHUT_WR)
            statuses.append(conn.reply().status)
    for raw in (b"NOT HTTP\r\n\r\n", b"GET @x:1/ HTTP/1.1\r\nHost: a\r\n\r\n") * 5:
        with Conn(port) as conn:  # then hang up at once, with a reset
            conn.send(raw)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    with Conn(port) as conn:
        conn.send(post("/v1/after", {"n": 1}))
        assert conn.reply().status == 200
    targets = [e.request.target for e in stop_and_load(wt, run)]
    err = wt.stderr()
    assert statuses == [400, 400, 400, 400, 431, 400, 400]
    assert targets == [b"/v1/after"]
    assert [s.target for s in upstream.seen()] == [b"/v1/after"]
    assert "Traceback" not in err and "Unhandled exception" not in err, err
    assert "internal error" not in err, err


def test_running_out_of_descriptors_is_said_once(upstream, tmp_path):
    """With few file descriptors, held connections exhaust them: accepting
    fails (asyncio retries every second); wiretape says so once, serves
    again once some close, and prints no traceback."""
    import resource

    port, run = free_port(), tmp_path / "few.wtape"

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))

    err_path = tmp_path / "few.err"
    with open(err_path, "wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wiretape", "serve", "--record", "--upstream",
             f"{upstream.url}/v1", "--port", str(port), "-o", str(run)],
            cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=err_file,
            preexec_fn=few_descriptors)
    held: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"listening: ")
        for _ in range(100):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(2.5)  # asyncio retries the accept each second
        for sock in held:
            sock.close()
        held.clear()
        with Conn(port, timeout=10) as conn:
            conn.send(post("/v1/after", {"n": 1}))
            assert conn.reply().status == 200
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err_path.read_text(errors="replace")
    assert proc.returncode == 0, err
    said = [line for line in err.splitlines() if "cannot accept connections" in line]
    assert len(said) == 1, err
    assert said[0].startswith("wiretape: cannot accept connections: OSError: [Errno 24]")
    assert "Traceback" not in err and "out of system resource" not in err, err
    with open_run(run) as rf:
        assert [e.request.target for e in rf.exchanges()] == [b"/v1/after"]


_CLOSE_WHILE_STARVED = """
import asyncio, errno, os, resource, socket, sys
from wiretape.proxy.server import Listeners


async def main():
    listeners = Listeners()
    port = await listeners.listen(0, lambda conn_id: None)
    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    fillers = []
    while True:  # take every descriptor but one, which the client takes
        try:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE, exc
            break
    os.close(fillers.pop())
    client = socket.socket()
    client.setblocking(False)
    try:
        client.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    while not listeners.faults["accept_out_of_resources"]:
        await asyncio.sleep(0.005)
    await listeners.close()  # before asyncio's retry of the accept is due
    await asyncio.sleep(2.5)  # the loop runs on past it
    print("starved", listeners.faults["accept_out_of_resources"], "then closed")


asyncio.run(main())
"""


def test_listener_closed_while_accept_retry_pending_says_nothing_more(tmp_path):
    """asyncio retries an accept that failed for want of descriptors one
    second later, by a timer nobody can cancel; a listener closed within
    that second (SIGINT at the wrong moment) must not let that retry print
    a traceback once it comes due on the closed socket."""
    src = Path(__file__).resolve().parents[2] / "src"
    run_env = env()
    run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), run_env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _CLOSE_WHILE_STARVED], cwd=tmp_path,
                          env=run_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("starved "), done.stdout
    assert done.stdout.endswith(" then closed\n"), done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("wiretape: cannot accept connections: OSError: [Errno 24]")
    assert "Traceback" not in done.stderr and "Exception in callback" not in done.stderr


def test_body_over_max_body_gets_413(upstream, tmp_path):
    port, run = free_port(), tmp_path / "capped.wtape"
    wt = Wiretape(tmp_path, "record", "--max-body", "1000", "--port", str(port), "-o", str(run),
                  "--upstream", f"openai={upstream.url}/v1", "--", "sleep", "60")
    try:
        wt.wait_listening(port)
        with Conn(port, timeout=5) as conn:  # declared too large
            conn.send(request("POST", "/v1/big", b"x" * 5000, [("Content-Type", "text/plain")]))
            reply = conn.reply()
            assert reply.status == 413
            assert "1000" in reply.json()["error"]["message"]
        with Conn(port, timeout=5) as conn:  # chunked, grows too large
            conn.send(
                b"POST /v1/big-chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"190\r\n" + b"y" * 400 + b"\r\n" for _ in range(4))
                + b"0\r\n\r\n"
            )
            assert conn.reply().status == 413
        with Conn(port, timeout=5) as conn:  # at the cap is fine
            conn.send(request("POST", "/v1/small", b"z" * 1000, [("Content-Type", "text/plain")]))
            assert conn.reply().status == 200
        code, _, err = wt.stop(signal.SIGINT)
    finally:
        wt.kill()
    assert code == 128 + signal.SIGINT, err  # the child's status: SIGINT reached its group
    assert "recorded" in err
    with open_run(run) as rf:
        assert [e.request.target for e in rf.exchanges()] == [b"/v1/small"]
    assert [s.target for s in upstream.seen()] == [b"/v1/small"]


# --- framing ---------------------------------------------------------------------------------


def test_keep_alive_several_requests_on_one_connection_all_recorded(serve_record, upstream):
    wt, port, run = serve_record
    replies = []
    with Conn(port) as conn:
        for i in range(4):
            conn.send(post(f"/v1/keep/{i}", {"i": i}))
            replies.append(conn.reply())
        conn.send(request("POST", "/v1/keep/stream?frames=3&gap_ms=10", b"{}"))
        replies.append(conn.reply())
        conn.send(post("/v1/keep/last", {"last": True}))
        replies.append(conn.reply())
    assert [r.status for r in replies] == [200] * 6
    assert len(replies[4].chunks) == 3
    exchanges = stop_and_load(wt, run)
    assert [e.request.target for e in exchanges] == [
        b"/v1/keep/0", b"/v1/keep/1", b"/v1/keep/2", b"/v1/keep/3",
        b"/v1/keep/stream?frames=3&gap_ms=10", b"/v1/keep/last"]
    assert len({e.connection_id for e in exchanges}) == 1
    assert [e.response.body for e in exchanges] == [r.body for r in replies]
    assert [e.ending.value for e in exchanges] == ["complete"] * 6


def test_hop_by_hop_request_headers_are_not_forwarded(serve_record, upstream):
    wt, port, run = serve_record
    with Conn(port) as conn:
        conn.send(post("/v1/hop", {"hop": True}, headers=[
            ("Connection", "keep-alive, X-Foo"),
            ("X-Foo", "only-for-the-next-hop"),
            ("Keep-Alive", "timeout=5, max=100"),
            ("TE", "trailers"),
            ("X-End-To-End", "kept"),
            ("OpenAI-Beta", "realtime=v1"),
            ("Authorization", "Bearer sk-edges-test"),
        ]))
        assert conn.reply().status == 200
    [seen] = upstream.seen()
    names = seen.header_names()
    assert not names & {"x-foo", "keep-alive", "te"}, seen.headers
    assert b"x-foo" not in (seen.header("connection") or b"").lower()
    assert seen.header("x-end-to-end") == b"kept"
    assert seen.header("openai-beta") == b"realtime=v1"
    assert seen.header("authorization") == b"Bearer sk-edges-test"
    assert seen.header("content-type") == b"application/json"
    assert seen.header("host") == upstream.url.removeprefix("http://").encode()
    assert seen.body == b'{"hop": true}'
    stop_and_load(wt, run)


def test_expect_100_continue(serve_record, upstream):
    wt, port, run = serve_record
    body = b'{"expect": "continue"}'
    with Conn(port, timeout=5) as conn:
        conn.send(b"POST /v1/expect HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                  b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = conn.reply()  # before any body byte was sent
        assert interim.status == 100
        conn.send(body)
        final = conn.reply()
    assert final.status == 200
    assert final.body == json_answer(b"POST", b"/v1/expect", body)
    [seen] = upstream.seen()
    assert seen.body == body
    assert "expect" not in seen.header_names()
    [exchange] = stop_and_load(wt, run)
    assert exchange.request.body == body


def test_twenty_concurrent_streams_recorded_and_exact_on_replay(upstream, tmp_path):
    run = tmp_path / "streams.wtape"
    client = Path(__file__).resolve().parents[1] / "e2e" / "clients_modes" / "concurrent_streams.py"
    command = [sys.executable, str(client), "20", "5", "60"]
    done = subprocess.run([sys.executable, "-m", "wiretape", "record", "-o", str(run),
                           "--upstream", f"openai={upstream.url}/v1", "--", *command],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 20 and all(" 200 5 frames " in line for line in lines), lines
    with open_run(run) as rf:
        exchanges = rf.exchanges()
    assert len(exchanges) == 20
    assert len({e.connection_id for e in exchanges}) == 20
    assert all(e.ending.value == "complete" and len(e.response.frames) >= 5 for e in exchanges)
    # they really were in flight together
    spans = [(e.started_at_ns, e.started_at_ns + e.duration_ns) for e in exchanges]
    peak = max(sum(1 for s, t in spans if s <= start < t) for start, _ in spans)
    assert peak >= 10, peak
    by_stream = {json.loads(e.request.body)["stream"]: e.response.body for e in exchanges}
    assert sorted(by_stream) == list(range(20))

    done = subprocess.run([sys.executable, "-m", "wiretape", "replay", str(run), "--json"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[:20] == lines  # the same 20 streams, byte for byte
    verdict = json.loads("\n".join(out[20:]))
    assert (verdict["recorded"], verdict["exact"], verdict["missing"], verdict["unused"]) == (
        20,
        20,
        0,
        0,
    )
    assert verdict["pass"] is True


# --- the attach forms --------------------------------------------------------------------------


def test_serve_record_then_serve_replay(upstream, tmp_path):
    port, run = free_port(), tmp_path / "attach.wtape"
    wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{upstream.url}/v1",
                  "--port", str(port), "-o", str(run))
    try:
        assert wt.read_urls()["upstream"] == f"http://127.0.0.1:{port}/v1"
        recorded = []
        with Conn(port) as conn:
            conn.send(post("/v1/chat/completions", {"turn": 1}))
            recorded.append(conn.reply())
            conn.send(request("POST", "/v1/chat/completions?frames=3&gap_ms=10", b'{"turn": 2}'))
            recorded.append(conn.reply())
        time.sleep(0.3)
        assert wt.proc.poll() is None  # it records until told to stop
        code, out, err = wt.stop(signal.SIGINT)
    finally:
        wt.kill()
    assert code == 0, err
    assert "2 exchanges" in err and str(run) in err
    assert "wiretape: recorded run_" in err

    # replay: the recorded port again, the same answers, the upstream gone
    upstream_requests = len(upstream.seen())
    wt = Wiretape(tmp_path, "serve", "--replay", str(run), "--json")
    try:
        assert wt.read_urls()["upstream"] == f"http://127.0.0.1:{port}/v1"
        replayed = []
        with Conn(port) as conn:
            conn.send(post("/v1/chat/completions", {"turn": 1}))
            replayed.append(conn.reply())
            conn.send(request("POST", "/v1/chat/completions?frames=3&gap_ms=10", b'{"turn": 2}'))
            replayed.append(conn.reply())
        assert wt.proc.poll() is None
        code, out, err = wt.stop(signal.SIGTERM)
    finally:
        wt.kill()
    assert [(r.status, r.body) for r in replayed] == [(r.status, r.body) for r in recorded]
    assert replayed[1].chunks == recorded[1].chunks
    assert len(upstream.seen()) == upstream_requests
    assert code == 0, err
    assert "wiretape: verdict PASS" in err
    verdict = json.loads(out[out.index("{"):])
    assert (verdict["exact"], verdict["recorded"], verdict["unused"]) == (2, 2, 0)


def test_serve_replay_strict_stop_rejects_and_exits(upstream, tmp_path):
    port, run = free_port(), tmp_path / "stop.wtape"
    wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{upstream.url}/v1",
                  "--port", str(port), "-o", str(run))
    try:
        wt.read_urls()
        with Conn(port) as conn:
            conn.send(post("/v1/chat/completions", {"turn": 1}))
            assert conn.reply().status == 200
        assert wt.stop(signal.SIGINT)[0] == 0
    finally:
        wt.kill()
    wt = Wiretape(tmp_path, "serve", "--replay", str(run), "--port", str(port))
    try:
        wt.read_urls()
        with Conn(port) as conn:
            conn.send(post("/v1/chat/completions", {"turn": "changed"}))
            reply = conn.reply()
        assert reply.status == 400
        assert reply.header("x-should-retry") == b"false"
        assert reply.json()["error"]["code"] == "replay_diverged"
        wt.proc.wait(timeout=15)  # a strict stop ends the server on its own
        code, _, err = wt.stop()
    finally:
        wt.kill()
    assert code == 3, err
    assert "wiretape: verdict FAIL (strict)" in err and "diverged 1" in err


def stream_times(port: int, target: str, body: bytes) -> tuple[float, list[float], Reply]:
    with Conn(port, timeout=10) as conn:
        t0 = time.monotonic()
        conn.send(request("POST", target, body, [("Content-Type", "application/json")]))
        reply = conn.reply()
    return t0, [t - t0 for t in reply.chunk_times], reply


def test_pace_recorded_keeps_gaps_pace_fast_does_not_wait(upstream, tmp_path):
    port, run = free_port(), tmp_path / "paced.wtape"
    target, body, gap = "/v1/chat/completions?frames=4&gap_ms=300", b'{"pace": 1}', 0.3
    wt = Wiretape(tmp_path, "serve", "--record", "--upstream", f"{upstream.url}/v1",
                  "--port", str(port), "-o", str(run))
    try:
        wt.read_urls()
        _, live, recorded = stream_times(port, target, body)
        assert wt.stop(signal.SIGINT)[0] == 0
    finally:
        wt.kill()
    assert len(live) == 4 and live[-1] >= 4 * gap * 0.9
    with open_run(run) as rf:
        [exchange] = rf.exchanges()
    # when each frame was read from the origin, from the start of the request
    offsets = [f.offset_ns / 1e9 for f in exchange.response.frames]
    assert len(offsets) == 4
    assert all(b - a >= gap * 0.8 for a, b in itertools.pairwise(offsets)), offsets

    def replay(pace: str) -> tuple[list[float], Reply]:
        wt = Wiretape(tmp_path, "serve", "--replay", str(run), "--pace", pace, "--port", str(port))
        try:
            wt.read_urls()
            _, times, reply = stream_times(port, target, body)
            assert wt.stop(signal.SIGTERM)[0] == 0
        finally:
            wt.kill()
        return times, reply

    paced, paced_reply = replay("recorded")
    assert paced_reply.chunks == recorded.chunks
    assert len(paced) == 4
    # never early, and late only by a margin: the recorded gaps are reproduced
    for got, want in zip(paced, offsets, strict=True):
        assert want - 0.03 <= got <= want + 0.35, (paced, offsets)
    assert paced[-1] - paced[0] >= (offsets[-1] - offsets[0]) * 0.8, (paced, offsets)

    fast, fast_reply = replay("fast")
    assert fast_reply.chunks == recorded.chunks
    assert fast[-1] < offsets[0], (fast, offsets)  # every frame before the first recorded one
