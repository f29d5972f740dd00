"""Listening sockets: one loopback port per origin, each connection served
as its own named task, and the loop's error handler while they listen
(``faults.LoopGuard``). Knows nothing of what the handler does."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import socket
import threading
from collections.abc import Callable

from wiretape.errors import PortInUse
from wiretape.model import DEFAULT_MAX_BODY
from wiretape.proxy.faults import Faults, LoopGuard
from wiretape.proxy.http1 import (
    ClientConnection,
    ConnectHandler,
    ConnectionLimits,
    ErrorBody,
    Handler,
    WatchedReader,
    plain_error,
    serve_connection,
)
from wiretape.proxy.http2 import serve_h2

LOOPBACK = "127.0.0.1"


async def start_worker_threads(count: int) -> None:
    """Have ``count`` threads of the running loop's default executor
    started now, before anything is served (asyncio starts them one at a
    time as they are first needed). A thread's start waits until the new
    thread runs, which needs the GIL; while serving, with a worker thread
    busy in C code that keeps it (a large body's JSON parsed), that wait
    blocked the event loop for 5 to 16 ms (``make bench``'s event-loop pass,
    replay: 3 runs of 5 over 5 ms before, none of 5 after). Start no more
    than will work at once: each thread that allocates gets a malloc arena
    of its own (glibc), so 4 threads staging a long response in turn
    raised the RSS growth of recording a 200 MiB stream from 28 to 48 MiB.
    An executor with fewer threads than ``count`` (one the caller set) is
    waited for at most a second."""
    loop = asyncio.get_running_loop()
    everyone = threading.Barrier(count)  # (each job waits for all: each on a thread of its own)

    def wait() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            everyone.wait(1.0)

    await asyncio.gather(*(loop.run_in_executor(None, wait) for _ in range(count)))


class Listeners:
    """A set of listening ports and the connection tasks they spawned."""

    def __init__(self, *, max_body: int = DEFAULT_MAX_BODY,
                 limits: ConnectionLimits | None = None) -> None:
        self._servers: list[asyncio.Server] = []
        self._tasks: dict[asyncio.Task[None], ClientConnection] = {}
        self._ids = itertools.count(1)
        self.max_body = max_body
        self.limits = limits or ConnectionLimits()
        #: requests refused before any exchange began: (status, code)
        self.refused: list[tuple[int, str]] = []
        #: connections ended by an error, by kind (faults.Faults)
        self.faults = Faults()
        self._guard = LoopGuard(self.faults, self._owns)

    def next_connection_id(self) -> int:
        return next(self._ids)

    def note_refused(self, status: int, code: str) -> None:
        """Count a request (or a connection: ``http2_protocol_error``,
        ``http2_not_supported``) refused before any exchange began."""
        self.refused.append((status, code))

    def refused_said(self) -> str:
        """The refusals counted, in words: ``2 x 413 request_too_large, ...``
        (empty when none)."""
        counts: dict[tuple[int, str], int] = {}
        for key in self.refused:
            counts[key] = counts.get(key, 0) + 1
        return ", ".join(f"{n} x {status} {code}" for (status, code), n in counts.items())

    async def listen(
        self,
        port: int,
        handler_for: Callable[[int], Handler],
        error_body: ErrorBody = plain_error,
        sock: socket.socket | None = None,
        connect: ConnectHandler | None = None,
    ) -> int:
        """Listen on ``LOOPBACK:port`` (0: any free port); return the port.

        ``handler_for(connection_id)`` gives each connection its handler.
        ``sock``: an already listening socket to serve instead (one made in
        the agent's network namespace). ``connect``: the handler for CONNECT
        requests (a forward proxy); without it CONNECT gets 405. A connection
        opening with the HTTP/2 preface is served as HTTP/2 (``proxy.http2``).
        Raises PortInUse.
        """

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn_id = self.next_connection_id()
            conn = ClientConnection(reader, writer, max_body=self.max_body, error_body=error_body,
                                    on_refused=self.note_refused,
                                    accept_connect=connect is not None, limits=self.limits,
                                    on_fault=self.faults.note, name=f"connection {conn_id}")
            task = asyncio.current_task()
            if task is not None:
                task.set_name(f"wiretape-conn-{conn_id}")
                self._tasks[task] = conn
            try:
                await serve_connection(conn, handler_for(conn_id), connect, serve_h2)
            except asyncio.CancelledError:
                # Only close() cancels these tasks. Ending normally keeps
                # CPython 3.11's start_server callback from logging a
                # spurious CancelledError traceback (it calls exception()).
                pass
            finally:
                if task is not None:
                    self._tasks.pop(task, None)

        loop = asyncio.get_running_loop()
        self._guard.install(loop)

        def protocol() -> asyncio.StreamReaderProtocol:
            # (what asyncio.start_server makes, its reader one that tells a
            # handler when the client leaves: ClientConnection.on_leave)
            return asyncio.StreamReaderProtocol(WatchedReader(), on_connect)

        try:
            if sock is not None:
                server = await loop.create_server(protocol, sock=sock)
            else:
                server = await loop.create_server(protocol, LOOPBACK, port, reuse_address=True)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUse(LOOPBACK, port) from exc
            raise
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def _owns(self, thing: object) -> bool:
        """Whether ``thing`` (a socket, transport or protocol the loop
        reports about, or an ``asyncio.Server``) is one of these listeners'
        or their connections'."""
        if any(thing is server for server in self._servers):
            return True
        fileno = getattr(thing, "fileno", None)
        if fileno is not None and not isinstance(thing, asyncio.BaseTransport):
            with contextlib.suppress(OSError, ValueError):
                number = fileno()
                return any(s.fileno() == number for server in self._servers
                           for s in server.sockets)
        for conn in self._tasks.values():
            writer = conn.streams[1]
            if thing is writer.transport or thing is getattr(writer, "_protocol", None):
                return True
        return False

    async def close(self, grace: float = 2.0) -> None:
        """Stop listening; hang up idle keep-alive connections at once, give
        those answering a request ``grace`` seconds (each closes once its
        answer is done), then cancel."""
        for server in self._servers:
            server.close()
        for conn in list(self._tasks.values()):
            conn.stop_after_answer()
            if conn.idle:
                conn.hang_up()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        self._guard.remove()
