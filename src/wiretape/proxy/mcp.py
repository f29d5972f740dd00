"""The link between ``wiretape mcp`` and the wiretape that records or
replays (DESIGN.md, "MCP servers"): a loopback TCP listener of its own
(the hub), named to the agent by ``WIRETAPE_MCP``, which the agent's MCP
clients pass on to the shims they start.

The link is JSON lines (one JSON object per line, UTF-8): the shim opens
with ``{"hello": 1, "token": T, "name": NAME, "command": [...]}``; the hub
answers ``{"mode": "record"}``, ``{"mode": "replay"}`` or ``{"error":
LINE}``. Then, recording, the shim sends each message that crossed its
stdio as ``{"dir": "client"|"server", "t": NS, "line": TEXT}`` (``t``: ns
since the session began; a line that is not JSON is a message like the
others), and ``{"error": LINE}`` when the server broke the transport (a
line longer than ``MAX_LINE``), and ``{"exit": STATUS}`` when the server's output ended
(it exited, or broke the transport) while its client was still connected;
the session is over when the shim's stream ends. Replaying,
the shim sends ``{"line": TEXT}`` for each client message and ``{"eof":
1}`` when its stdin ends, and the hub answers with ``{"line": TEXT}`` for
each recorded server message to write, ``{"close": STATUS}`` where the
recorded server's output ended early (the shim closes its stdout and exits
with STATUS; null: 1), and ``{"end": LINE}`` when the
session ends there (nothing recorded answers, or a strict stop), then waits
for the link's end (the shim has said it and gone). A line's text is the message without its
newline; bytes that are not UTF-8 travel as surrogate escapes.

Shared by the recording and the replaying sides: neither imports the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from wiretape.limits import DEFAULT_MAX_BODY
from wiretape.model import MCP_ORIGIN_PREFIX, JSONValue, Message, Opcode

#: The variable that tells a shim where the hub listens:
#: ``tcp://127.0.0.1:PORT/TOKEN``.
VARIABLE = "WIRETAPE_MCP"
#: A request method and target that stand for an MCP stdio session in the
#: run file (its exchange's request; the command is its body).
METHOD = b"MCP"
TARGET = b"stdio"
#: The header of a recorded session's response that keeps the exit status
#: of a server whose output ended while its client was connected.
EXIT_HEADER = b"Exit-Status"
#: The longest line the link carries (bytes): a message as large as a body may be.
MAX_LINE = DEFAULT_MAX_BODY + 1024

Link = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class LinkError(Exception):
    """The other end of the link said something that is not the protocol."""


@dataclass(frozen=True)
class Hello:
    """A shim's opening: the server's name and its command line."""

    name: str
    command: tuple[str, ...]

    @property
    def origin(self) -> str:
        return MCP_ORIGIN_PREFIX + self.name


def address(port: int, token: str) -> str:
    """The value of ``WIRETAPE_MCP`` for a hub on ``port``."""
    return f"tcp://127.0.0.1:{port}/{token}"


def parse_address(value: str) -> tuple[str, int, str]:
    """(host, port, token) from a ``WIRETAPE_MCP`` value. Raises ValueError."""
    parts = urlsplit(value)
    if parts.scheme != "tcp" or parts.hostname is None or parts.port is None:
        raise ValueError(f"{VARIABLE}={value!r} is not tcp://HOST:PORT/TOKEN")
    return parts.hostname, parts.port, parts.path.lstrip("/")


def encode(obj: dict[str, JSONValue]) -> bytes:
    """One line of the link."""
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


async def read(reader: asyncio.StreamReader) -> dict[str, JSONValue] | None:
    """The next object on the link; None at its end. Raises LinkError."""
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError) as exc:
        raise LinkError(f"a line longer than {MAX_LINE} bytes") from exc
    except (ConnectionError, OSError):
        return None
    if not line:
        return None
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LinkError(f"not JSON: {line[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise LinkError(f"not a JSON object: {line[:80]!r}")
    return cast(dict[str, JSONValue], obj)


def text_of(line: bytes) -> str:
    """A stdio line as the link carries it (without its line ending)."""
    return line.rstrip(b"\r\n").decode("utf-8", "surrogateescape")


def bytes_of(text: str) -> bytes:
    """The bytes of a line the link carried (``text_of`` undone)."""
    return text.encode("utf-8", "surrogateescape")


def message(direction: str, text: str, offset_ns: int) -> Message:
    """A stdio line as the run keeps it (a JSON-RPC message, or a line that
    is not JSON, bytes kept): a text message of the session."""
    return Message("client" if direction == "client" else "server", Opcode.TEXT,
                   bytes_of(text), offset_ns)


def jsonrpc_method(payload: bytes) -> str | None:
    """The ``method`` of a JSON-RPC request or notification (JSON-RPC 2.0
    §4), else None; a ``tools/call`` (or ``prompts/get``) with the name
    it calls: ``tools/call read_file``."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    method = obj.get("method") if isinstance(obj, dict) else None
    if not isinstance(method, str):
        return None
    params = obj.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return f"{method} {name}" if isinstance(name, str) and name else method


Session = Callable[[Hello, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Hub:
    """Listens on loopback for shims; each connection that opens with the
    token and a well-formed hello is handed to ``on_session`` with the
    link, after the hub answered ``mode``."""

    def __init__(self, mode: str, on_session: Session) -> None:
        self._mode = mode
        self._on_session = on_session
        self._token = secrets.token_hex(16)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.address = ""

    async def start(self, sock: socket.socket | None = None) -> str:
        """Listen (on ``sock`` when given: one made in the agent's network
        namespace; else any free loopback port); returns ``WIRETAPE_MCP``'s
        value."""
        if sock is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0,
                                                      limit=MAX_LINE)
        else:
            self._server = await asyncio.start_server(self._serve, sock=sock, limit=MAX_LINE)
        port = self._server.sockets[0].getsockname()[1]
        self.address = address(port, self._token)
        return self.address

    async def close(self, grace: float = 2.0) -> None:
        """Stop listening; give the sessions still open ``grace`` seconds to
        end (a shim whose agent just exited is finishing), then cancel them
        (each keeps what crossed) and wait for them."""
        if self._server is not None:
            self._server.close()
        if self._tasks and grace > 0:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            hello = await self._hello(reader, writer)
            if hello is not None:
                await self._on_session(hello, reader, writer)
        except (LinkError, ConnectionError, OSError):
            pass  # a shim that broke the link: its session keeps what crossed
        except asyncio.CancelledError:
            # ``close`` cut the session off (it keeps what crossed). Not
            # raised on: asyncio's stream server (Python 3.11) logs a
            # traceback for a connection task that ends cancelled.
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _hello(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> Hello | None:
        try:
            async with asyncio.timeout(30):
                first = await read(reader)
        except TimeoutError:
            return None
        if first is None:
            return None
        token, name, command = first.get("token"), first.get("name"), first.get("command")
        if not isinstance(token, str) or not hmac.compare_digest(token, self._token):
            writer.write(encode({"error": f"the {VARIABLE} token is not this wiretape's"}))
            return None
        if (not isinstance(name, str) or not name or not isinstance(command, list)
                or not all(isinstance(a, str) for a in command)):
            writer.write(encode({"error": "a malformed hello (no name or command)"}))
            return None
        writer.write(encode({"mode": self._mode}))
        await writer.drain()
        return Hello(name, tuple(cast(list[str], command)))
