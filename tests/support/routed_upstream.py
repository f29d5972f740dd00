"""A tiny routed HTTP/1.1 upstream for the replay-mode, durability,
redaction and proxy-edge tests, on 127.0.0.1 in a background thread.

Every answer is a pure function of the request (never of a counter), so any
number of concurrent connections get stable bytes, and a test can recompute
what a client should have seen. Routes, by query parameter:

* ``frames=N&gap_ms=G``: a chunked ``text/event-stream`` of N events, one
  HTTP chunk per event, G ms apart (the first after G ms too);
* ``hang=1``: a chunked stream that sends one event every 200 ms until the
  client goes away (at most two minutes);
* anything else: a JSON body with a Content-Length.

``set_cookie`` adds a ``Set-Cookie`` header to every response. Each request
is kept in ``requests`` (method, target, raw ordered headers, body, the
connection number) together with the body bytes that were sent back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import h11

HOST = "127.0.0.1"


@dataclass
class Seen:
    """One request as the upstream read it, and the body it answered with."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    connection: int
    sent_body: bytes = b""
    sent_frames: list[bytes] = field(default_factory=list)
    done: bool = False

    def header(self, name: str) -> bytes | None:
        lname = name.lower().encode()
        return next((v for k, v in self.headers if k.lower() == lname), None)

    def header_names(self) -> set[str]:
        return {k.decode("latin-1").lower() for k, _ in self.headers}


def json_answer(method: bytes, target: bytes, body: bytes) -> bytes:
    """The JSON body answered to a non-streaming request."""
    path = target.split(b"?", 1)[0]
    digest = hashlib.sha256(method + b" " + path + b"\n" + body).hexdigest()[:24]
    return json.dumps({"object": "wiretape.test", "path": path.decode("latin-1"),
                       "request_sha": digest, "request_bytes": len(body)}).encode()


def stream_event(target: bytes, body: bytes, index: int) -> bytes:
    """Event ``index`` of a streamed answer."""
    digest = hashlib.sha256(target.split(b"?", 1)[0] + b"\n" + body).hexdigest()[:16]
    return b'data: {"i": %d, "request_sha": "%s"}\n\n' % (index, digest.encode())


class RoutedUpstream:
    def __init__(self, *, set_cookie: bytes | None = None) -> None:
        self.set_cookie = set_cookie
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._conns = 0
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> RoutedUpstream:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("upstream did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self.requests)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._conns += 1
            task = asyncio.ensure_future(self._serve(reader, writer, self._conns))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        self._server = await asyncio.start_server(accept, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        self._server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     conn_no: int) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                head, body = None, bytearray()
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await reader.read(65536)
                        conn.receive_data(data)
                        continue
                    if isinstance(event, h11.Request):
                        head = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    else:
                        return
                assert head is not None
                seen = Seen(bytes(head.method), bytes(head.target),
                            [(bytes(k), bytes(v)) for k, v in head.headers.raw_items()],
                            bytes(body), conn_no)
                with self._lock:
                    self.requests.append(seen)
                await self._answer(conn, writer, seen)
                seen.done = True
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            return
        finally:
            writer.close()

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter,
                    event: h11.Event) -> None:
        data = conn.send(event)
        if data:
            writer.write(data)
            await writer.drain()

    async def _answer(self, conn: h11.Connection, writer: asyncio.StreamWriter, seen: Seen) -> None:
        query = parse_qs(seen.target.split(b"?", 1)[1].decode()) if b"?" in seen.target else {}
        extra = [(b"Set-Cookie", self.set_cookie)] if self.set_cookie else []
        if "frames" in query or "hang" in query:
            frames = int(query.get("frames", ["100000"])[0])
            gap = float(query.get("gap_ms", ["200"])[0]) / 1000
            deadline = time.monotonic() + 120
            await self._send(conn, writer, h11.Response(status_code=200, reason=b"OK", headers=[
                (b"Content-Type", b"text/event-stream"), (b"Cache-Control", b"no-cache"),
                *extra, (b"Transfer-Encoding", b"chunked")]))
            for i in range(frames):
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(gap)
                frame = stream_event(seen.target, seen.body, i)
                seen.sent_frames.append(frame)
                seen.sent_body += frame
                await self._send(conn, writer, h11.Data(data=frame))
            await self._send(conn, writer, h11.EndOfMessage())
            return
        payload = json_answer(seen.method, seen.target, seen.body)
        seen.sent_body = payload
        await self._send(conn, writer, h11.Response(status_code=200, reason=b"OK", headers=[
            (b"Content-Type", b"application/json"), *extra,
            (b"Content-Length", str(len(payload)).encode())]))
        await self._send(conn, writer, h11.Data(data=payload))
        await self._send(conn, writer, h11.EndOfMessage())
