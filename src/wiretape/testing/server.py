"""The fake provider on a real socket: a small asyncio + h11 server on 127.0.0.1.

This module owns the I/O shell: accepting connections, reading requests with
h11 (one named task per connection), writing each reply with its head
(``content-type``, ``server``, ``x-request-id``; ``content-length`` or chunked
framing; no ``date``) and streamed bodies one SSE event per HTTP chunk with
``delay`` seconds between events, so a proxy that buffers can be caught. It
offers :class:`AsyncFakeProvider` for a running event loop and
:class:`FakeProvider`, the same on a background thread for synchronous tests.
Given a server-side ``ssl_context``, either serves HTTPS instead of HTTP.

It must not know which reply a request gets: that is the playbook's, and the
bytes of a body are the wire formats'.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType

import h11

from wiretape.errors import PortInUse
from wiretape.testing.openai_responses_ws import (
    accept_headers,
    is_websocket_upgrade,
    serve_session,
)
from wiretape.testing.playbook import Playbook, ReceivedRequest
from wiretape.testing.script import Turn
from wiretape.testing.wire import Reply

HOST = "127.0.0.1"
DEFAULT_DELAY = 0.005
"""Seconds between two events of a streamed response."""

_READ_SIZE = 65_536
_STOP_TIMEOUT = 10.0
_SERVER_NAME = b"wiretape-fake-provider"


def _response_head(reply: Reply, request_number: int) -> list[tuple[bytes, bytes]]:
    head = [
        (b"content-type", reply.content_type),
        (b"server", _SERVER_NAME),
        (b"x-request-id", f"req_fake_{request_number:04d}".encode("ascii")),
    ]
    if reply.status >= 400:
        # Both SDKs honour this header: a scripted error is final, retrying cannot help.
        head.append((b"x-should-retry", b"false"))
    if reply.streamed:
        return [*head, (b"cache-control", b"no-cache"), (b"transfer-encoding", b"chunked")]
    return [*head, (b"content-length", str(sum(map(len, reply.chunks))).encode("ascii"))]


@dataclass(frozen=True)
class _Incoming:
    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> _Incoming | None:
    """The next complete request on the connection, or ``None`` once the client closed it."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ_SIZE))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            return _Incoming(
                head.method.decode("latin-1"),
                head.target.decode("latin-1"),
                tuple((bytes(n), bytes(v)) for n, v in head.headers.raw_items()),
                bytes(body),
            )
        else:  # ConnectionClosed, or PAUSED after a protocol switch we never agree to
            return None


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await writer.drain()


class AsyncFakeProvider:
    """The fake provider inside a running event loop.

    ``script`` is played in request arrival order; ``port`` 0 picks a free port;
    ``delay`` is the pause in seconds between two events of a streamed response;
    ``models`` gives a model name a script of its own (a request naming that
    model, in its ``model`` member or Gemini's path, plays it);
    ``ssl_context``, a server-side :class:`ssl.SSLContext` holding the server's
    certificate chain and key, makes it serve HTTPS (``url`` then starts with
    ``https://``). Use ``async with AsyncFakeProvider(script) as fp:`` or
    ``start()`` / ``close()``.
    """

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        port: int = 0,
        delay: float = DEFAULT_DELAY,
        ssl_context: ssl.SSLContext | None = None,
        models: Mapping[str, Sequence[Turn]] | None = None,
    ) -> None:
        self._playbook = Playbook(script, models)
        self._wanted_port = port
        self._delay = delay
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._accepted = 0

    @property
    def port(self) -> int:
        """The listening TCP port; raises ``RuntimeError`` before ``start()``."""
        if self._port is None:
            raise RuntimeError("the fake provider is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with an ``ssl_context``), without a base
        path; add ``/v1`` for OpenAI clients."""
        scheme = "http" if self._ssl_context is None else "https"
        return f"{scheme}://{HOST}:{self.port}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        return self._playbook.requests

    @property
    def remaining(self) -> int:
        """How many script turns are still to be played."""
        return self._playbook.remaining

    async def start(self) -> None:
        """Listen on 127.0.0.1; raises :class:`wiretape.errors.PortInUse` when the port is taken."""
        try:
            self._server = await asyncio.start_server(
                self._accept, HOST, self._wanted_port, ssl=self._ssl_context
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(HOST, self._wanted_port) from exc
            raise
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> AsyncFakeProvider:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        task = asyncio.get_running_loop().create_task(
            self._converse(reader, writer),
            name=f"wiretape-fake-provider-connection-{self._accepted}",
        )
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until either side closes it."""
        conn = h11.Connection(h11.SERVER)
        try:
            while (incoming := await _read_request(conn, reader)) is not None:
                if is_websocket_upgrade(incoming.method, incoming.target, incoming.headers):
                    await _send(conn, writer, h11.InformationalResponse(
                        status_code=101, headers=accept_headers(incoming.headers)))
                    await serve_session(reader, writer, bytes(conn.trailing_data[0]),
                                        incoming.target, incoming.headers,
                                        self._playbook.answer, self._delay)
                    return
                request, reply = self._playbook.answer(
                    incoming.method, incoming.target, incoming.headers, incoming.body
                )
                await self._respond(conn, writer, reply, request.number)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, ssl.SSLError, h11.ProtocolError):
            return  # the client hung up, broke TLS, or spoke something other than HTTP/1.1
        finally:
            writer.close()

    async def _respond(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, reply: Reply, number: int
    ) -> None:
        head = _response_head(reply, number)
        reason = HTTPStatus(reply.status).phrase.encode("ascii")
        await _send(
            conn, writer, h11.Response(status_code=reply.status, headers=head, reason=reason)
        )
        for index, chunk in enumerate(reply.chunks):
            if index and reply.streamed:
                await asyncio.sleep(self._delay)
            await _send(conn, writer, h11.Data(data=chunk))  # one chunk, flushed, per SSE event
        await _send(conn, writer, h11.EndOfMessage())


class FakeProvider:
    """The fake provider on a background thread, for synchronous tests.

    ``with FakeProvider(script, port=0) as fp:`` starts it and stops it;
    ``fp.url`` is ``http://127.0.0.1:PORT`` (``https://`` with an ``ssl_context``)
    and ``fp.requests`` the requests received (still readable after the block).
    Arguments as :class:`AsyncFakeProvider`.
    """

    def __init__(
        self,
        script: Sequence[Turn] = (),
        *,
        port: int = 0,
        delay: float = DEFAULT_DELAY,
        ssl_context: ssl.SSLContext | None = None,
        models: Mapping[str, Sequence[Turn]] | None = None,
    ) -> None:
        self._core = AsyncFakeProvider(script, port=port, delay=delay, ssl_context=ssl_context,
                                       models=models)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def port(self) -> int:
        """The listening TCP port; raises ``RuntimeError`` before ``start()``."""
        return self._core.port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with an ``ssl_context``), without a base
        path; add ``/v1`` for OpenAI clients."""
        return self._core.url

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        return self._core.requests

    @property
    def remaining(self) -> int:
        """How many script turns are still to be played."""
        return self._core.remaining

    def start(self) -> None:
        """Start serving; returns once the port is bound, or raises what binding raised."""
        if self._thread is not None:
            raise RuntimeError("the fake provider is already started")
        self._thread = threading.Thread(
            target=self._thread_main, name="wiretape-fake-provider", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error

    def stop(self) -> None:
        """Stop serving and wait for the thread to end (at most 10 s)."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        thread.join(_STOP_TIMEOUT)
        self._thread = None

    def __enter__(self) -> FakeProvider:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _thread_main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            await self._core.start()
        except BaseException as exc:  # handed over to the thread that called start()
            self._startup_error = exc
            return
        finally:
            self._started.set()
        try:
            await self._stopping.wait()
        finally:
            await self._core.close()
