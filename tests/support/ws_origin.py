"""A WebSocket origin on 127.0.0.1 whose closing handshake a test chooses.

It runs its own event loop in a thread and speaks through the
``websockets`` library's sans-I/O server protocol over raw asyncio
streams, so it can leave out what a well-behaved server does:

* ``closes``: answers the first text message with a text ``"echo: ..."``,
  then sends a close (1000, ``"bye"``), answers the client's close as a
  server does and ends the connection;
* ``mute``: echoes each text message as ``"echo: ..."``, and never answers
  a close: it keeps the connection open, sending nothing, until the other
  end goes away;
* ``vanishes``: answers the first text message with ``"echo: ..."``, then
  drops the TCP connection (no close frame);
* ``chatty``: answers the first text message with ``"echo: ..."`` and then
  sends ``"tick N"`` every 20 ms until the other end closes or goes away
  (answering a close as a server does);
* ``bad-accept``: answers the handshake 101 with a ``Sec-WebSocket-Accept``
  that is not the one the key calls for (RFC 6455 §4.2.2), then as ``mute``.

``events`` lists what it saw (``text hello``, ``close 1000 done``,
``eof``); when ``eof_file`` is given, the file is created once the other
end closed the connection (so a client in another process can wait for
it)::

    with WsOrigin("mute", eof_file=path) as origin:
        ...  # point a client at origin.url (http://127.0.0.1:PORT)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Self

from websockets.exceptions import InvalidState
from websockets.frames import Close, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol


class WsOrigin:
    def __init__(self, mode: str, *, eof_file: Path | None = None) -> None:
        assert mode in ("closes", "mute", "vanishes", "chatty", "bad-accept"), mode
        self.mode = mode
        self.eof_file = eof_file
        self.events: list[str] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="ws-origin", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the WebSocket origin did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        proto = ServerProtocol()
        ticks: list[asyncio.Task[None]] = []
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    self._saw("eof")
                    return
                proto.receive_data(data)
                for event in proto.events_received():
                    if isinstance(event, Request):
                        answer = proto.accept(event)
                        if self.mode == "bad-accept":
                            del answer.headers["Sec-WebSocket-Accept"]
                            answer.headers["Sec-WebSocket-Accept"] = "bm90IHRoZSByaWdodCBvbmU="
                        proto.send_response(answer)
                    elif isinstance(event, Frame):
                        self._frame(proto, event)
                        if event.opcode is Opcode.CLOSE and self.mode in ("mute", "bad-accept"):
                            proto.data_to_send()  # the close's answer, left unsent
                        if event.opcode is Opcode.TEXT and self.mode == "chatty" and not ticks:
                            ticks.append(asyncio.create_task(self._tick(proto, writer)))
                for out in proto.data_to_send():
                    if out:
                        writer.write(out)
                    elif writer.can_write_eof():
                        writer.write_eof()
                await writer.drain()
                if self.mode == "vanishes" and any(e.startswith("text ") for e in self.events):
                    await asyncio.sleep(0.1)
                    self._saw("abort")
                    writer.transport.abort()
                    return
        except (ConnectionError, OSError):
            self._saw("eof")
        finally:
            for task in ticks:
                task.cancel()
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()

    async def _tick(self, proto: ServerProtocol, writer: asyncio.StreamWriter) -> None:
        """``chatty``: a text every 20 ms while the session is open."""
        n = 0
        with contextlib.suppress(ConnectionError, OSError, InvalidState):
            while proto.state is State.OPEN and not writer.is_closing():
                await asyncio.sleep(0.02)
                n += 1
                proto.send_text(f"tick {n}".encode())
                for out in proto.data_to_send():
                    writer.write(out)
                await writer.drain()

    def _frame(self, proto: ServerProtocol, frame: Frame) -> None:
        if frame.opcode is Opcode.TEXT:
            text = frame.data.decode()
            self.events.append(f"text {text}")
            proto.send_text(f"echo: {text}".encode())
            if self.mode == "closes":
                proto.send_close(1000, "bye")
        elif frame.opcode is Opcode.CLOSE:
            close = Close.parse(frame.data)
            self.events.append(f"close {close.code} {close.reason}")

    def _saw(self, what: str) -> None:
        self.events.append(what)
        if what == "eof" and self.eof_file is not None:
            self.eof_file.touch()
