"""``wiretape mcp -- CMD ARGS``: a transparent stdio shim an agent starts
as its MCP server (DESIGN.md, "MCP servers").

The MCP stdio transport (MCP specification 2025-06-18, "Transports",
stdio) is one JSON-RPC message per line, UTF-8, on the server's stdin and
stdout; its stderr is logging. The shim finds the wiretape that records or
replays through ``WIRETAPE_MCP`` (``proxy.mcp``), in its own environment or,
when the agent's MCP client started it with a reduced one (the MCP Python
SDK passes only ``HOME``, ``PATH`` and a few more), in the initial
environment of the nearest process above it that has it (Linux
``/proc/PID/environ``).

- Recording: it starts the real server, relays each line both ways as it
  comes (stderr passes through untouched) and sends each one, with its
  direction and its offset from the start, to the recorder. A line that
  is not JSON (a server's banner, a stray print) is relayed and recorded
  like any other, in its place. The specification says a server must not
  write one, but the shim is no stricter than the MCP clients it sits
  between, which skip such a line and go on reading: the MCP Python SDK
  (1.30, ``mcp/client/stdio/__init__.py``, ``stdio_client``'s
  ``stdout_reader``) logs the line's validation error, hands the exception
  to the session and continues, and the session
  (``mcp/shared/session.py``, ``BaseSession._receive_loop``) passes it to
  its message handler, which by default ignores it; the TypeScript SDK's
  ``StdioClientTransport`` (``src/client/stdio.ts``,
  ``processReadBuffer``) calls ``onerror`` and reads on. The first such
  line of a session from the server is said in one line on stderr, its
  start quoted with its secrets masked. A line longer than
  ``proxy.mcp.MAX_LINE`` bytes breaks the link: the shim says so in one
  line, stops the server and exits 2.
- Replaying: the server is not started; each client line goes to the
  replayer, which answers with the recorded server lines to write.
- Outside a recording or a replay (no ``WIRETAPE_MCP`` anywhere): it says
  so in one line on stderr and runs the server in its place, unrecorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from wiretape.errors import CommandNotFound, UsageError
from wiretape.proxy import mcp

#: How many processes up the shim looks for ``WIRETAPE_MCP``.
MAX_ANCESTORS = 16


#: Commands that run the server named by their first other word.
_LAUNCHERS = frozenset({"python", "python3", "node", "npx", "uvx", "uv", "pipx", "deno", "bun",
                        "bunx", "sh", "bash", "docker", "podman", "java", "ruby", "go"})
#: Words of a launcher's command line that are not the server (``uv run``).
_VERBS = frozenset({"run", "x", "exec", "-m"})


def default_name(argv: Sequence[str]) -> str:
    """A server's name from its command: for a launcher (``python``,
    ``npx``, ``uvx``, ``node``...), the first word after it that is not an
    option; else the command itself; without folders, version or
    extension (``python -m pkg.server``: ``pkg.server``; ``npx -y
    @scope/server-files@1``: ``server-files``; ``/opt/bin/files-mcp``:
    ``files-mcp``)."""
    if not argv:
        return "server"
    word = argv[0]
    base = Path(word).name
    if base.rstrip("0123456789.") in _LAUNCHERS:
        word = next((a for a in argv[1:] if not a.startswith("-") and a not in _VERBS), word)
    name = Path(word.rstrip("/")).name
    if "@" in name[1:]:
        name = name[: name.index("@", 1)]
    for ext in (".py", ".js", ".mjs", ".cjs", ".ts", ".sh", ".jar"):
        name = name.removesuffix(ext)
    return name.lstrip("@") or "server"


def find_address(environ: dict[str, str] | None = None, pid: int | None = None) -> str | None:
    """``WIRETAPE_MCP`` from ``environ`` (default: this process's), else
    from the initial environment of the nearest ancestor that has it;
    None when there is none."""
    env = os.environ if environ is None else environ
    if env.get(mcp.VARIABLE):
        return env[mcp.VARIABLE]
    current = os.getppid() if pid is None else pid
    for _ in range(MAX_ANCESTORS):
        if current <= 1:
            return None
        try:
            raw = Path(f"/proc/{current}/environ").read_bytes()
            status = Path(f"/proc/{current}/status").read_text("utf-8", "replace")
        except OSError:
            return None
        for entry in raw.split(b"\0"):
            if entry.startswith(mcp.VARIABLE.encode() + b"="):
                return entry.split(b"=", 1)[1].decode("utf-8", "replace")
        parent = next((line.split()[1] for line in status.splitlines()
                       if line.startswith("PPid:")), "0")
        current = int(parent) if parent.isdigit() else 0
    return None


def resolve(argv: Sequence[str]) -> str:
    """The server's executable. Raises CommandNotFound."""
    if not argv:
        raise UsageError("no MCP server command: give it after --, "
                         "e.g. wiretape mcp -- python server.py")
    exe = argv[0]
    found = shutil.which(exe)
    if found is None:
        why = ("no such file" if os.sep in exe else "not found on PATH")
        raise CommandNotFound(exe, f"{why}: check the MCP server's command in the agent's "
                                   "MCP config")
    return found


def say(line: str) -> None:
    """One line on stderr (the MCP client's log of the server)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line.rstrip("\n") + "\n")
        sys.stderr.flush()


def run(argv: Sequence[str], name: str | None) -> int:
    """Run the shim; returns its exit status. Raises CommandNotFound,
    UsageError (said as one line by the caller)."""
    name = name or default_name(argv)
    address = find_address()
    if address is None:
        exe = resolve(argv)
        say(f"wiretape mcp: not under `wiretape record` or `wiretape replay` ({mcp.VARIABLE} "
            f"is not set): running MCP server {name!r} unrecorded")
        os.execv(exe, [exe, *argv[1:]])
    try:
        host, port, token = mcp.parse_address(address)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    return asyncio.run(_shim(host, port, token, name, list(argv)))


class _Stdin:
    """This process's stdin, line by line, read on a daemon thread (any
    kind of stdin; never holds the process up at its exit)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def put(line: bytes) -> None:
            with contextlib.suppress(RuntimeError):  # (the loop closed)
                loop.call_soon_threadsafe(self.queue.put_nowait, line)

        def pump() -> None:
            # Raw reads of fd 0: a thread blocked in sys.stdin's buffered
            # reader would hold its lock, and the interpreter aborts at exit.
            held = b""
            while True:
                try:
                    chunk = os.read(0, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    if held:
                        put(held)
                    put(b"")
                    return
                held += chunk
                *lines, held = held.split(b"\n")
                for line in lines:
                    put(line + b"\n")
                if len(held) > mcp.MAX_LINE:  # (no line ending in sight: pass it on)
                    put(held)
                    held = b""

        threading.Thread(target=pump, name="wiretape-mcp-stdin", daemon=True).start()


#: How many bytes of a line that is not JSON the shim's notice quotes.
QUOTED = 60


def _is_json(line: bytes) -> bool:
    """Whether a stdout line of the server is JSON (UTF-8, RFC 8259)."""
    try:
        json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _quote(line: bytes) -> str:
    """The start of a line (``QUOTED`` bytes) as a bytes literal, its
    secrets masked as the run masks them (``redaction``)."""
    from wiretape.redaction import redact_text  # (only for such a line: a shim starts fast)

    masked = redact_text(line.rstrip(b"\r\n"), "server-message")[0]
    return f"{masked[:QUOTED]!r}{'...' if len(masked) > QUOTED else ''}"


def _write_out(line: bytes) -> None:
    """One line to this process's stdout (the MCP client), flushed."""
    sys.stdout.buffer.write(line.rstrip(b"\r\n") + b"\n")
    sys.stdout.buffer.flush()


async def _shim(host: str, port: int, token: str, name: str, argv: list[str]) -> int:
    try:
        reader, writer = await asyncio.open_connection(host, port, limit=mcp.MAX_LINE)
    except OSError as exc:
        raise UsageError(f"cannot reach the wiretape at {host}:{port} "
                         f"({mcp.VARIABLE}): {exc.strerror or exc}; is its recording or "
                         "replay still running?") from None
    writer.write(mcp.encode({"hello": 1, "token": token, "name": name,
                             "command": list(argv)}))
    await writer.drain()
    try:
        answer = await mcp.read(reader)
    except mcp.LinkError as exc:
        raise UsageError(f"the wiretape at {host}:{port} answered {exc}") from None
    if answer is None or "error" in answer:
        said = answer.get("error") if answer else "it closed the connection"
        raise UsageError(f"the wiretape at {host}:{port} refused MCP server "
                         f"{name!r}: {said}")
    try:
        if answer.get("mode") == "replay":
            return await _replay(reader, writer, name)
        try:
            exe = resolve(argv)
        except (CommandNotFound, UsageError) as exc:
            writer.write(mcp.encode({"error": str(exc)}))
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
            raise
        return await _record(reader, writer, name, [exe, *argv[1:]], argv)
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()


async def _record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str,
                  argv: list[str], given: list[str]) -> int:
    """Start the server (``argv``: its executable found; ``given``: as the
    agent's config gave it) and relay its stdio, every line also sent on
    the link."""
    t0 = time.monotonic_ns()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=None, limit=mcp.MAX_LINE)
    except OSError as exc:
        raise CommandNotFound(argv[0], exc.strerror or str(exc)) from None
    assert proc.stdin is not None and proc.stdout is not None
    server_in, server_out = proc.stdin, proc.stdout

    client_done = asyncio.Event()  # (the client closed its stdin or stopped the shim)

    def stop_server() -> None:
        # The MCP client stops its server with SIGTERM: it reaches the real
        # one, whose end ends the relay (and the session is kept whole).
        client_done.set()
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_server)
    stdin = _Stdin()
    broken: list[str] = []
    warned = False  # (a line that was not JSON: said once a session)

    def note(direction: str, line: bytes) -> None:
        writer.write(mcp.encode({"dir": direction, "t": time.monotonic_ns() - t0,
                                 "line": mcp.text_of(line)}))

    async def client_to_server() -> None:
        while line := await stdin.queue.get():
            if line.strip():  # (a blank line is no message: relayed, not kept)
                note("client", line)
            try:
                server_in.write(line if line.endswith(b"\n") else line + b"\n")
                await server_in.drain()
            except (ConnectionError, OSError):
                return
        client_done.set()
        await _shut_down(proc)

    async def server_to_client() -> None:
        nonlocal warned
        while True:
            try:
                line = await server_out.readline()
            except ValueError:
                broken.append(f"a line longer than {mcp.MAX_LINE} bytes")
                return
            if not line:
                return
            if not line.strip():
                continue
            if not warned and not _is_json(line):
                warned = True
                say(f"wiretape mcp: MCP server {name!r} wrote a line that is not JSON to "
                    f"stdout: {_quote(line)}; passed on to its client as received and "
                    "recorded (the MCP stdio transport expects only JSON-RPC messages on "
                    "stdout: a server should log to stderr)")
            note("server", line)
            _write_out(line)

    relay = asyncio.create_task(client_to_server())
    await server_to_client()
    if broken:
        why = (f"MCP server {name!r} ({' '.join(given)}) wrote {broken[0]} to stdout, where "
               "the stdio transport carries only JSON-RPC messages, one per line: make it log "
               "to stderr")
        writer.write(mcp.encode({"error": why}))
        if not client_done.is_set():
            writer.write(mcp.encode({"exit": 2}))
        say(f"wiretape mcp: {why}")
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        relay.cancel()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
        return 2
    status = await proc.wait()
    status = status if status >= 0 else 128 - status
    if not client_done.is_set():
        # The server's output ended while its client still talked to it (it
        # exited or closed its stdout): a replay ends there too.
        writer.write(mcp.encode({"exit": status}))
    relay.cancel()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()
    return status


#: Seconds a server has to exit after its stdin closed, then after SIGTERM.
SHUTDOWN_GRACE = 2.0


async def _shut_down(proc: asyncio.subprocess.Process) -> None:
    """The stdio shutdown (MCP specification 2025-06-18, "Lifecycle",
    Shutdown, stdio): close the server's stdin, wait ``SHUTDOWN_GRACE``
    seconds for it to exit, then SIGTERM, then SIGKILL."""
    if proc.stdin is not None:
        with contextlib.suppress(ConnectionError, OSError):
            proc.stdin.close()
    for step in (proc.terminate, proc.kill):
        try:
            async with asyncio.timeout(SHUTDOWN_GRACE):
                await proc.wait()
            return
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                step()
    await proc.wait()


async def _replay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str) -> int:
    """Send each client line on the link; write what the replayer answers."""
    stdin = _Stdin()
    ended: list[str] = []

    async def client_lines() -> None:
        while line := await stdin.queue.get():
            if not line.strip():
                continue
            writer.write(mcp.encode({"line": mcp.text_of(line)}))
            await writer.drain()
        # (a message, not the socket's end: that says the shim has gone)
        writer.write(mcp.encode({"eof": 1}))
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()

    sender = asyncio.create_task(client_lines())
    try:
        while True:
            try:
                obj = await mcp.read(reader)
            except mcp.LinkError as exc:
                ended.append(f"the replay sent {exc}")
                break
            if obj is None:
                break
            line = obj.get("line")
            if isinstance(line, str):
                _write_out(mcp.bytes_of(line))
            elif "close" in obj:
                # The recorded server's output ended here: so does this one.
                status = obj["close"]
                with contextlib.suppress(OSError, ValueError):
                    sys.stdout.close()
                return status if isinstance(status, int) and 0 <= status < 256 else 1
            elif "end" in obj:
                ended.append(str(obj["end"]))
                break
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await sender
    if ended:
        say(f"wiretape mcp ({name}): {ended[0]}")
        return 1
    return 0
