"""The proxy inside the test's own process: its listening side on a real
127.0.0.1 socket (port 0), a raw HTTP/1.1 client that keeps what came off
the wire, and a runner for ``async def`` tests.

Nothing here replaces wiretape's code: the tests drive ``Listeners``,
``ClientConnection``, ``Recorder`` and ``Replayer`` as ``wiretape record``
and ``wiretape replay`` wire them, minus the child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from wiretape.model import DEFAULT_MAX_BODY
from wiretape.proxy.http1 import ErrorBody, Handler, plain_error
from wiretape.proxy.server import Listeners

__all__ = [
    "LOOP_TIMEOUT",
    "RawClient",
    "Received",
    "in_loop",
    "listening",
    "request_bytes",
    "settled",
]

#: Seconds an in-process test may run before it fails as a hang.
LOOP_TIMEOUT = 10.0


def in_loop(test: Callable[..., Coroutine[Any, Any, None]] | None = None, *,
            internal_errors: int = 0) -> Any:
    """Run an ``async def`` test in a fresh event loop (``asyncio.run``).

    It fails when it takes over :data:`LOOP_TIMEOUT` seconds, and when the
    loop reported an error of its own (an exception escaping a connection's
    callback, say): such an error would be a traceback on the user's
    terminal. It fails as well when the proxy logged other than
    ``internal_errors`` internal errors (what its own handler of the loop's
    reports, and its connections, make of a bug). Fixtures are passed
    through. ``@in_loop`` or ``@in_loop(internal_errors=N)``.
    """
    if test is None:
        return functools.partial(in_loop, internal_errors=internal_errors)

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        reported: list[dict[str, Any]] = []
        bugs = _InternalErrors()

        async def main() -> None:
            asyncio.get_running_loop().set_exception_handler(
                lambda _loop, context: reported.append(context))
            await asyncio.wait_for(test(*args, **kwargs), LOOP_TIMEOUT)

        logger = logging.getLogger("wiretape")
        logger.addHandler(bugs)
        try:
            asyncio.run(main())
        finally:
            logger.removeHandler(bugs)
        assert not reported, "the event loop reported errors: " + "; ".join(
            f"{c.get('message')}: {c.get('exception')!r}" for c in reported)
        assert len(bugs.lines) == internal_errors, bugs.lines

    return run


class _InternalErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("wiretape: internal error"):
            self.lines.append(record.getMessage())


@contextlib.asynccontextmanager
async def listening(
    handler_for: Callable[[int], Handler], *, max_body: int = DEFAULT_MAX_BODY,
    error_body: ErrorBody = plain_error,
) -> AsyncIterator[tuple[Listeners, int]]:
    """``Listeners`` serving ``handler_for`` on 127.0.0.1, any free port:
    ``(listeners, port)``; closed on exit."""
    listeners = Listeners(max_body=max_body)
    port = await listeners.listen(0, handler_for, error_body)
    try:
        yield listeners, port
    finally:
        await listeners.close(grace=1.0)


async def settled(listeners: Listeners, timeout: float = 2.0) -> bool:
    """Whether every connection the listeners accepted has ended (its task
    returned) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while listeners._tasks:  # no public view of the connection tasks
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def request_bytes(method: str, target: str, body: bytes = b"",
                  headers: Iterable[tuple[str, str]] = (), *, host: str = "127.0.0.1",
                  length: bool = True) -> bytes:
    """An HTTP/1.1 request as bytes: ``Host`` first, then ``headers`` as
    given, then ``Content-Length`` (when ``length`` and there is a body or
    the method carries one), then the body."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if length and (body or method in ("POST", "PUT", "PATCH")):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Received:
    """A response as it came off the wire. ``head`` is the status line and
    header lines with the blank line; ``chunks`` the HTTP chunks of a
    chunked body, each with the monotonic ns it was read complete
    (``chunk_ns``); ``complete`` is False when the connection ended inside
    the body (no terminating chunk, fewer bytes than Content-Length)."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    head: bytes
    body: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    chunk_ns: list[int] = field(default_factory=list)
    complete: bool = True

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k.lower() == name.lower().encode()), None)

    def json(self) -> Any:
        return json.loads(self.body)


class RawClient:
    """One client connection, read and written as bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        return cls(reader, writer)

    async def __aenter__(self) -> RawClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, method: bytes = b"POST") -> Received:
        """The next response; raises ``asyncio.IncompleteReadError`` when the
        connection ends before a complete head."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        version, status, reason = [*lines[0].split(b" ", 2), b""][:3]
        assert version.startswith(b"HTTP/1."), head
        headers = [(k, v.strip()) for k, _, v in (line.partition(b":") for line in lines[1:])]
        r = Received(int(status), reason, headers, head)
        if r.status < 200 or r.status in (204, 304) or method == b"HEAD":
            return r
        try:
            if b"chunked" in (r.header("transfer-encoding") or b"").lower():
                await self._chunked(r)
            elif r.header("content-length") is not None:
                r.body = await self.reader.readexactly(int(r.header("content-length") or b""))
            else:
                r.body = await self.reader.read()  # close-delimited
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            r.complete = False
            if isinstance(exc, asyncio.IncompleteReadError) and not r.chunks:
                r.body = exc.partial
        return r

    async def _chunked(self, r: Received) -> None:
        while True:
            size = int((await self.reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                assert await self.reader.readuntil(b"\r\n") == b"\r\n"  # no trailers
                return
            data = (await self.reader.readexactly(size + 2))[:-2]
            r.chunk_ns.append(time.monotonic_ns())
            r.chunks.append(data)
            r.body += data

    async def ended(self, timeout: float = 2.0) -> bool:
        """Whether the server ends the connection (EOF or reset) within
        ``timeout`` seconds, with no further bytes before it."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), timeout)
        except TimeoutError:
            return False
        except ConnectionError:
            return True
        assert rest == b"", f"bytes after the response: {rest[:200]!r}"
        return True

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
