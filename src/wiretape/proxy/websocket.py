"""WebSocket sessions on a proxy port: what the recorder and the replayer
share (DESIGN.md, "WebSockets").

Owns the checks of an upgrade request (RFC 6455 §4.2.1), the 101 answer's
``Sec-WebSocket-Accept`` (§4.2.2), and :class:`Peer`: one end of a session
(the agent's socket, or the origin's), whose frames are parsed and written
by the ``websockets`` library's sans-I/O protocol, never by wiretape, with
fragments joined into whole messages (§5.4) as the application sees them.
No extension is negotiated (permessage-deflate included): the payloads that
cross are the application's own bytes.

Knows nothing of recording, replaying or origins.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ssl
import time
from dataclasses import dataclass
from typing import Literal

from websockets.exceptions import InvalidState, PayloadTooBig, ProtocolError
from websockets.frames import Close, CloseCode, Frame
from websockets.frames import Opcode as WireOpcode
from websockets.protocol import SEND_EOF, Protocol, Side, State
from websockets.utils import accept_key

from wiretape.model import Headers, Message, Opcode, Request, header_value, header_values

_READ_SIZE = 65536
#: Close codes a close frame may carry (RFC 6455 §7.4.1, §7.4.2).
_SENDABLE = frozenset(range(3000, 5000)) | {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                                            1011, 1012, 1013, 1014}
#: The longest close reason, in bytes (RFC 6455 §5.5: 125 bytes of payload, 2 for the code).
MAX_REASON = 123


def is_upgrade(headers: Headers) -> bool:
    """Whether a request with these header fields asks to switch to
    WebSocket (an ``Upgrade`` field naming ``websocket``, case-insensitive,
    RFC 6455 §4.1)."""
    return any(b"websocket" in v.lower() for v in header_values(headers, b"upgrade"))


def handshake_problem(method: bytes, http_version: bytes, headers: Headers) -> str | None:
    """What is wrong with an opening handshake (RFC 6455 §4.2.1), in words,
    or None when it is one a server may accept."""
    if method != b"GET":
        return f"a WebSocket upgrade must be a GET request, not {method.decode('latin-1')}"
    if http_version != b"1.1":
        return "a WebSocket upgrade must be an HTTP/1.1 request"
    connection = b",".join(header_values(headers, b"connection")).lower()
    if b"upgrade" not in {part.strip() for part in connection.split(b",")}:
        return "a WebSocket upgrade needs 'Connection: Upgrade' (RFC 6455 §4.2.1)"
    key = header_value(headers, b"sec-websocket-key")
    if key is None:
        return ("the WebSocket upgrade has no Sec-WebSocket-Key header (RFC 6455 §4.2.1); "
                "use a WebSocket client library")
    try:
        if len(base64.b64decode(key.strip(), validate=True)) != 16:
            raise ValueError(key)
    except (ValueError, binascii.Error):
        return ("the WebSocket upgrade's Sec-WebSocket-Key is not 16 bytes in base64 "
                "(RFC 6455 §4.2.1)")
    version = header_value(headers, b"sec-websocket-version")
    if version is None or version.strip() != b"13":
        return "the WebSocket upgrade must say 'Sec-WebSocket-Version: 13' (RFC 6455 §4.2.1)"
    return None


def accepted_headers(recorded: Headers, request: Request,
                     recorded_request: Request | None = None) -> Headers:
    """The header fields of a 101 answer to ``request``: ``recorded`` (an
    origin's 101, in order) with ``Sec-WebSocket-Accept`` made for this
    request's key (RFC 6455 §4.2.2) and no ``Sec-WebSocket-Extensions``.

    When ``recorded_request`` (the handshake as recorded) shows that the
    recorded accept was not the one its key called for (or there was none),
    the recorded field is kept as it was (or left out): the client is given
    the same broken handshake it got, and fails it the same way (RFC 6455
    §4.1: a client fails a connection whose accept is wrong)."""
    key = (header_value(request.headers, b"sec-websocket-key") or b"").strip()
    accept = accept_key(key.decode("latin-1")).encode("ascii")
    if recorded_request is not None and not _accept_was_valid(recorded, recorded_request):
        return tuple((k, v) for k, v in recorded if k.lower() != b"sec-websocket-extensions")
    out, saw = [], False
    for name, value in recorded:
        lower = name.lower()
        if lower == b"sec-websocket-extensions":
            continue
        if lower == b"sec-websocket-accept":
            if not saw:
                out.append((name, accept))
            saw = True
            continue
        out.append((name, value))
    if not saw:
        out.append((b"Sec-WebSocket-Accept", accept))
    return tuple(out)


def _accept_was_valid(recorded: Headers, recorded_request: Request) -> bool:
    """Whether a recorded 101 carried the one ``Sec-WebSocket-Accept`` its
    recorded request's key called for (RFC 6455 §4.2.2); True when the
    recorded request has no key to tell (an imported or older run)."""
    key = header_value(recorded_request.headers, b"sec-websocket-key")
    if key is None:
        return True
    accepts = header_values(recorded, b"sec-websocket-accept")
    expected = accept_key(key.strip().decode("latin-1")).encode("ascii")
    return len(accepts) == 1 and accepts[0].strip() == expected


def close_reason(text: str) -> str:
    """``text`` cut to what a close frame carries (123 bytes of UTF-8)."""
    data = text.encode("utf-8")
    if len(data) <= MAX_REASON:
        return text
    return data[: MAX_REASON - 3].decode("utf-8", "ignore") + "..."


def describe_close(close: Message) -> str:
    """A close message in words, for an error line: its code (``no code``
    when the frame carried none, RFC 6455 §7.1.5) and its reason quoted
    when there is one, as in ``1000 'done'``."""
    said = "no code" if close.close_code is None else str(close.close_code)
    if close.payload:
        said += " " + repr(close.payload.decode("utf-8", "replace"))
    return said


@dataclass
class Received:
    """What one read from a peer gave: the messages it completed
    (fragments joined), and whether one of them was a close."""

    messages: list[Message]
    closed: bool = False


class Peer:
    """One end of a WebSocket session over ``reader``/``writer``:
    ``side`` is the role wiretape plays towards it (SERVER towards the
    agent, CLIENT towards an origin). ``direction`` names what it sends
    (``client`` or ``server``), ``t0`` (monotonic ns) is when the session's
    handshake began: messages carry their offset from it. Messages over
    ``max_size`` bytes fail the session with close code 1009 (RFC 6455
    §7.4.1)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 side: Side, direction: Literal["client", "server"], t0: int,
                 max_size: int) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = Protocol(side, state=State.OPEN, max_size=max_size)
        self.direction = direction
        self._t0 = t0
        self._partial: tuple[Opcode, bytearray] | None = None
        #: the end of its stream was read
        self.eof = False

    @property
    def gone(self) -> bool:
        """Whether this peer's stream ended without its close (it went
        away without a closing handshake, RFC 6455 §7.1.5): nothing sent to
        it any more reaches it."""
        return self.eof and self.protocol.close_rcvd is None

    @property
    def closing_handshake_done(self) -> bool:
        """Whether a close was both sent to and received from this peer
        (RFC 6455 §7.1.2: nothing more may cross)."""
        return self.protocol.close_sent is not None and self.protocol.close_rcvd is not None

    @property
    def too_big(self) -> bool:
        """Whether the protocol failed the session on a message over the cap."""
        return isinstance(self.protocol.parser_exc, PayloadTooBig)

    @property
    def failure(self) -> str | None:
        """Why the protocol failed on what this peer sent (a frame over the
        size cap, a protocol error), or None."""
        exc = self.protocol.parser_exc
        if exc is None or isinstance(exc, EOFError):
            return None
        return f"{type(exc).__name__}: {exc}"

    async def read(self) -> bytes:
        """The next bytes from the peer (b"" at the end of its stream)."""
        try:
            return await self.reader.read(_READ_SIZE)
        except (ConnectionError, OSError, ssl.SSLError):
            return b""

    def feed(self, data: bytes) -> tuple[Received, list[Frame]]:
        """Parse ``data`` (b"": the end of the stream); the messages it
        completed, and its frames as they came (for relaying)."""
        if data:
            self.protocol.receive_data(data)
        else:
            self.eof = True
            self.protocol.receive_eof()
        frames = [e for e in self.protocol.events_received() if isinstance(e, Frame)]
        received = Received([])
        now = time.monotonic_ns() - self._t0
        for frame in frames:
            message = self._assemble(frame, now)
            if message is not None:
                received.messages.append(message)
                received.closed = received.closed or message.opcode is Opcode.CLOSE
        return received, frames

    def _assemble(self, frame: Frame, now: int) -> Message | None:
        side = self.direction
        op = frame.opcode
        if op in (WireOpcode.TEXT, WireOpcode.BINARY):
            kind = Opcode.TEXT if op is WireOpcode.TEXT else Opcode.BINARY
            if not frame.fin:
                self._partial = (kind, bytearray(frame.data))
                return None
            return Message(side, kind, bytes(frame.data), now)
        if op is WireOpcode.CONT:
            if self._partial is None:
                return None  # (the protocol fails such a frame before it gets here)
            self._partial[1].extend(frame.data)
            if not frame.fin:
                return None
            kind, data = self._partial
            self._partial = None
            return Message(side, kind, bytes(data), now)
        if op is WireOpcode.CLOSE:
            close = Close.parse(frame.data)
            code = None if close.code == CloseCode.NO_STATUS_RCVD else int(close.code)
            return Message(side, Opcode.CLOSE, close.reason.encode("utf-8"), now, code)
        kind = Opcode.PING if op is WireOpcode.PING else Opcode.PONG
        return Message(side, kind, bytes(frame.data), now)

    def send(self, message: Message) -> bool:
        """Queue ``message`` whole (call :meth:`flush`); False when the
        session is past sending it (a close was sent or received)."""
        return self.relay(_frame_of(message))

    def relay(self, frame: Frame) -> bool:
        """Queue one frame as it came from the other peer, re-masked as
        this side must (RFC 6455 §5.3); False when past sending it."""
        proto = self.protocol
        if proto.state is not State.OPEN:
            return False
        try:
            op, data = frame.opcode, frame.data
            if op is WireOpcode.TEXT:
                proto.send_text(data, fin=frame.fin)
            elif op is WireOpcode.BINARY:
                proto.send_binary(data, fin=frame.fin)
            elif op is WireOpcode.CONT:
                proto.send_continuation(data, fin=frame.fin)
            elif op is WireOpcode.PING:
                proto.send_ping(data)
            elif op is WireOpcode.PONG:
                proto.send_pong(data)
            else:
                close = Close.parse(data)
                if close.code in _SENDABLE:
                    proto.send_close(close.code, close.reason)
                else:
                    proto.send_close()
        except (InvalidState, ProtocolError):
            return False
        return True

    def close(self, code: int, reason: str) -> Message | None:
        """Start the closing handshake with ``code`` and ``reason`` (cut to
        fit), when it was not begun yet (call :meth:`flush`): the close as
        this peer receives it (a message of the other direction, its offset
        now), or None when none was begun."""
        if self.protocol.state is not State.OPEN:
            return None
        said = close_reason(reason)
        try:
            self.protocol.send_close(code, said)
        except (InvalidState, ProtocolError):
            return None
        other: Literal["client", "server"] = "server" if self.direction == "client" else "client"
        return Message(other, Opcode.CLOSE, said.encode("utf-8"), time.monotonic_ns() - self._t0,
                       code)

    def discard_replies(self) -> None:
        """Drop what the protocol queued in answer to what was read (a pong
        to a relayed ping: the other peer answers it itself)."""
        self.protocol.data_to_send()

    async def flush(self) -> bool:
        """Write what the protocol queued; False when the peer is gone."""
        try:
            for data in self.protocol.data_to_send():
                if data is SEND_EOF or data == b"":
                    # The end of this side's stream (RFC 6455 §7.1.1: the
                    # server closes first); over TLS, which cannot half-close,
                    # the connection is closed.
                    if self.writer.is_closing():
                        continue
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    else:
                        self.writer.close()
                        return True
                else:
                    self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, OSError, RuntimeError, ssl.SSLError):
            return False
        return True

    def abort(self) -> None:
        """Drop the connection at once, unsent bytes too (never raises): a
        read waiting on it returns the end of the stream."""
        with contextlib.suppress(ConnectionError, OSError, RuntimeError, ssl.SSLError):
            self.writer.transport.abort()

    async def hang_up(self) -> None:
        """Close the socket (never raises)."""
        with contextlib.suppress(ConnectionError, OSError, RuntimeError, ssl.SSLError,
                                 TimeoutError):
            self.writer.close()
            await asyncio.wait_for(self.writer.wait_closed(), 1.0)


def _frame_of(message: Message) -> Frame:
    """A whole message as one frame (a close: its code and reason)."""
    if message.opcode is Opcode.CLOSE:
        if message.close_code is None:
            return Frame(WireOpcode.CLOSE, b"")
        reason = message.payload.decode("utf-8", "replace")
        return Frame(WireOpcode.CLOSE, Close(message.close_code, reason).serialize())
    op = {Opcode.TEXT: WireOpcode.TEXT, Opcode.BINARY: WireOpcode.BINARY,
          Opcode.PING: WireOpcode.PING, Opcode.PONG: WireOpcode.PONG}[message.opcode]
    return Frame(op, message.payload)


async def going_away(*peers: Peer) -> None:
    """Close each peer's session with 1001 "wiretape is stopping", giving
    the writes a second at most (never raises): for a task being cancelled."""
    for peer in peers:
        peer.close(1001, "wiretape is stopping")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await peer.flush()
