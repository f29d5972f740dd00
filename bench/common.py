"""What the bench scripts share: a raw HTTP/1.1 upstream in a process of its
own, ``wiretape serve`` processes (started, their URL read, stopped),
agent-shaped session bodies, and percentiles.

The upstream (``upstream()``) answers, on 127.0.0.1:

- ``POST .../small``: a small chat completion (``SMALL_ANSWER``);
- ``POST .../chat/completions``: the session's next tool call
  (``completion(n)``, n the tool results the request holds);
- ``POST .../stream`` (body ``n,gap_ms``): n SSE frames gap_ms apart, each
  holding its monotonic send time (ns) as ``"t":NS}``;
- ``POST .../big`` (body ``bytes``): that many bytes of 64 KiB SSE frames,
  as fast as the reader takes them;

or, started with a fixed ``answer``, that answer (JSON) to every request
but the streams. Request bodies are read whole (Content-Length or chunked).

The floor (``relay(url)``): a bare asyncio TCP relay in a process of its
own, each client connection piped byte for byte, by protocol callbacks, to
a connection of its own to the upstream (no HTTP parsed, nothing stored):
the least any asyncio proxy in Python adds, measured beside wiretape. The
HTTP floor (``relay(url, http=True)``): the same, with both sides read and
written by h11, every event passed on as it arrives, nothing stored: the
least a Python proxy that parses HTTP/1.1 with h11 adds.

Imported by the scripts beside it (``python bench/NAME.py`` puts ``bench``
first on ``sys.path``); run as ``python bench/common.py --upstream PORT_FILE
[--answer FILE]`` it is the upstream's process, as ``python bench/common.py
--relay PORT_FILE --to HOST:PORT [--http]`` the relay's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11

HERE = Path(__file__).resolve().parent
KIB = 1024
MIB = 1024 * 1024
MODEL = "gpt-4.1-2025-04-14"

# ---------------------------------------------------------------- the traffic

SMALL_REQUEST = b'{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"ping"}]}'
SMALL_ANSWER = (b'{"id":"chatcmpl-small","object":"chat.completion","created":1700000000,'
                b'"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant",'
                b'"content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,'
                b'"completion_tokens":1,"total_tokens":9}}')

WORDS = [
    "the", "file", "module", "function", "value", "return", "config", "request", "response",
    "parse", "token", "stream", "buffer", "index", "cache", "handler", "client", "server",
    "error", "retry", "timeout", "session", "record", "replay", "frame", "header", "body",
    "length", "offset", "commit", "store", "blob", "agent", "tool", "call", "result",
    "message", "content", "system", "user", "assistant", "schema", "path",
    "naïve", "café", "façade", "résumé", "größe", "数据", "函数", "ошибка",
]

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": name, "description": desc, "strict": False,
        "parameters": {"type": "object", "additionalProperties": False,
                       "required": list(props), "properties": {
                           p: {"type": t, "description": f"The {p.replace('_', ' ')} to use."}
                           for p, t in props.items()}}}}
    for name, desc, props in [
        ("read_file", "Read a file of the workspace and return its text, with line numbers.",
         {"path": "string", "offset": "integer", "limit": "integer"}),
        ("write_file", "Write text to a file of the workspace, replacing it.",
         {"path": "string", "content": "string"}),
        ("edit_file", "Replace one exact occurrence of old_string by new_string in a file.",
         {"path": "string", "old_string": "string", "new_string": "string"}),
        ("list_dir", "List a folder of the workspace (names, kinds, sizes).",
         {"path": "string", "depth": "integer"}),
        ("grep", "Search files for a regular expression; return matching lines.",
         {"pattern": "string", "path": "string", "glob": "string"}),
        ("glob", "Find files whose path matches a glob pattern.", {"pattern": "string"}),
        ("run_shell", "Run a shell command in the workspace; return its output and status.",
         {"command": "string", "timeout_ms": "integer"}),
        ("web_fetch", "Fetch a URL and return its text.", {"url": "string", "prompt": "string"}),
        ("todo_write", "Replace the task list shown to the user.", {"todos": "string"}),
        ("git_diff", "Show the working tree's diff against HEAD.", {"path": "string"}),
    ]]

SYSTEM = ("You are a coding agent working in the user's repository. Use the tools to read, "
          "search and edit files and to run commands; never guess a file's content. "
          "Keep answers short. Before editing, read the file. After editing, run the tests. "
          ) * 8

TOOL_NAMES = ["read_file", "grep", "run_shell", "read_file", "list_dir", "edit_file"]


def assistant_message(n: int) -> dict[str, Any]:
    """The model's n-th answer in a session: one tool call (same in every session)."""
    name = TOOL_NAMES[n % len(TOOL_NAMES)]
    args = {"read_file": {"path": f"src/pkg/module_{n:03d}.py"},
            "grep": {"pattern": f"def handle_{n}", "path": "src"},
            "run_shell": {"command": f"python -m pytest -q tests/test_module_{n:03d}.py"},
            "list_dir": {"path": f"src/pkg/sub_{n:03d}", "depth": 2},
            "edit_file": {"path": f"src/pkg/module_{n:03d}.py", "old_string": "return None",
                          "new_string": "return value"}}[name]
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n:03d}_bench", "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}]}


def completion(n: int) -> bytes:
    """The upstream's answer (JSON bytes) to the session request holding n tool results."""
    message = {**assistant_message(n + 1), "refusal": None, "annotations": []}
    return compact({"id": f"chatcmpl-bench-{n:03d}", "object": "chat.completion",
                    "created": 1700000000 + n, "model": MODEL,
                    "choices": [{"index": 0, "message": message, "logprobs": None,
                                 "finish_reason": "tool_calls"}],
                    "usage": {"prompt_tokens": 1000 + 700 * n, "completion_tokens": 24,
                              "total_tokens": 1024 + 700 * n},
                    "system_fingerprint": "fp_bench"})


def compact(value: Any) -> bytes:
    """JSON as the openai SDK (httpx) sends it: compact, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def tool_output(rng: random.Random, size: int) -> str:
    """About ``size`` bytes (once JSON-encoded) of source-like text."""
    lines: list[str] = []
    total = 0
    while total < size:
        w = rng.choices(WORDS, k=6)
        kind = rng.random()
        if kind < 0.3:
            line = f"{rng.randrange(1, 9999):>5}\tdef {w[0]}_{w[1]}({w[2]}, {w[3]}=None):"
        elif kind < 0.6:
            line = (f"{rng.randrange(1, 9999):>5}\t    return {w[0]}.{w[1]}({w[2]})"
                    f" + {rng.random():.6f}")
        elif kind < 0.8:
            line = f'{rng.randrange(1, 9999):>5}\t    # {" ".join(w)} "{w[0]}"'
        else:
            line = f"tests/test_{w[0]}.py::test_{w[1]}_{w[2]} PASSED [{rng.randrange(100)}%]"
        lines.append(line)
        total += len(json.dumps(line, ensure_ascii=False).encode()) - 2 + 2
    return "\n".join(lines)


def session(turns: int, first: int, last: int, seed: int) -> list[bytes]:
    """Request bodies (OpenAI chat JSON) of one agent session: turn t resends
    the whole conversation (t tool calls and their results) and the tool
    list; sizes grow geometrically from ``first`` to ``last`` bytes."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    base = {"model": MODEL, "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False,
            "temperature": 0.2, "stream": False}
    bodies: list[bytes] = []
    for t in range(turns):
        target = first * (last / first) ** (t / max(1, turns - 1))
        if t == 0:
            new: dict[str, Any] = {"role": "user", "content": ""}
        else:
            messages.append(assistant_message(t))
            new = {"role": "tool", "tool_call_id": f"call_{t:03d}_bench", "content": ""}
        size = len(compact({"messages": [*messages, new], **base}))
        new["content"] = tool_output(rng, max(0, int(target) - size))
        if t == 0:
            new["content"] = "Fix the failing tests in src/pkg, then summarise.\n" + new["content"]
        messages.append(new)
        bodies.append(compact({"messages": messages, **base}))
    return bodies


# --------------------------------------------------------------- the upstream

STREAM_FRAME = (b'data: {"id":"chatcmpl-stream","object":"chat.completion.chunk",'
                b'"created":1700000000,"model":"' + MODEL.encode() + b'","choices":[{"index":0,'
                b'"delta":{"content":" token"},"finish_reason":null}],"t":%d}\n\n')


async def read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    """The body of the request whose head (bytes up to the blank line) is ``head``."""
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        out = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    m = re.search(rb"\r\ncontent-length:\s*(\d+)", lower)
    return await reader.readexactly(int(m.group(1))) if m else b""


def big_frames() -> list[bytes]:
    """Sixteen different SSE frames of 64 KiB (words, so they compress like text)."""
    rng = random.Random(7)
    frames = []
    for _ in range(16):
        text = " ".join(rng.choices(WORDS[:-7], k=12000)).encode()[: 64 * KIB - 16]
        frames.append(b"data: " + text + b"\n\n")
    return frames


async def _stream(writer: asyncio.StreamWriter, path: bytes, body: bytes,
                  frames: list[bytes]) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
    await writer.drain()
    if path.endswith(b"/stream"):
        n, gap = (int(x) for x in body.split(b","))
        for _ in range(n):
            await asyncio.sleep(gap / 1000)
            data = STREAM_FRAME % time.monotonic_ns()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
    else:
        left = int(body)
        i = 0
        while left > 0:
            data = frames[i % len(frames)][:left]
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            left -= len(data)
            i += 1
    done = b"data: [DONE]\n\n"
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


async def _serve(answer: bytes | None, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    """One connection of the upstream: requests answered in turn (keep-alive)."""
    frames = big_frames()
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            body = await read_body(reader, head)
            path = head.split(b" ", 2)[1]
            if path.endswith(b"/stream") or path.endswith(b"/big"):
                await _stream(writer, path, body, frames)
            else:
                if answer is not None:
                    out = answer
                elif path.endswith(b"/chat/completions"):
                    out = completion(body.count(b'"role":"tool"'))
                else:
                    out = SMALL_ANSWER
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(out), out))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve_upstream(port_file: Path, answer: bytes | None = None) -> None:
    """Run the upstream until killed; write its port to ``port_file``."""

    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: _serve(answer, r, w), "127.0.0.1", 0,
                                            limit=4 * MIB)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(run())


class _Pipe(asyncio.Protocol):
    """One side of the relay: what it receives goes to its peer."""

    def __init__(self) -> None:
        self.peer: _Pipe | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def serve_relay(port_file: Path, host: str, port: int) -> None:
    """Run the relay until killed; write its port to ``port_file``. Each
    client connection gets one of its own to ``host:port``; bytes are
    written on in the callback that receives them (asyncio protocols, no
    stream, no task per read): the least an asyncio proxy can do."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        dials: set[asyncio.Task[None]] = set()

        def client_side() -> _Pipe:
            client = _Pipe()

            async def dial() -> None:
                _, origin = await loop.create_connection(_Pipe, host, port)
                origin.peer, client.peer = client, origin
                for data in client.early:
                    assert origin.transport is not None
                    origin.transport.write(data)

            task = loop.create_task(dial())
            dials.add(task)
            task.add_done_callback(dials.discard)
            return client

        server = await loop.create_server(client_side, "127.0.0.1", 0)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(run())


class _HttpOrigin(asyncio.Protocol):
    """The origin's side of the HTTP relay: each response event h11 reads
    is written on to the client at once, re-framed by the client's h11."""

    def __init__(self, client: _HttpClient) -> None:
        self.client = client
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []  # what the client sent before the connection was made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(b"".join(self.early))
        self.early.clear()

    def write(self, data: bytes) -> None:
        if self.transport is None:
            self.early.append(data)
        else:
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        client = self.client
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                return
            if isinstance(event, h11.Response):
                client.write(client.h11.send(h11.Response(
                    status_code=event.status_code, headers=event.headers, reason=event.reason)))
            elif isinstance(event, h11.Data):
                client.write(client.h11.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                client.write(client.h11.send(h11.EndOfMessage()))
                self.h11.start_next_cycle()
                client.h11.start_next_cycle()
                client.pump()
                return
            else:  # (the origin closed)
                client.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _HttpClient(asyncio.Protocol):
    """The client's side of the HTTP relay: each request event h11 reads
    (head, every piece of the body, its end) is written on to the origin
    at once, re-framed by the origin's h11."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.h11 = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.origin: _HttpOrigin | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.h11.receive_data(data)
        self.pump()

    def pump(self) -> None:
        while self.h11.their_state is not h11.DONE:
            event = self.h11.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                origin = self.origin
                if origin is None:  # (the first request: the connection is made for it)
                    origin = self.origin = _HttpOrigin(self)
                    _dial(origin, self.host, self.port)
                origin.write(origin.h11.send(h11.Request(
                    method=event.method, target=event.target, headers=event.headers)))
            elif isinstance(event, h11.Data):
                assert self.origin is not None
                self.origin.write(self.origin.h11.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                assert self.origin is not None
                self.origin.write(self.origin.h11.send(h11.EndOfMessage()))
            else:  # (the client closed)
                self.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        if self.origin is not None and self.origin.transport is not None:
            self.origin.transport.close()


_DIALS: set[asyncio.Task[Any]] = set()


def _dial(origin: _HttpOrigin, host: str, port: int) -> None:
    """Connect ``origin`` to ``host:port`` (what is written meanwhile is
    sent once connected); a connection refused closes its client."""
    loop = asyncio.get_running_loop()

    def done(task: asyncio.Task[Any]) -> None:
        _DIALS.discard(task)
        if task.cancelled() or task.exception() is not None:
            origin.client.close()

    task = loop.create_task(loop.create_connection(lambda: origin, host, port))
    _DIALS.add(task)
    task.add_done_callback(done)


def serve_http_relay(port_file: Path, host: str, port: int) -> None:
    """Run the HTTP relay until killed; write its port to ``port_file``.
    Each client connection gets one of its own to ``host:port``, made at its
    first request; both are read and written by h11 (RFC 9112 framing), and
    every event is written on in the callback that receives its bytes:
    head, body pieces and end, both ways, as they arrive (the request is
    not gathered first). Nothing is stored: the least a Python proxy that
    parses HTTP/1.1 with h11 adds."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _HttpClient(host, port), "127.0.0.1", 0)
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(run())


@contextmanager
def relay(url: str, *, http: bool = False) -> Iterator[tuple[str, int]]:
    """The bare TCP relay to ``url`` (``http://HOST:PORT``) in a process of
    its own, for the ``with`` block: yields (its base URL, its pid).
    ``http``: the HTTP relay instead (``serve_http_relay``: h11 both ways,
    nothing stored)."""
    with _process(["--relay", "PORT_FILE", "--to", url.removeprefix("http://"),
                   *(["--http"] if http else [])]) as started:
        yield started


@contextmanager
def upstream(answer: bytes | None = None) -> Iterator[str]:
    """The upstream in a process of its own, for the ``with`` block: yields
    its base URL (``http://127.0.0.1:PORT``, no ``/v1``); terminated after.
    With ``answer`` (JSON bytes) every non-stream request gets it.
    Raises SystemExit if the process exits before it listens."""
    with tempfile.TemporaryDirectory(prefix="wiretape-bench-answer-") as tmp:
        argv = []
        if answer is not None:
            (Path(tmp) / "answer").write_bytes(answer)
            argv = ["--answer", str(Path(tmp) / "answer")]
        with _process(["--upstream", "PORT_FILE", *argv]) as (base, _):
            yield base


@contextmanager
def _process(args: list[str]) -> Iterator[tuple[str, int]]:
    """``python bench/common.py ARGS`` (``PORT_FILE`` in them replaced by a
    file it writes its port to) for the ``with`` block: yields
    (``http://127.0.0.1:PORT``, its pid); terminated after. Raises SystemExit if the
    process exits before it listens."""
    with tempfile.TemporaryDirectory(prefix="wiretape-bench-up-") as tmp:
        port_file = Path(tmp) / "port"
        argv = [sys.executable, __file__, *(str(port_file) if a == "PORT_FILE" else a
                                            for a in args)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        try:
            while not port_file.exists() or not port_file.read_text():
                if proc.poll() is not None:
                    raise SystemExit(f"bench: {args[0].lstrip('-')} exited {proc.returncode}")
                time.sleep(0.02)
            yield f"http://127.0.0.1:{port_file.read_text()}", proc.pid
        finally:
            proc.terminate()
            proc.wait()


# ------------------------------------------------------------- wiretape serve


@dataclass
class Proc:
    """A started server process and the base URL it serves (no ``/v1``)."""

    popen: subprocess.Popen[str]
    url: str
    out: str = ""
    err: str = ""

    def stop(self, timeout: float = 120) -> int:
        """SIGINT, then wait up to ``timeout`` s (then SIGKILL); returns the
        exit status, keeps the rest of stdout in ``out`` and stderr
        (stripped) in ``err``."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
        try:
            out, err = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            out, err = self.popen.communicate()
        self.out = out or ""
        self.err = (err or "").strip()
        return self.popen.returncode

    def rss(self) -> dict[str, int]:
        """VmRSS and VmHWM of the process, in bytes (Linux: ``/proc``)."""
        out = {}
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
        return out


def wiretape(argv: Sequence[str], *, watch: Path | None = None, watch_debug: bool = False,
             command: Sequence[str] | None = None, env: Mapping[str, str] | None = None,
             cwd: Path | None = None) -> Proc:
    """Start ``wiretape ARGV`` (a ``serve``) and read the URL it prints on
    its first line of stdout. ``command`` replaces ``python -m wiretape``;
    ``watch``: run it under ``bench/loopwatch.py`` (report to that file,
    1 ms threshold; ``watch_debug``: in asyncio's debug mode). Raises
    SystemExit if it prints no URL."""
    if watch is not None:
        cmd = [sys.executable, str(HERE / "loopwatch.py"), str(watch), "1",
               *(["--asyncio-debug"] if watch_debug else [])]
    else:
        cmd = list(command or [sys.executable, "-m", "wiretape"])
    popen = subprocess.Popen([*cmd, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True,
                             env=None if env is None else dict(env), cwd=cwd)
    assert popen.stdout is not None
    line = popen.stdout.readline()
    if ": http" not in line:
        err = popen.stderr.read() if popen.stderr else ""
        raise SystemExit(f"bench: wiretape did not start: {line!r} {err}")
    return Proc(popen, line.split(": ", 1)[1].strip().removesuffix("/v1"))


# ---------------------------------------------------------------- percentiles


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``: the nearest rank, no
    interpolation; NaN when there are none."""
    s = sorted(values)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[i]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="The bench's raw upstream (or its bare relay), until killed.")
    parser.add_argument("--upstream", metavar="PORT_FILE", type=Path)
    parser.add_argument("--answer", metavar="FILE", type=Path)
    parser.add_argument("--relay", metavar="PORT_FILE", type=Path)
    parser.add_argument("--to", metavar="HOST:PORT")
    parser.add_argument("--http", action="store_true", help="relay HTTP/1.1 through h11")
    args = parser.parse_args()
    if args.relay is not None:
        to_host, _, to_port = (args.to or "").rpartition(":")
        (serve_http_relay if args.http else serve_relay)(args.relay, to_host, int(to_port))
    elif args.upstream is not None:
        serve_upstream(args.upstream, args.answer.read_bytes() if args.answer else None)
    else:
        parser.error("give --upstream PORT_FILE or --relay PORT_FILE --to HOST:PORT")
