"""A raw HTTP/1.1 upstream that plays recorded responses byte for byte.

It stands in for a model provider in tests. It listens on 127.0.0.1 on an
ephemeral port, reads each request (head, then body by Content-Length or
chunked), keeps the raw bytes it received, and answers with a scripted reply:

* a case directory (``cases/Bxx``): ``response.raw``'s head, then each HTTP
  chunk of ``chunks.json`` as its exact wire slice (chunk-size line, data,
  trailing CRLF) after its ``delay_ms_before`` (times ``time_scale``), each
  written and drained on its own; then the terminating chunk if
  ``terminated``. A chunk whose ``declared_size`` exceeds ``data_len`` is
  written partially and the connection is then closed (an upstream dying
  mid-stream). Responses without ``chunks.json`` are written whole. Several
  exchanges (``request.http`` -> ``response.raw``, ``request.2.http`` ->
  ``response.2.raw``) are served in order, over keep-alive or new
  connections.
* a corpus fixture (``fixtures/corpus/<case>``): a valid HTTP/1.1 response
  built from ``response_headers.json`` (status, reason, ordered headers) and
  ``response_body.bin``. A chunked body is sent one SSE event per chunk
  (split at blank lines; a gzip body is split after each deflate sync-flush
  marker ``00 00 ff ff``), with a small delay between chunks; any other body
  is sent whole with a Content-Length equal to its real length.

Every write is timestamped with ``time.monotonic_ns()`` (a system-wide
clock on Linux, so comparable with timestamps taken in other processes),
which lets a test measure that a proxy in between did not buffer.

Use it as a context manager; it runs its own event loop in a thread::

    with RawUpstream(case_replies(case_dir)) as up:
        ...  # point a client at up.url
    up.requests       # raw request bytes, in arrival order
    up.served[0].writes  # WriteRecord per write, with t_ns
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Self

__all__ = [
    "HttpMessage",
    "RawUpstream",
    "ReceivedRequest",
    "Reply",
    "ServedExchange",
    "Write",
    "WriteRecord",
    "case_replies",
    "cases_dir",
    "corpus_dir",
    "data_dir",
    "dechunk",
    "fixture_reply",
    "parse_http_message",
    "split_gzip_flushes",
    "split_sse_events",
]


# ---------------------------------------------------------------- locations


def data_dir() -> Path:
    """The test data kept in the repository: ``tests/data`` (see its README)."""
    return Path(__file__).resolve().parents[1] / "data"


def cases_dir() -> Path:
    return data_dir() / "cases"


def corpus_dir() -> Path:
    return data_dir() / "fixtures" / "corpus"


# ------------------------------------------------------------ HTTP parsing


@dataclass(frozen=True)
class HttpMessage:
    """A parsed HTTP/1.1 message (request or response) from raw bytes."""

    start_line: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    head: bytes  # start line + headers + the blank line
    body: bytes  # de-chunked when the message is chunked
    wire_body: bytes  # the body bytes exactly as on the wire
    chunked: bool

    def header(self, name: bytes) -> bytes | None:
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return None

    @property
    def method(self) -> bytes:
        return self.start_line.split(b" ", 2)[0]

    @property
    def target(self) -> bytes:
        return self.start_line.split(b" ", 2)[1]

    @property
    def status(self) -> int:
        return int(self.start_line.split(b" ", 2)[1])

    @property
    def reason(self) -> bytes:
        parts = self.start_line.split(b" ", 2)
        return parts[2] if len(parts) > 2 else b""


def _parse_head(head: bytes) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    lines = head.split(b"\r\n")
    start = lines[0]
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        headers.append((name, value.strip(b" \t")))
    return start, tuple(headers)


def dechunk(wire: bytes, *, allow_truncated: bool = False) -> tuple[bytes, list[bytes], bool]:
    """Decode a chunked body: (payload, chunk payloads, terminated)."""
    pos = 0
    chunks: list[bytes] = []
    while True:
        eol = wire.find(b"\r\n", pos)
        if eol < 0:
            if allow_truncated:
                return b"".join(chunks), chunks, False
            raise ValueError(f"chunk-size line not terminated at {pos}")
        size = int(wire[pos:eol].split(b";", 1)[0].strip(), 16)
        start = eol + 2
        if size == 0:
            return b"".join(chunks), chunks, True
        data = wire[start : start + size]
        if len(data) < size or wire[start + size : start + size + 2] != b"\r\n":
            if allow_truncated:
                if data:
                    chunks.append(data)
                return b"".join(chunks), chunks, False
            raise ValueError(f"chunk at {pos} is truncated")
        chunks.append(data)
        pos = start + size + 2


def parse_http_message(raw: bytes, *, allow_truncated: bool = False) -> HttpMessage:
    """Parse raw bytes of one HTTP/1.1 message (as in request.http / response.raw)."""
    end = raw.find(b"\r\n\r\n")
    if end < 0:
        raise ValueError("no end of head")
    head = raw[: end + 4]
    start, headers = _parse_head(raw[:end])
    rest = raw[end + 4 :]
    msg = HttpMessage(start, headers, head, b"", b"", False)
    te = msg.header(b"transfer-encoding")
    if te is not None and b"chunked" in te.lower():
        payload, _, _ = dechunk(rest, allow_truncated=allow_truncated)
        return HttpMessage(start, headers, head, payload, rest, True)
    cl = msg.header(b"content-length")
    if cl is not None:
        n = int(cl)
        body = rest[:n]
        if len(body) != n and not allow_truncated:
            raise ValueError(f"body has {len(body)} bytes, Content-Length says {n}")
        return HttpMessage(start, headers, head, body, body, False)
    return HttpMessage(start, headers, head, rest, rest, False)


# ------------------------------------------------------------------ scripts


@dataclass(frozen=True)
class Write:
    """One write of a reply: ``data`` goes out ``at_s`` seconds after the
    request was fully received. ``payload`` is the de-chunked body data it
    carries (empty for the head and the terminator)."""

    at_s: float
    data: bytes
    kind: str  # head | chunk | partial-chunk | terminator | whole (head and body)
    payload: bytes = b""


@dataclass(frozen=True)
class Reply:
    """A scripted response. ``end``: ``keep`` (keep-alive), ``close``
    (close after the response), ``truncate`` (close mid-body)."""

    name: str
    writes: tuple[Write, ...]
    end: str = "keep"
    status: int = 0
    headers: tuple[tuple[bytes, bytes], ...] = ()
    expected_request: bytes | None = None  # raw request.http, if any

    @property
    def payload(self) -> bytes:
        return b"".join(w.payload for w in self.writes)

    @property
    def chunk_payloads(self) -> list[bytes]:
        return [w.payload for w in self.writes if w.kind in ("chunk", "partial-chunk")]

    @property
    def chunk_times_s(self) -> list[float]:
        """Scheduled time of each chunk write, from the end of the request."""
        return [w.at_s for w in self.writes if w.kind in ("chunk", "partial-chunk")]

    @property
    def wire(self) -> bytes:
        return b"".join(w.data for w in self.writes)


def _response_files(case: Path) -> list[tuple[Path | None, Path, Path | None]]:
    """(request file, response file, chunks file) per exchange of a case."""
    out = []
    i = 1
    while True:
        suffix = "" if i == 1 else f".{i}"
        resp = case / f"response{suffix}.raw"
        if not resp.exists():
            break
        req = case / f"request{suffix}.http"
        chunks = case / f"chunks{suffix}.json"
        out.append((req if req.exists() else None, resp, chunks if chunks.exists() else None))
        i += 1
    return out


def _connection_close(headers) -> bool:
    return any(k.lower() == b"connection" and b"close" in v.lower() for k, v in headers)


def _case_reply(name: str, req: Path | None, resp: Path, chunks_file: Path | None,
                time_scale: float) -> Reply:
    raw = resp.read_bytes()
    msg = parse_http_message(raw, allow_truncated=True)
    expected = req.read_bytes() if req else None
    if chunks_file is None:
        end = "close" if _connection_close(msg.headers) else "keep"
        writes = (Write(0.0, raw, "whole", msg.body),)  # head and body in one write
        return Reply(name, writes, end, msg.status, msg.headers, expected)

    plan = json.loads(chunks_file.read_text())
    head_end = plan["headers_end_offset"]
    if raw[head_end - 4 : head_end] != b"\r\n\r\n":
        raise ValueError(f"{resp}: headers_end_offset {head_end} is not after the blank line")
    writes = [Write(0.0, raw[:head_end], "head")]
    pos = head_end
    t = 0.0
    truncated = False
    for c in plan["chunks"]:
        t += c["delay_ms_before"] / 1000.0 * time_scale
        off, n = c["data_offset"], c["data_len"]
        size_line = raw[pos:off]
        if not size_line.endswith(b"\r\n"):
            raise ValueError(f"{resp}: chunk {c['index']} has no size line at {pos}")
        declared = int(size_line[:-2].split(b";", 1)[0], 16)
        if declared != c.get("declared_size", n):
            raise ValueError(f"{resp}: chunk {c['index']} declares {declared}, plan says {c}")
        if declared > n:  # the upstream dies inside this chunk
            writes.append(Write(t, raw[pos : off + n], "partial-chunk", raw[off : off + n]))
            pos = off + n
            truncated = True
            break
        if raw[off + n : off + n + 2] != b"\r\n":
            raise ValueError(f"{resp}: chunk {c['index']} has no trailing CRLF")
        writes.append(Write(t, raw[pos : off + n + 2], "chunk", raw[off : off + n]))
        pos = off + n + 2
    if plan.get("terminated", True) and not truncated:
        rest = raw[pos:]
        if not rest.startswith(b"0\r\n"):
            raise ValueError(f"{resp}: no terminating chunk at {pos}")
        writes.append(Write(t, rest, "terminator"))
        pos = len(raw)
    if pos != len(raw):
        raise ValueError(f"{resp}: {len(raw) - pos} bytes after the last planned write")
    end = "truncate" if not plan.get("terminated", True) else (
        "close" if _connection_close(msg.headers) else "keep")
    return Reply(name, tuple(writes), end, msg.status, msg.headers, expected)


def case_replies(case_dir: str | os.PathLike, time_scale: float = 1.0) -> list[Reply]:
    """The scripted replies of a case directory, in exchange order."""
    case = Path(case_dir)
    out = []
    for i, (req, resp, chunks) in enumerate(_response_files(case)):
        out.append(_case_reply(f"{case.name}#{i}", req, resp, chunks, time_scale))
    if not out:
        raise FileNotFoundError(f"{case}: no response.raw")
    return out


_BLANK_LINE = re.compile(rb"(?:\r\n|\r|\n)(?:\r\n|\r|\n)")


def split_sse_events(body: bytes) -> list[bytes]:
    """Split an event-stream body after each blank line (the end of an SSE
    block). Works for LF, CRLF and CR line ends. Never returns empty pieces."""
    pieces: list[bytes] = []
    start = 0
    lines = body.splitlines(keepends=True)
    pos = 0
    in_block = False
    for line in lines:
        pos += len(line)
        if line.strip(b"\r\n") == b"":
            if in_block:
                pieces.append(body[start:pos])
                start = pos
                in_block = False
        else:
            in_block = True
    if start < len(body):
        if pieces and not body[start:].strip(b"\r\n"):
            pieces[-1] += body[start:]
        else:
            pieces.append(body[start:])
    return [p for p in pieces if p]


def split_gzip_flushes(body: bytes) -> list[bytes]:
    """Split a gzip body after each deflate sync-flush marker (00 00 ff ff)."""
    pieces = []
    start = 0
    while True:
        i = body.find(b"\x00\x00\xff\xff", start)
        if i < 0:
            break
        pieces.append(body[start : i + 4])
        start = i + 4
    if start < len(body):
        pieces.append(body[start:])
    return [p for p in pieces if p]


def fixture_reply(fixture_dir: str | os.PathLike, gap_ms: float = 15.0) -> Reply:
    """A valid HTTP/1.1 reply built from a corpus fixture.

    The recorded status, reason and header order/case are kept. If the
    headers say ``Transfer-Encoding: chunked`` the body goes out chunked (one
    chunk per SSE event, or per gzip flush) and any Content-Length is dropped
    (the pair is invalid on HTTP/1.1); otherwise Content-Length is set to the
    real body length (in place, or appended if absent).
    """
    fx = Path(fixture_dir)
    meta = json.loads((fx / "response_headers.json").read_text())
    body = (fx / "response_body.bin").read_bytes()
    status = int(meta["status"])
    reason = meta.get("reason")
    if not reason:
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]]
    lower = [k.lower() for k, _ in headers]
    chunked = any(k.lower() == b"transfer-encoding" and b"chunked" in v.lower() for k, v in headers)
    encoding = next((v.lower() for k, v in headers if k.lower() == b"content-encoding"), b"")
    if chunked:
        headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    else:
        headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
        if b"content-length" in lower:
            seen = False
            fixed = []
            for k, v in headers:
                if k.lower() == b"content-length":
                    if seen:
                        continue
                    seen = True
                    v = str(len(body)).encode()
                fixed.append((k, v))
            headers = fixed
        else:
            headers.append((b"Content-Length", str(len(body)).encode()))
    head = f"HTTP/1.1 {status} {reason}\r\n".encode("latin-1")
    head += b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
    writes = [Write(0.0, head, "head")]
    if chunked:
        if b"gzip" in encoding:
            pieces = split_gzip_flushes(body)
        elif encoding and encoding != b"identity":
            pieces = [body] if body else []
        else:
            pieces = split_sse_events(body)
        t = 0.0
        for p in pieces:
            t += gap_ms / 1000.0
            writes.append(Write(t, b"%x\r\n" % len(p) + p + b"\r\n", "chunk", p))
        writes.append(Write(t, b"0\r\n\r\n", "terminator"))
    else:
        writes = [Write(0.0, head + body, "whole", body)]  # head and body in one write
    end = "close" if _connection_close(headers) else "keep"
    return Reply(fx.name, tuple(writes), end, status, tuple(headers), None)


# ------------------------------------------------------------------- server


@dataclass
class ReceivedRequest:
    raw: bytes
    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    connection: int
    t_start_ns: int  # first byte of the head
    t_end_ns: int  # last byte of the body


@dataclass
class WriteRecord:
    index: int
    kind: str
    nbytes: int
    payload_start: int  # offset of this write's payload in the de-chunked body
    payload_end: int
    t_ns: int  # monotonic, just before the write
    t_drained_ns: int  # monotonic, after drain()


@dataclass
class ServedExchange:
    reply: Reply
    request: ReceivedRequest
    writes: list[WriteRecord] = field(default_factory=list)
    ended: str = ""  # complete | truncated | client-gone

    def chunk_writes(self) -> list[WriteRecord]:
        return [w for w in self.writes if w.kind in ("chunk", "partial-chunk")]


class RawUpstream:
    """Serve ``replies`` in order, one per request, over any number of
    connections. A request after the last reply gets a 599 with
    ``Connection: close`` (and is counted in ``.requests``).

    ``port=0`` picks an ephemeral port; a fixed port lets a test put a
    sentinel (``RawUpstream([], port=old.port)``) where the upstream was,
    to prove that nothing reaches it. ``abort``: how a truncated reply ends,
    ``fin`` (orderly close mid-body: the client sees EOF inside a chunk) or
    ``rst`` (TCP reset).
    """

    def __init__(self, replies: list[Reply] | Reply, *, repeat: bool = False,
                 abort: str = "fin", port: int = 0) -> None:
        self.replies = [replies] if isinstance(replies, Reply) else list(replies)
        self.repeat = repeat
        self.abort = abort  # fin: orderly close mid-body; rst: send a TCP reset
        self.received: list[ReceivedRequest] = []
        self.served: list[ServedExchange] = []
        self.connections = 0
        self.errors: list[str] = []
        self.port = port
        self._next = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    # -- public view

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[bytes]:
        return [r.raw for r in self.received]

    def chunk_write_ns(self, exchange: int = 0) -> list[int]:
        return [w.t_ns for w in self.served[exchange].chunk_writes()]

    # -- lifecycle

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="raw-upstream", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("raw upstream did not start")
        if self._startup_error:
            raise self._startup_error
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            with contextlib.suppress(Exception):  # best effort
                fut.result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_served(self, n: int, timeout: float = 10.0) -> bool:
        """Wait until ``n`` replies have been fully written (or cut off)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(1 for s in self.served if s.ended) >= n:
                return True
            time.sleep(0.01)
        return False

    # -- loop thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self.port, limit=1 << 22))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:
            self._startup_error = e
            loop.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        conn = self.connections
        try:
            while True:
                req = await self._read_request(reader, writer, conn)
                if req is None:
                    break
                self.received.append(req)
                reply = self._pick()
                if reply is None:
                    body = b'{"error":{"message":"raw upstream: no scripted reply left"}}'
                    writer.write(b"HTTP/1.1 599 No Scripted Reply\r\n"
                                 b"Content-Type: application/json\r\nConnection: close\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    break
                ex = ServedExchange(reply, req)
                self.served.append(ex)
                keep = await self._play(reply, ex, writer, req.t_end_ns)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception as e:
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    def _pick(self) -> Reply | None:
        if self._next < len(self.replies):
            r = self.replies[self._next]
            self._next += 1
            return r
        if self.repeat and self.replies:
            return self.replies[-1]
        return None

    async def _read_request(self, reader, writer, conn) -> ReceivedRequest | None:
        try:
            first = await reader.read(1)
        except ConnectionError:
            return None
        if not first:
            return None
        t0 = time.monotonic_ns()
        head = first + await reader.readuntil(b"\r\n\r\n")
        start, headers = _parse_head(head[:-4])
        method, target = start.split(b" ", 2)[:2]
        msg = HttpMessage(start, headers, head, b"", b"", False)
        raw = bytearray(head)
        body = bytearray()
        if (msg.header(b"expect") or b"").lower() == b"100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        te = msg.header(b"transfer-encoding")
        if te is not None and b"chunked" in te.lower():
            while True:
                line = await reader.readuntil(b"\r\n")
                raw += line
                size = int(line[:-2].split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:  # trailers, then the final blank line
                        t = await reader.readuntil(b"\r\n")
                        raw += t
                        if t == b"\r\n":
                            break
                    break
                data = await reader.readexactly(size + 2)
                raw += data
                body += data[:-2]
        else:
            n = int(msg.header(b"content-length") or b"0")
            if n:
                data = await reader.readexactly(n)
                raw += data
                body += data
        return ReceivedRequest(bytes(raw), method, target, headers, bytes(body), conn,
                               t0, time.monotonic_ns())

    async def _play(self, reply: Reply, ex: ServedExchange, writer, t_req_ns: int) -> bool:
        loop_pos = 0
        for i, w in enumerate(reply.writes):
            due = t_req_ns + int(w.at_s * 1e9)
            now = time.monotonic_ns()
            if due > now:
                await asyncio.sleep((due - now) / 1e9)
            t = time.monotonic_ns()
            try:
                writer.write(w.data)
                await writer.drain()
            except ConnectionError:
                ex.ended = "client-gone"
                return False
            ex.writes.append(WriteRecord(i, w.kind, len(w.data), loop_pos,
                                         loop_pos + len(w.payload), t, time.monotonic_ns()))
            loop_pos += len(w.payload)
        if reply.end == "truncate":
            ex.ended = "truncated"
            if self.abort == "rst":
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            else:
                writer.close()
            return False
        ex.ended = "complete"
        return reply.end == "keep"
