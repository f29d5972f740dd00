"""Malformed HTTP/1.1 thrown at the record proxy and the replay proxy at
once, both running in this process on a loop of their own, as
``wiretape record`` and ``wiretape replay`` wire them.

Each example is a batch of hostile connections: random request lines,
request-targets that would name another host (``@host:port/x``,
``1/x``, absolute-form), CRLF injection, Transfer-Encoding with
Content-Length, duplicate lengths, obs-fold, floods of header fields, NUL
bytes, truncated and overflowing chunks, pipelined smuggling attempts,
pieces sent one by one, connections left open. Checked after every batch:

* every connection got well-formed answers that are 4xx (or 200, 100 for
  what was in fact a valid request; 501 for a transfer coding or upgrade
  it does not do), or was closed;
* the loop's exception handler got nothing and nothing was logged;
* the origin got only origin-form requests with its own Host, each one it
  could parse, and the canary (the origin's port with one more digit)
  nothing;
* a normal request is still served by both proxies.

Bounded and derandomized: the same 200 batches every run.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.probe_origin import Probe, probe_origin
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.playback.decide import Mode, Policy
from wiretape.proxy.http1 import ConnectionLimits
from wiretape.proxy.record import Recorder
from wiretape.proxy.replay import Replayer
from wiretape.proxy.server import Listeners
from wiretape.proxy.shapes import error_response
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="test", argv=(), cwd="/",
               env_names=(), origins=(Origin("openai", "http://127.0.0.1:9/v1", 0, ()),),
               started_at_ns=1_760_000_000_000_000_000, mode="serve")
LIMITS = ConnectionLimits(head_timeout=0.3, idle_timeout=0.3, body_timeout=0.3)
EXAMPLES = 200
NORMAL_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
NORMAL = (b"POST /v1/normal HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(NORMAL_BODY) + NORMAL_BODY)
#: the same, asking the proxy to close after its answer: a recorder takes a
#: client that half-closes before the answer for one that left (the
#: upstream request is cancelled), so this one keeps its side open
NORMAL_CLOSE = NORMAL.replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nConnection: close\r\n")
REPLAYED = b'{"answer": "recorded"}'
#: statuses a hostile connection may get: 100 and 200 for what was in fact
#: a valid request, 501 for a coding or upgrade wiretape does not do
ALLOWED = {100, 200, 400, 405, 408, 413, 431, 501}
#: the two proxies are talked to at once
BOTH = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="fuzz-client")


# --- both proxies on a loop of their own ------------------------------------------------------


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Proxies:
    record_port: int
    replay_port: int
    probe: Probe
    loop_reports: list[dict[str, Any]]
    logged: _Kept
    counts: collections.Counter[str] = field(default_factory=collections.Counter)


def _tape(path: Path, copies: int) -> Path:
    """A run holding ``copies`` recordings of the normal request."""
    request = Request(b"POST", b"/v1/normal", (
        (b"Host", b"127.0.0.1"), (b"Content-Type", b"application/json"),
        (b"Content-Length", b"%d" % len(NORMAL_BODY))), NORMAL_BODY)
    response = Response(200, b"OK", ((b"Content-Type", b"application/json"),
                                     (b"Content-Length", b"%d" % len(REPLAYED))),
                        (Frame(1000, REPLAYED),))
    run = RunFile.create(path, INFO)
    for seq in range(copies):
        run.write_exchange(Exchange(seq, 1, "openai", INFO.started_at_ns, request, response,
                                    Ending.COMPLETE, 500, 2000))
    run.close()
    return path


@pytest.fixture(scope="module")
def proxies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxies]:
    folder = tmp_path_factory.mktemp("fuzz")
    tape = _tape(folder / "tape.wtape", EXAMPLES * 2 + 50)
    logged = _Kept()
    logger = logging.getLogger("wiretape")
    logger.addHandler(logged)
    holder: list[Proxies] = []
    ready = threading.Event()
    failure: list[BaseException] = []
    stop: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        reports: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reports.append(context))
        stopping = asyncio.Event()
        stop.append((loop, stopping))
        async with probe_origin() as probe:
            recorded = RunFile.create(folder / "recorded.wtape", INFO)
            recorder = Recorder(recorded)
            replayed = open_run(tape)
            replayed.prepare_for_writes()
            replayer = Replayer(replayed, replayed.exchanges(), Policy(mode=Mode.DIAGNOSTIC))
            replayed.start_replay(replayer.replay_id, "diagnostic", {})
            record_side, replay_side = Listeners(limits=LIMITS), Listeners(limits=LIMITS)
            try:
                record_port = await record_side.listen(
                    0, lambda cid: recorder.handler("openai", probe.url + "/v1", cid))
                replay_port = await replay_side.listen(
                    0, lambda cid: replayer.handler("openai", cid),
                    lambda status, code, message: error_response(b"/v1", status, code, message))
                holder.append(Proxies(record_port, replay_port, probe, reports, logged))
                ready.set()
                await stopping.wait()
            finally:
                await record_side.close(grace=1.0)
                await replay_side.close(grace=1.0)
                await replayer.finish()
                await recorder.aclose()
                recorded.close()
                replayed.close()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="fuzzed-proxies", daemon=True)
    thread.start()
    ready.wait(30)
    try:
        assert holder, f"the proxies did not start: {failure}"
        yield holder[0]
    finally:
        if stop:
            loop, stopping = stop[0]
            loop.call_soon_threadsafe(stopping.set)
        thread.join(30)
        logger.removeHandler(logged)
    assert not failure, failure
    counts = holder[0].counts
    print(f"\nfuzz: {counts['examples']} batches, {counts['connections']} connections, "
          f"answers {dict(sorted((k, v) for k, v in counts.items() if k.isdigit()))}, "
          f"closed unanswered {counts['closed']}, origin got {len(holder[0].probe.seen)} "
          f"requests, canary {holder[0].probe.canary_hits}")


# --- talking to them --------------------------------------------------------------------------


def talk(port: int, pieces: list[bytes], *, shut: bool) -> bytes:
    """Send ``pieces`` (a short pause between them), half-close when
    ``shut``, and read until the proxy closes; fails when it neither closes
    nor answers within 5 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            for i, piece in enumerate(pieces):
                if i:
                    time.sleep(0.002)
                sock.sendall(piece)
            if shut:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused and closed before all was sent
        out = b""
        deadline = time.monotonic() + 5
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"no answer and no close in 5 s; got {out[:300]!r}") from None
            except ConnectionResetError:
                return out
            if not data:
                return out
            out += data


def responses(wire: bytes) -> list[tuple[int, bytes]]:
    """(status, body) of each HTTP/1.1 response in ``wire``; AssertionError
    when it holds anything else. The last one may be cut off by a reset."""
    out: list[tuple[int, bytes]] = []
    rest = wire
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        assert sep, f"an incomplete response head: {head[:300]!r}"
        lines = head.split(b"\r\n")
        version, status, _reason = [*lines[0].split(b" ", 2), b""][:3]
        assert version == b"HTTP/1.1" and status.isdigit(), f"not a status line: {lines[0]!r}"
        fields = {k.strip().lower(): v.strip()
                  for k, _, v in (line.partition(b":") for line in lines[1:])}
        code = int(status)
        body = b""
        if code >= 200 and code not in (204, 304):
            if b"content-length" in fields:
                size = int(fields[b"content-length"])
                body, rest = rest[:size], rest[size:]
            elif b"chunked" in fields.get(b"transfer-encoding", b""):
                while rest:
                    size_line, _, rest = rest.partition(b"\r\n")
                    size = int(size_line.split(b";")[0], 16)
                    body, rest = body + rest[:size], rest[size + 2:]
                    if size == 0:
                        break
            else:
                body, rest = rest, b""
        out.append((code, body))
    return out


def check_answers(proxies: Proxies, sent: bytes, wire: bytes) -> None:
    proxies.counts["connections"] += 1
    if not wire:
        proxies.counts["closed"] += 1
        return
    if sent.startswith(b"PRI ") and not wire.startswith(b"HTTP/"):
        assert wire[3] == 0x4  # HTTP/2 SETTINGS (the preface is served as HTTP/2)
        proxies.counts["h2"] += 1
        return
    for code, body in responses(wire):
        proxies.counts[str(code)] += 1
        assert code in ALLOWED, f"{code} {body[:300]!r} for {sent[:300]!r}"
        if code >= 400:
            assert b"wiretape" in body, body[:300]


def check_origin(probe: Probe) -> None:
    assert probe.canary_hits == 0
    assert probe.broken == []
    host = f"127.0.0.1:{probe.port}".encode()
    for seen in probe.seen:
        assert seen.target.startswith(b"/") and b"#" not in seen.target, seen
        assert seen.header(b"host") == [host], seen
        assert len(seen.header(b"content-length")) <= 1 and not seen.header(b"transfer-encoding")


# --- hostile requests -------------------------------------------------------------------------

TARGETS = [
    "@127.0.0.1:{canary}/x", "{digit}/x", "{digit}", ":{canary}/x", "//x",
    "//127.0.0.1:{canary}/x", "http://127.0.0.1:{canary}/x", "https://api.openai.com/v1/x",
    "*", "x", "/v1/x#@127.0.0.1:{canary}", "/v1/x\r\nHost: 127.0.0.1:{canary}", "/v1/x\x00y",
    "/v1/x y", "", ".127.0.0.1:{canary}", "/v1/chat/completions", "/v1/x?a=@127.0.0.1:{canary}",
    "/%2e%2e/x", "/\\127.0.0.1:{canary}", "127.0.0.1:{canary}", "/v1/x\ty",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "CONNECT", "PATCH", "G ET", "", "GET\x00",
           "POST /v1/x HTTP/1.1\r\nX:"]
VERSIONS = ["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9.9", "http/1.1", "",
            "HTTP/1.1 x"]
HEADERS = [
    ("Host", "127.0.0.1"), ("Host", "127.0.0.1:{canary}"), ("Host", ""),
    ("Content-Length", "5"), ("Content-Length", "0"), ("Content-Length", "5, 6"),
    ("Content-Length", "-1"), ("Content-Length", "abc"), ("Content-Length", "99999999999999999999"),
    ("Content-Length", " 5"), ("Transfer-Encoding", "chunked"),
    ("Transfer-Encoding", "gzip, chunked"),
    ("Transfer-Encoding", "chunked, identity"), ("Transfer-Encoding", "CHUNKED"),
    ("Transfer-Encoding", " chunked"), ("X-Fold", "a\r\n b"), ("X-Nul", "a\x00b"),
    ("X-Inject", "a\r\nTransfer-Encoding: chunked"), ("X-Lf", "a\nContent-Length: 3"),
    ("Expect", "100-continue"), ("Connection", "close"), ("Connection", "Upgrade, Host"),
    ("Upgrade", "websocket"), ("Upgrade", "h2c"), ("Proxy-Connection", "keep-alive"),
    ("Bad Name", "x"), ("", "empty name"), ("X-Del", "\x7f"), ("X-High", "\xff\xfe"),
    ("Content-Type", "application/json"),
]
BODIES = [
    "", "hello", "5\r\nhello\r\n0\r\n\r\n", "5\r\nhe", "zz\r\nhello\r\n0\r\n\r\n",
    "ffffffffffffffffffff\r\nx\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n",
    "0\r\nX-Trailer: 1\r\nContent-Length: 99\r\n\r\n", "5;ext=\x00\r\nhello\r\n0\r\n\r\n",
    "3\r\nabc\r\n0\r\n\r\nGET /v1/smuggled HTTP/1.1\r\nHost: 127.0.0.1:{canary}\r\n\r\n",
    "GET @127.0.0.1:{canary}/x HTTP/1.1\r\nHost: a\r\n\r\n",
]

_chars = st.sampled_from([*"/@:?#%.x1 \r\n\x00\t\\", "{digit}", "{canary}"])


@st.composite
def hostile_request(draw: st.DrawFn) -> str:
    """One request as text (``{canary}``, ``{digit}`` filled in later)."""
    if draw(st.integers(0, 19)) == 0:  # raw bytes, as text
        return draw(st.binary(max_size=120)).decode("latin-1")
    method = draw(st.sampled_from(METHODS))
    target = draw(st.one_of(st.sampled_from(TARGETS), st.lists(_chars, max_size=12).map("".join)))
    version = draw(st.sampled_from(VERSIONS))
    eol = draw(st.sampled_from(["\r\n"] * 6 + ["\n", "\r"]))
    fields = draw(st.lists(st.sampled_from(HEADERS), max_size=6))
    if draw(st.booleans()):  # most servers refuse a request without Host first
        fields.insert(0, ("Host", "127.0.0.1"))
    if draw(st.integers(0, 9)) == 0:  # a flood of header fields, on a line that parses
        method, target, version = "POST", "/v1/flood", "HTTP/1.1"
        fields += [(f"X-F{i}", "v") for i in range(draw(st.sampled_from([1500, 20_000, 990])))]
    lines = [f"{method} {target} {version}".rstrip(" ") if version else f"{method} {target}"]
    lines += [f"{k}: {v}" for k, v in fields]
    return eol.join(lines) + eol + eol + draw(st.sampled_from(BODIES))


@st.composite
def hostile_connection(draw: st.DrawFn) -> tuple[str, int, bool]:
    """(what is sent, in how many pieces, whether the write side is shut)."""
    text = "".join(draw(st.lists(hostile_request(), min_size=1, max_size=3)))
    return text, draw(st.sampled_from([1, 1, 1, 2, 7])), draw(st.integers(0, 9)) > 0


def pieces_of(data: bytes, count: int) -> list[bytes]:
    step = max(len(data) // count, 1)
    return [data[i:i + step] for i in range(0, len(data), step)] or [b""]


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.large_base_example])
@given(batch=st.lists(hostile_connection(), min_size=1, max_size=3))
def test_hostile_http_is_answered_or_closed_and_never_relayed_elsewhere(
        proxies: Proxies, batch: list[tuple[str, int, bool]]) -> None:
    probe = proxies.probe
    proxies.counts["examples"] += 1
    for text, count, shut in batch:
        data = text.replace("{canary}", str(probe.canary_port)).replace(
            "{digit}", probe.digit).encode("latin-1")
        both = [BOTH.submit(talk, port, pieces_of(data, count), shut=shut)
                for port in (proxies.record_port, proxies.replay_port)]
        for answer in both:
            check_answers(proxies, data, answer.result())
    check_origin(probe)
    assert proxies.loop_reports == []
    assert [r.getMessage() for r in proxies.logged.records] == []
    # and a normal request is still served by both
    before = len(probe.seen)
    assert responses(talk(proxies.record_port, [NORMAL_CLOSE], shut=False)) == [(200, b"ok")]
    assert probe.seen[before].target == b"/v1/normal"
    assert responses(talk(proxies.replay_port, [NORMAL], shut=True)) == [(200, REPLAYED)]
