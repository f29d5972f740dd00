"""Replaying a WebSocket session: wiretape answers the upgrade with the
recorded 101 itself (its ``Sec-WebSocket-Accept`` made for the live key)
and plays the recorded messages (DESIGN.md, "WebSockets"); no origin is
dialled.

The recorded server messages that opened the session are sent at once;
each live client message is decided by ``playback.messages`` and the server
messages recorded after its counterpart are sent after it, paced as
recorded (their offsets from that client message's) or at once (``fast``).
Each live message is redacted and decided holding the replay's lock (the
redaction rules and what the replay learned are shared with its HTTP
exchanges), off the event loop when it is large. A strict replay that meets
a mismatch closes the session with 1008 and the reason (RFC 6455 §7.4.1),
and the replay stops; a missing message (nothing recorded answers it) ends
the session so in any mode. Once a close crossed, a client that has not
answered it and ended its stream within the close timeout
(``WIRETAPE_WS_CLOSE_TIMEOUT``) is disconnected, the session's ``ending``
saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from websockets.protocol import Side

from wiretape.limits import DEFAULT_WS_CLOSE_TIMEOUT, WS_CLOSE_TIMEOUT_VARIABLE
from wiretape.model import Exchange, Message, MessagesJSON, Opcode, Request
from wiretape.playback.decide import INLINE_BYTES
from wiretape.playback.messages import SessionScript, Step, message_label
from wiretape.playback.pacing import Pace
from wiretape.proxy.http1 import ClientConnection, ClientGone
from wiretape.proxy.websocket import Peer, accepted_headers, describe_close, going_away

#: Seconds a session wiretape closes (a strict stop, a missing message)
#: waits for the client's end of stream.
CLOSE_GRACE = 2.0


#: Redacts a live client message as the recording was, given the recorded
#: payload it is compared with (None: there is none).
Redact = Callable[[bytes, bytes | None], bytes]


def is_session(exchange: Exchange) -> bool:
    """Whether ``exchange`` recorded a WebSocket session (a 101 answer)."""
    return exchange.response is not None and exchange.response.status == 101


class _Closing:
    """The closing handshake's deadline: once a close crossed (the recorded
    server close sent, or the client's received), the client has
    ``timeout`` seconds to answer it and end its stream; then its
    connection is closed and the script's ``ending`` says so."""

    def __init__(self, peer: Peer, script: SessionScript, timeout: float) -> None:
        self._peer, self._script, self._timeout = peer, script, timeout
        self._task: asyncio.Task[None] | None = None

    def begin(self, close: Message) -> None:
        """A close crossed (``close``: the first, either way): start the
        deadline, once."""
        if self._task is None:
            self._task = asyncio.create_task(self._expire(close),
                                             name="wiretape-ws-replay-closing")

    async def _expire(self, close: Message) -> None:
        await asyncio.sleep(self._timeout)
        said = describe_close(close)
        if close.direction == "server" and self._peer.protocol.close_rcvd is None:
            what = f"did not answer the recorded server's WebSocket close ({said})"
        else:
            what = f"did not end its connection after the WebSocket close ({said})"
        self._script.ending = (f"the client {what} within {self._timeout:g} s "
                               f"({WS_CLOSE_TIMEOUT_VARIABLE}); wiretape closed the connection")
        self._peer.abort()  # the read waiting on the client ends

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def play(conn: ClientConnection, request: Request, exchange: Exchange,
               script: SessionScript, *, pace: Pace, redact: Redact,
               on_stop: Callable[[Step], str],
               lock: AbstractAsyncContextManager[object] | None = None,
               close_timeout: float = DEFAULT_WS_CLOSE_TIMEOUT) -> MessagesJSON:
    """Answer ``request`` with ``exchange``'s 101 and play ``script`` until
    the client's stream ends; ``on_stop(step)`` is called at a strict
    mismatch and gives the close reason; ``lock`` is held while a message
    that is not exact is decided (the script's knowledge is shared);
    ``close_timeout``: seconds the client has, once a close crossed, to
    answer it and end its stream (then ``script.ending`` says it did not).
    Returns the session's decisions (also when this task is cancelled:
    ``script`` has them)."""
    assert exchange.response is not None
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        early = await conn.switch_protocols(exchange.response.reason,
                                            accepted_headers(exchange.response.headers,
                                                             request, exchange.request))
    except ClientGone:
        return script.result()
    reader, writer = conn.streams
    peer = Peer(reader, writer, Side.SERVER, "client", 0, conn.max_body)
    closing = _Closing(peer, script, close_timeout)
    queue: asyncio.Queue[tuple[tuple[int, ...], float]] = asyncio.Queue()
    sender = asyncio.create_task(_send(peer, script, queue, pace, closing),
                                 name="wiretape-ws-replay-send")
    queue.put_nowait((script.opening(), t0))
    try:
        data = early
        while True:
            if not data:
                data = await peer.read()
            received, _ = peer.feed(data)
            for live in received.messages:
                if live.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CLOSE):
                    continue  # pings are answered by the protocol itself
                step = await decide(script, live, redact, lock)
                if step.end:
                    reason = on_stop(step) if step.stop else (
                        f"wiretape replay: {message_label(step.decision)} (missing: nothing "
                        "recorded answers it)")
                    sender.cancel()
                    peer.close(1008, reason)
                    await peer.flush()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CLOSE_GRACE):
                            while await peer.read():
                                pass
                    return script.result()
                if live.opcode is Opcode.CLOSE:
                    closing.begin(live)
                    # The protocol answered the close (RFC 6455 §5.5.1): that
                    # is the recorded answer to it; nothing more can be sent.
                    for index in step.send:
                        if script.messages[index].opcode is Opcode.CLOSE:
                            script.sent(index)
                    continue
                queue.put_nowait((step.send, loop.time()))
            await peer.flush()
            if not data:
                return script.result()
            data = b""
    except asyncio.CancelledError:
        await going_away(peer)
        raise
    finally:
        sender.cancel()
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        await peer.hang_up()


async def decide(script: SessionScript, live: Message, redact: Redact,
                  lock: AbstractAsyncContextManager[object] | None) -> Step:
    """``script.receive`` of ``live`` redacted, holding ``lock`` (redaction
    learns into rules the replay's HTTP exchanges share, and the script's
    knowledge is shared too): on the loop when the payload is small, else
    on a worker thread, as an HTTP request is (also ``mcp_replay``'s)."""
    if lock is None:
        return _receive(script, live, redact)
    async with lock:
        if len(live.payload) <= INLINE_BYTES:
            return _receive(script, live, redact)
        return await asyncio.to_thread(_receive, script, live, redact)


def _receive(script: SessionScript, live: Message, redact: Redact) -> Step:
    return script.receive(_redacted(live, script, redact))


def _redacted(live: Message, script: SessionScript, redact: Redact) -> Message:
    nxt = script.peek(live.opcode)
    payload = redact(live.payload, script.messages[nxt].payload if nxt is not None else None)
    return live if payload == live.payload else Message(
        live.direction, live.opcode, payload, live.offset_ns, live.close_code)


async def _send(peer: Peer, script: SessionScript,
                queue: asyncio.Queue[tuple[tuple[int, ...], float]], pace: Pace,
                closing: _Closing) -> None:
    """Send each batch of recorded server messages in order, paced from
    the moment its client message arrived (``fast``: at once); a close
    sent starts ``closing``'s deadline."""
    loop = asyncio.get_running_loop()
    while True:
        batch, since = await queue.get()
        for index in batch:
            message = script.messages[index]
            if pace is Pace.RECORDED:
                anchor = script.anchor_offset(index)
                delay = since + (message.offset_ns - anchor) / 1e9 - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            if not peer.send(message):
                return
            script.sent(index)
            if message.opcode is Opcode.CLOSE:
                closing.begin(message)
            if not await peer.flush():
                return
