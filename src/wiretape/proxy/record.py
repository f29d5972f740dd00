"""Recording: forward each request to its origin, relay every frame to the
client as it arrives, and store the exchange (redacted) when it ends.

The request is redacted, hashed and compressed on a worker thread while it
is forwarded; when the response ends, what the agent waits for is the
response's redaction, the exchange's one transaction, and the request
body's compression only within its budget (``PACK_WAIT_PER_BYTE``; a body
not compressed by then goes in raw, and is compressed by the run file's
own thread once the end is sent).

Owns the per-exchange bookkeeping (sequence numbers, timing, how it ended).
Knows nothing of the CLI or of replay. A response body longer than
``spool_at`` is not held whole: it is written in parts as it streams
(``proxy.spool``), and its exchange is still committed in one transaction.

A write that fails (disk full, say) stops the recording: that exchange and
every later one are counted as not saved, and each later request gets an
error in its provider's shape without being forwarded (nothing more is paid
for that cannot be kept).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from wiretape.errors import RunFileWriteError, write_failure_reason
from wiretape.model import (
    Ending,
    Exchange,
    Frame,
    Message,
    Redaction,
    Request,
    Response,
    exchange_kind,
)
from wiretape.origins import UpstreamOptions, parse_upstream
from wiretape.proxy import mcp, upstream, ws_record
from wiretape.proxy.hop import ClientHead, Framing
from wiretape.proxy.http1 import ClientConnection, ClientGone, Handler, Responder
from wiretape.proxy.shapes import error_response, unreachable_response
from wiretape.proxy.spool import DEFAULT_SPOOL_AT, Gathered, Spool, may_spool
from wiretape.proxy.websocket import is_upgrade
from wiretape.redaction import (
    STANDARD,
    Rules,
    masked_values,
    redact_exchange,
    redact_request,
)
from wiretape.store.blobs import Packed, blob_hash
from wiretape.store.runfile import RunFile

#: A request as it is stored (redacted), the facts of what was redacted,
#: the sha256 hex of its body, and that body being compressed
#: (``RunFile.pack_request``; None for a small body): made on worker threads
#: as soon as the request is received, while it is forwarded. The commit
#: takes the compressed body only if it is ready: it never waits for it.
Prepared = tuple[Request, list[Redaction], str, "concurrent.futures.Future[Packed | None] | None"]
#: Request bodies from this size (bytes) on are prepared on a thread of
#: their own as soon as they are received; smaller ones by the commit's
#: thread, as soon as they are received too (ahead of their commit).
PREPARE_AHEAD = 16 * 1024
#: How long (s per byte of the request body) the commit waits for that
#: body's compression ahead when it is not done yet: about what writing it
#: raw costs instead (SQLite in WAL mode, about 3 ms per MiB on a 2-core
#: machine), so the wait is never much dearer than the raw write it saves,
#: and the body is not written a second time once compressed. A 300 KiB
#: body spliced against the one before is compressed in about 0.3 ms.
PACK_WAIT_PER_BYTE = 3e-9


@dataclass
class RecordStats:
    exchanges: int = 0
    body_bytes: int = 0
    failures: list[str] = field(default_factory=list)
    #: exchanges forwarded but not stored, because a write failed
    not_saved: int = 0
    #: requests answered with an error after a write failed, not forwarded
    refused: int = 0
    #: of ``exchanges``, the stdio MCP sessions stored
    mcp_sessions: int = 0


class Recorder:
    """Records exchanges for a set of origins into one run file."""

    def __init__(self, run: RunFile, *, on_exchange: Callable[[Exchange], None] | None = None,
                 options: UpstreamOptions | None = None, rules: Rules = STANDARD,
                 spool_at: int | None = None, close_timeout: float | None = None,
                 first_seq: int = 0,
                 rewrite: Callable[[Request], Request] | None = None) -> None:
        """``first_seq``: the sequence number of the first exchange (a fork's
        live exchanges follow those served from its parent). ``rewrite``:
        what is sent upstream instead of the agent's request (a fork's model
        rewrite); the exchange stores the agent's request as it came.
        ``spool_at``: bytes of a response body held in memory before it
        is written in parts as it streams (``proxy.spool``; default
        ``WIRETAPE_SPOOL_BYTES`` from the environment, else 8 MiB).
        ``close_timeout``: seconds a WebSocket session's closing handshake
        may take (``proxy.ws_record``; default ``WIRETAPE_WS_CLOSE_TIMEOUT``
        from the environment, else 10 s)."""
        self._run = run
        self._close_timeout = (close_timeout if close_timeout is not None
                               else _close_timeout_from_env())
        self._spool_at = spool_at if spool_at is not None else _spool_at_from_env()
        self._rules = rules
        self._seq = itertools.count(first_seq)
        self._rewrite = rewrite
        self._options = options or UpstreamOptions()
        self._client = upstream.new_client(self._options)
        self._on_exchange = on_exchange
        #: stores whose response is still being spooled (``_schedule_store``)
        self._pending: set[asyncio.Task[None]] = set()
        #: commits handed to the writer and not yet counted
        self._committing: set[asyncio.Future[None]] = set()
        # One thread commits, in the order exchanges are handed to it (the
        # order they ended); requests are prepared on threads of their own.
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="wiretape-commit")
        self._preparer = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="wiretape-prepare")
        self.stats = RecordStats()
        #: the first failed write; once set, nothing more is forwarded or stored
        self.write_failure: RunFileWriteError | None = None
        #: values of masked headers and query parameters met so far (label
        #: by value): secrets wherever else the run meets them (its output)
        self._echoed: dict[bytes, str] = {}

    def echoed_secrets(self) -> list[tuple[str, bytes]]:
        """(label, value) of every credential a recorded request carried in a
        masked header or query parameter (``redaction.masked_values``)."""
        return [(label, value) for value, label in list(self._echoed.items())]

    async def warm_up(self) -> None:
        """Make the first exchange as cheap as the next (the upstream
        client's first connection loads its machinery): call before the
        proxy listens."""
        await self._client.warm_up()
        for pool in (self._writer, self._preparer):  # their threads, started now
            await asyncio.wrap_future(pool.submit(int))

    async def aclose(self) -> None:
        """Wait for every exchange to be committed and its bodies compressed
        (``RunFile.settle``, on a worker thread), then close the client."""
        while self._pending or self._committing:
            await asyncio.gather(*self._pending, *self._committing, return_exceptions=True)
        await asyncio.to_thread(self._run.settle)
        self._writer.shutdown(wait=False)
        self._preparer.shutdown(wait=False)
        await self._client.aclose()

    def handler(self, origin: str, upstream_url: str, connection_id: int) -> Handler:
        root, host, base = parse_upstream(upstream_url)
        shown = root + base  # named in error answers: without any userinfo

        async def handle(conn: Responder, request: Request) -> None:
            if is_upgrade(request.headers) and isinstance(conn, ClientConnection):
                await self._websocket(conn, request, origin, shown, root, host, connection_id)
                return
            await self._forward(conn, request, origin, shown, root, host, connection_id)

        return handle

    async def _forward(
        self, conn: Responder, request: Request, origin: str, upstream_url: str,
        root: str, host: str, connection_id: int,
    ) -> None:
        if self.write_failure is not None:
            await self._refuse(conn, request, self.write_failure)
            return
        seq = next(self._seq)
        wall, t0 = time.time_ns(), time.monotonic_ns()
        gathered: Gathered | None = None  # the origin's response body as it arrives
        # Redacted, hashed and compressed on a worker thread while it is
        # forwarded: the commit at the end only awaits it. (A small one is
        # done by the commit's own thread, queued before its commit: a
        # thread of its own costs more than the work.)
        preparer = self._preparer if len(request.body) >= PREPARE_AHEAD else self._writer
        prepared = preparer.submit(self._prepare, request, exchange_kind(origin) == "tool")
        response: Response | None = None
        ending, error, ttfb = Ending.COMPLETE, None, None
        try:
            sent = self._rewrite(request) if self._rewrite is not None else request
            outgoing = upstream.build_request(root, host, sent, self._options.resolve)
            origin_resp, gone = await _unless_gone(conn, self._client.send(outgoing))
            if origin_resp is None:
                # The client left before the response's head: the request to
                # the origin is cancelled (its connection released), and the
                # exchange stored as the client saw it, unanswered.
                await conn.abort()
                self._schedule_store(Exchange(
                    seq, connection_id, origin, wall, request, None, Ending.CLIENT_GONE, None,
                    time.monotonic_ns() - t0, f"{gone} before the response's head arrived"),
                    None, prepared)
                return
        except (httpx.TimeoutException, httpx.TransportError, httpx.InvalidURL) as exc:
            ending = (
                Ending.TIMEOUT
                if isinstance(exc, httpx.TimeoutException)
                else Ending.ORIGIN_UNREACHABLE
            )
            error = origin_error(exc)
            status, reason, headers, body = unreachable_response(
                request.path, upstream_url, error, timeout=ending is Ending.TIMEOUT)
            # Stored as the response the agent got, so a replay serves these
            # very bytes (the origin sent none: no time to first byte).
            response = Response(status, reason, headers,
                                (Frame(time.monotonic_ns() - t0, body),))
            with contextlib.suppress(ClientGone):
                await conn.answer(status, reason, headers, body)
        else:
            ttfb = time.monotonic_ns() - t0
            raw_headers = origin_resp.headers
            reason = origin_resp.reason
            version = origin_resp.http_version
            client_ok = True
            left: int | None = None  # bytes until a Content-Length body ends
            held = b""  # its last frame, sent whole once the exchange is committed
            gathered = Gathered(self._spool_at if may_spool(raw_headers) else sys.maxsize,
                                lambda: Spool(self._run, self._rules))
            try:
                # A body of known length follows its head at once (a stream's
                # head goes now): the head goes out with the body's first
                # bytes, the client woken once for both.
                head = await conn.send_head(origin_resp.status_code, reason, raw_headers,
                                            more=True)
                left = _declared_length(head)
                if left is None:
                    await conn.flush()
            except ClientGone as exc:
                client_ok, ending = False, Ending.CLIENT_GONE
                error = _gone(exc, "before the response's head reached it")
            # Each frame is relayed by ``on_frame`` in the event loop's
            # callback for its arrival (nothing awaited in between); the
            # loop below awaits only what it asks for: a full client buffer,
            # bytes to spool, frames to send through an HTTP/2 stream.
            write_now = conn.send_data_now if isinstance(conn, ClientConnection) else None
            waiting: list[bytes] = []  # frames to send by awaiting
            broke: list[ClientGone] = []

            def on_frame(chunk: bytes) -> bool:
                nonlocal left, held
                arrived = time.monotonic_ns() - t0
                if left is not None:
                    left -= len(chunk)
                    if left == 0:  # the frame that ends the body waits for the commit
                        gathered.add(arrived, chunk)
                        held = chunk
                        return False
                relayed, held = held + chunk, b""  # (an origin that sent too much)
                if write_now is None:
                    gathered.add(arrived, chunk)
                    waiting.append(relayed)
                    return True
                try:
                    busy = write_now(relayed)
                except ClientGone as exc:
                    broke.append(exc)
                    busy = True
                gathered.add(arrived, chunk)  # (after the relay, with its arrival's time)
                return busy or gathered.due()

            try:
                more = client_ok
                while more:
                    more = await origin_resp.relay(on_frame)
                    try:
                        if broke:
                            raise broke[0]
                        for chunk in waiting:
                            await conn.send_data(chunk)
                        waiting.clear()
                        if isinstance(conn, ClientConnection):
                            await conn.drain()
                    except ClientGone as exc:
                        ending = Ending.CLIENT_GONE
                        error = _gone(exc, "during the response's body")
                        break
                    await gathered.spill()  # after the relay: may wait for the disk
            except httpx.TimeoutException as exc:
                ending, error = Ending.TIMEOUT, origin_error(exc)
            except httpx.TransportError as exc:
                ending, error = Ending.ORIGIN_RESET, origin_error(exc)
            except asyncio.CancelledError:
                # wiretape is stopping with this response still streaming:
                # keep what the agent already got, then stop.
                response = Response(origin_resp.status_code, reason, raw_headers, gathered.frames(),
                                    version)
                self._schedule_store(Exchange(
                    seq, connection_id, origin, wall, request, response, Ending.CLIENT_GONE,
                    ttfb, time.monotonic_ns() - t0, "wiretape stopped while the response streamed"),
                    gathered, prepared)
                await conn.abort()
                raise
            finally:
                await origin_resp.aclose()
            response = Response(
                origin_resp.status_code, reason, raw_headers, gathered.frames(), version
            )
            if ending is Ending.COMPLETE:
                # The client reads the end of the response (the terminating
                # chunk, or a body's last frame) only once the exchange is
                # committed: a SIGKILL may lose an exchange whose end the
                # agent never saw, never one whose end it saw. A write that
                # fails instead stops the recording (``write_failure``): this
                # answer, already paid for, still reaches the agent, counted
                # as not saved, and the next request is refused.
                exchange = Exchange(seq, connection_id, origin, wall, request, response,
                                    ending, ttfb, time.monotonic_ns() - t0, error)
                if gathered.spool is None:
                    # (cancelled meanwhile, the commit goes on: aclose waits for it)
                    await self._commit(exchange, gathered, prepared)
                else:
                    await asyncio.shield(self._schedule_store(exchange, gathered, prepared))
                try:
                    with contextlib.suppress(ClientGone):
                        await conn.send_data(held, more=True)
                        await conn.end()
                finally:
                    # What it committed raw is compressed from now on, not
                    # competing with the end's way out.
                    self._run.start_compressing()
                return
            await conn.abort()
        duration = time.monotonic_ns() - t0
        exchange = Exchange(seq, connection_id, origin, wall, request, response, ending,
                            ttfb, duration, error)
        self._schedule_store(exchange, gathered, prepared)

    async def _websocket(self, conn: ClientConnection, request: Request, origin: str,
                         upstream_url: str, root: str, host: str, connection_id: int) -> None:
        """An upgrade to WebSocket (``proxy.ws_record``): stored as one
        exchange, the handshake and the origin's answer, with the session's
        messages; stored also when wiretape stops during the session."""
        if self.write_failure is not None:
            await self._refuse(conn, request, self.write_failure)
            return
        seq = next(self._seq)
        wall, t0 = time.time_ns(), time.monotonic_ns()
        session = ws_record.Session()
        try:
            await ws_record.forward(conn, request, root, host, self._client, self._options,
                                    session, t0=t0, max_size=conn.max_body,
                                    close_timeout=self._close_timeout)
        except ws_record.OriginUnreachable as exc:
            session.ending = Ending.TIMEOUT if exc.timeout else Ending.ORIGIN_UNREACHABLE
            session.error = str(exc)
            status, reason, headers, body = unreachable_response(
                request.path, upstream_url, session.error, timeout=exc.timeout)
            session.response = Response(status, reason, headers,
                                        (Frame(time.monotonic_ns() - t0, body),))
            with contextlib.suppress(ClientGone):
                await conn.answer(status, reason, headers, body)
        except asyncio.CancelledError:
            session.ending = Ending.CLIENT_GONE
            session.error = "wiretape stopped during the WebSocket session"
            raise
        finally:
            self._schedule_store(Exchange(
                seq, connection_id, origin, wall, request, session.response, session.ending,
                session.ttfb_ns, time.monotonic_ns() - t0, session.error,
                tuple(session.messages)), None, None)

    async def mcp_session(self, hello: mcp.Hello, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        """A stdio MCP session relayed by ``wiretape mcp`` (``proxy.mcp``):
        stored, when the shim's link ends, as one exchange of origin
        ``mcp:NAME`` (its request's body the server's command) with every
        JSON-RPC message that crossed, redacted as WebSocket messages are;
        stored also when wiretape stops during the session."""
        if self.write_failure is not None:
            writer.write(mcp.encode({"error": str(self.write_failure)}))
            return
        seq = next(self._seq)
        wall, t0 = time.time_ns(), time.monotonic_ns()
        messages: list[Message] = []
        ending, error = Ending.COMPLETE, None
        status: list[tuple[bytes, bytes]] = []
        try:
            while (obj := await mcp.read(reader)) is not None:
                line, t = obj.get("line"), obj.get("t")
                if "error" in obj:
                    ending, error = Ending.ORIGIN_RESET, str(obj["error"])
                elif isinstance(obj.get("exit"), int):
                    code = obj["exit"]
                    status = [(mcp.EXIT_HEADER, str(code).encode())]
                    if ending is Ending.COMPLETE:
                        ending = Ending.ORIGIN_RESET
                        error = (f"MCP server {hello.name!r} ended its output (exit status "
                                 f"{code}) while its client was still connected")
                elif isinstance(line, str) and isinstance(t, int):
                    messages.append(mcp.message(str(obj.get("dir")), line, t))
        except mcp.LinkError as exc:
            ending, error = Ending.CLIENT_GONE, f"wiretape mcp sent {exc}"
        except asyncio.CancelledError:
            ending, error = Ending.CLIENT_GONE, "wiretape stopped during the MCP session"
            raise
        finally:
            body = json.dumps({"command": list(hello.command)}).encode()
            self._schedule_store(Exchange(
                seq, 0, hello.origin, wall, Request(mcp.METHOD, mcp.TARGET, (), body),
                Response(101, b"MCP stdio", tuple(status), ()), ending, 0, time.monotonic_ns() - t0,
                error, tuple(messages)), None, None)

    async def _refuse(self, conn: Responder, request: Request,
                      failure: RunFileWriteError) -> None:
        self.stats.refused += 1
        headers, body = error_response(
            request.path, 503, "wiretape_cannot_write",
            f"wiretape: {failure}; this request was not forwarded, so that nothing more is "
            "sent to the provider that cannot be recorded")
        with contextlib.suppress(ClientGone):
            await conn.answer(503, b"Service Unavailable", headers, body)

    def _schedule_store(self, exchange: Exchange,
                        body: Gathered | None,
                        prepared: concurrent.futures.Future[Prepared] | None,
                        ) -> asyncio.Task[None]:
        """Store off the client's path: the next request on this connection
        need not wait for the commit. ``body``: the response's, when its
        frames were gathered (a spooled one is not in ``exchange``)."""
        task = asyncio.create_task(self._store(exchange, body, prepared),
                                   name=f"wiretape-store-{exchange.seq}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _store(self, exchange: Exchange, body: Gathered | None,
                     prepared: concurrent.futures.Future[Prepared] | None) -> None:
        if body is not None and body.spool is not None:
            await body.spool.close(body.take_pending())
        await self._commit(exchange, body, prepared)

    def _commit(self, exchange: Exchange, body: Gathered | None,
                prepared: concurrent.futures.Future[Prepared] | None) -> asyncio.Future[None]:
        """Hand the exchange to the writer thread, which commits in the
        order it is given exchanges; the future is done once the commit is
        (or the write failed: ``write_failure``). Counting is done on the
        loop when the writer is, whether or not the future was cancelled
        meanwhile (the commit goes on regardless)."""
        loop = asyncio.get_running_loop()
        # ``done`` is the caller's (cancelled with it); ``counted`` is aclose's
        done: asyncio.Future[None] = loop.create_future()
        counted: asyncio.Future[None] = loop.create_future()
        self._committing.add(counted)

        def written(job: concurrent.futures.Future[tuple[Exchange, int] | None]) -> None:
            with contextlib.suppress(RuntimeError):  # (the loop closed: nothing to count)
                loop.call_soon_threadsafe(self._stored, exchange, job, (done, counted))

        self._writer.submit(self._write, exchange, body, prepared).add_done_callback(written)
        return done

    def _write(self, exchange: Exchange, body: Gathered | None,
               prepared: concurrent.futures.Future[Prepared] | None,
               ) -> tuple[Exchange, int] | None:
        """On the writer thread: the exchange redacted and committed, or
        None when it is not saved (this write failed, or an earlier one did:
        ``write_failure``, set here)."""
        if self.write_failure is not None:
            return None
        try:
            return self._redact_and_write(
                exchange, body, prepared.result() if prepared is not None else None)
        except Exception as exc:  # whatever it was, the exchange is not on disk
            self.write_failure = RunFileWriteError(self._run.path, write_failure_reason(exc))
            return None

    def _stored(self, exchange: Exchange,
                job: concurrent.futures.Future[tuple[Exchange, int] | None],
                futures: tuple[asyncio.Future[None], ...]) -> None:
        """On the loop, once the writer is done with ``exchange``: count it."""
        for future in futures:
            self._committing.discard(future)
            if not future.done():
                future.set_result(None)
        result = None
        if not job.cancelled() and job.exception() is None:
            result = job.result()
        if result is None:
            self.stats.not_saved += 1
            return
        stored, response_bytes = result
        self.stats.exchanges += 1
        self.stats.mcp_sessions += stored.kind == "mcp"
        self.stats.body_bytes += (len(stored.request.body) + response_bytes
                                  + sum(len(m.payload) for m in stored.messages))
        if exchange.ending is not Ending.COMPLETE:
            self._run.start_compressing()  # (a complete one: once its end is sent)
            self.stats.failures.append(
                f"#{exchange.seq} {exchange.ending.value}"
                + (f": {stored.error}" if stored.error else "")
            )
        if self._on_exchange is not None:
            self._on_exchange(stored)

    def _prepare(self, request: Request, tool: bool) -> Prepared:
        """The request as stored: redacted (CPU work), its body's hash, and
        (a body of ``PREPARE_AHEAD`` bytes or more) that body's compression
        started on a thread of its own; the secrets it carries noted for the
        run's output (``echoed_secrets``; ``tool``: a tool exchange's body
        fields too). On a worker thread, as soon as the request is received."""
        for label, value in masked_values(request, body=tool):
            self._echoed.setdefault(value, label)
        stored, facts = redact_request(request, self._rules)
        digest = blob_hash(stored.body)
        packing = None
        if len(stored.body) >= PREPARE_AHEAD:
            with contextlib.suppress(RuntimeError):  # (shut down: committed raw)
                packing = self._preparer.submit(self._run.pack_request, stored.body, digest)
        return stored, facts, digest, packing

    def _redact_and_write(self, exchange: Exchange, body: Gathered | None,
                          prepared: Prepared | None) -> tuple[Exchange, int]:
        """Redact the response (CPU work: a coded body is undone and done
        again) and commit with the prepared request, on a worker thread:
        never on the event loop. The request's body goes in compressed when
        its compression ahead is done, or is within its budget
        (``PACK_WAIT_PER_BYTE``) once the response is redacted; else raw,
        compressed afterwards by the run file's own thread
        (``RunFile.start_compressing``). Returns the exchange as stored (a
        spooled response without its frames) and its response body's
        bytes."""
        request, facts, digest, packing = prepared or self._prepare(
            exchange.request, exchange.kind == "tool")
        # (a spooled response: its headers; its parts are redacted already)
        stored, facts = redact_exchange(exchange, self._rules, redacted=(request, facts))
        packed = None
        if packing is not None and not packing.cancel():  # (running, or done)
            # (not done in time, or failed: committed raw, compressed later)
            with contextlib.suppress(Exception):
                packed = packing.result(len(request.body) * PACK_WAIT_PER_BYTE)
        if body is None or body.spool is None:
            self._run.write_exchange(stored, facts, compress_later=True, request_digest=digest,
                                     request_packed=packed)
            response = stored.response
            return stored, sum(len(f.data) for f in response.frames) if response else 0
        staged, more = body.spool.finish()
        self._run.write_spooled_exchange(stored, facts + more, staged, body.frame_rows(),
                                         compress_later=True, request_digest=digest,
                                         request_packed=packed)
        return stored, staged.size


async def _unless_gone(conn: Responder, sending: Awaitable[upstream.OriginResponse],
                       ) -> tuple[upstream.OriginResponse | None, str]:
    """The origin's response head, as ``sending`` gives it; or (None, why)
    when the client abandons the request first (``Responder.on_leave``),
    ``sending`` then cancelled where it waits. No task is made: the
    client's leaving cancels this one, as ``asyncio.timeout`` does, and a
    cancellation from elsewhere (wiretape stopping) is never swallowed.
    Raises what ``sending`` raises."""
    task = asyncio.current_task()
    assert task is not None
    cancelling = task.cancelling()
    why: str | None = None

    def left(reason: str) -> None:
        nonlocal why
        if why is None:
            why = reason
            task.cancel()

    stop = conn.on_leave(left)
    try:
        return await sending, ""
    except asyncio.CancelledError:
        if why is not None and task.uncancel() <= cancelling:
            return None, why
        raise
    finally:
        stop()


#: h11's and the chunk reader's words for bytes that break HTTP/1.1's
#: framing (as opposed to a connection closed or cut short).
_MALFORMED = ("illegal", "malformed", "invalid", "bad ", "too long", "unexpected")


def origin_error(exc: Exception) -> str:
    """An origin's failure as an exchange stores it and a summary shows it:
    the error's class and message (``RemoteProtocolError: ...``), bytes
    shown as bytes (never ``bytearray(...)``); a response whose bytes break
    HTTP/1.1's framing (RFC 9112) says so in plain words after it."""
    said = re.sub(r"bytearray\((b(['\"]).*?\2)\)", r"\1", str(exc))
    error = f"{type(exc).__name__}: {said}"
    if isinstance(exc, httpx.RemoteProtocolError) and any(
            word in said.lower() for word in _MALFORMED):
        error += " (the origin's response is not valid HTTP/1.1, RFC 9112)"
    return error


def _spool_at_from_env() -> int:
    """``WIRETAPE_SPOOL_BYTES`` (bytes, at least 64 KiB), else the default.
    Raises UsageError for a value that is not that (``limits.spool_bytes``)."""
    from wiretape.errors import UsageError
    from wiretape.limits import spool_bytes

    try:
        return spool_bytes(os.environ, DEFAULT_SPOOL_AT)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _declared_length(head: ClientHead) -> int | None:
    """The body length the client was told (Content-Length framing), else None."""
    if head.framing is not Framing.LENGTH:
        return None
    value = next((v for k, v in head.headers if k.lower() == b"content-length"), b"")
    return int(value) if value.strip().isdigit() else None


def _close_timeout_from_env() -> float:
    """``WIRETAPE_WS_CLOSE_TIMEOUT`` (seconds), else the default. Raises
    UsageError for a value that is not that (``limits.ws_close_timeout``)."""
    from wiretape.errors import UsageError
    from wiretape.limits import ws_close_timeout

    try:
        return ws_close_timeout(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _gone(exc: ClientGone, when: str) -> str:
    """The stored error of an exchange whose client left: when, and why
    (what the connection said), e.g. ``the client left during the
    response's body: the client reset the stream``."""
    why = " ".join(str(exc).split())[:300] or "the connection closed"
    return f"the client left {when}: {why}"
