"""Recording a WebSocket session: the upgrade forwarded to the origin (ws
over http, wss over https, the origin's certificate verified as the HTTP
forwarding does), its answer relayed, and after a 101 every frame relayed
both ways as it arrives while each whole message is kept (DESIGN.md,
"WebSockets").

The handshake goes out as the agent sent it (its key too, so the origin's
``Sec-WebSocket-Accept`` is the agent's), without hop-by-hop fields but
``Connection: Upgrade`` and ``Upgrade``, and without
``Sec-WebSocket-Extensions``: nothing is compressed, what is kept is what
the application saw. Control frames are relayed too (a ping reaches the
other end, whose pong comes back); a close is answered by wiretape on the
side that sent it (RFC 6455 §5.5.1) and passed on to the other; from the
first close, the ends have the close timeout (``WIRETAPE_WS_CLOSE_TIMEOUT``)
to finish the closing handshake, and one that never answers is
disconnected and named in the session's ending.

Only the recorder imports this module (it dials origins).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass, field

import h11
import httpx
from websockets.protocol import Side

from wiretape.limits import DEFAULT_WS_CLOSE_TIMEOUT, WS_CLOSE_TIMEOUT_VARIABLE
from wiretape.model import (
    CLIENT_WENT_AWAY,
    Ending,
    Frame,
    Message,
    Opcode,
    Request,
    Response,
)
from wiretape.origins import UpstreamOptions
from wiretape.proxy.hop import upstream_request_headers
from wiretape.proxy.http1 import ClientConnection, ClientGone
from wiretape.proxy.upstream import UpstreamClient
from wiretape.proxy.websocket import Peer, describe_close, going_away

#: Seconds to wait for a handshake answer, and for the other side's end
#: once one side has ended without a close.
HANDSHAKE_TIMEOUT = 30.0
CLOSE_GRACE = 2.0


@dataclass
class Session:
    """What crossed so far: the origin's answer (None: none yet), the
    messages in order, how the session ended and why."""

    response: Response | None = None
    messages: list[Message] = field(default_factory=list)
    ending: Ending = Ending.COMPLETE
    ttfb_ns: int | None = None
    error: str | None = None
    #: what the origin sent after the client had gone (no close from it):
    #: it never reached the client, so it is not among ``messages``
    unseen: list[Message] = field(default_factory=list)


class OriginUnreachable(Exception):
    """The origin could not be dialled or did not answer the handshake."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


async def forward(conn: ClientConnection, request: Request, root: str, host: str,
                  client: UpstreamClient, options: UpstreamOptions, session: Session, *, t0: int,
                  max_size: int, close_timeout: float = DEFAULT_WS_CLOSE_TIMEOUT) -> None:
    """Send the upgrade ``request`` to the origin at ``root``
    (``scheme://host[:port]``, ``host`` its Host field), on a connection
    of its own ``client`` opens (dialled and verified as forwarded requests
    are, ``options.resolve`` applied), and relay its
    answer to ``conn``; after a 101, relay the session until both ends are
    done, filling ``session`` as it goes (so what crossed is there when
    this task is cancelled). ``t0``: monotonic ns when the request began;
    ``max_size``: the largest message either end may send (bytes; a larger
    one fails the session with 1009); ``close_timeout``: seconds the ends
    have to finish a closing handshake once it begins.
    Raises OriginUnreachable before any answer (the caller answers 502 or
    504); ClientGone is handled here."""
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            reader, writer = await client.open_stream(root, options.resolve)
    except (TimeoutError, httpx.ConnectTimeout) as exc:
        raise OriginUnreachable(f"no connection to {root} within {HANDSHAKE_TIMEOUT:g} s",
                                timeout=True) from exc
    except (httpx.ConnectError, httpx.InvalidURL) as exc:
        cause = exc.__cause__ or exc  # (the OSError or ssl.SSLError, named as it was)
        raise OriginUnreachable(f"{type(cause).__name__}: {cause}") from exc
    try:
        await _handshake(conn, request, host, reader, writer, session, t0, max_size,
                         close_timeout)
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError, ssl.SSLError):
            writer.close()


async def _handshake(conn: ClientConnection, request: Request, host: str,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     session: Session, t0: int, max_size: int, close_timeout: float) -> None:
    headers = [*upstream_request_headers(request.headers, host.encode("latin-1")),
               (b"Connection", b"Upgrade"), (b"Upgrade", b"websocket")]
    headers = [(k, v) for k, v in headers if k.lower() != b"sec-websocket-extensions"]
    h = h11.Connection(h11.CLIENT)
    try:
        writer.write(h.send(h11.Request(method=b"GET", target=request.target, headers=headers))
                     or b"")
        writer.write(h.send(h11.EndOfMessage()) or b"")
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            await writer.drain()
            head, body = await _answer(h, reader)
    except TimeoutError as exc:
        raise OriginUnreachable(f"the origin did not answer the WebSocket handshake within "
                                f"{HANDSHAKE_TIMEOUT:g} s", timeout=True) from exc
    except (OSError, ssl.SSLError, h11.ProtocolError) as exc:
        raise OriginUnreachable(f"{type(exc).__name__}: {exc}") from exc
    session.ttfb_ns = time.monotonic_ns() - t0
    raw = tuple((bytes(k), bytes(v)) for k, v in head.headers.raw_items())
    reason = bytes(head.reason)
    if head.status_code != 101:
        # Refused (400, 404, 426...): an ordinary exchange, relayed as it came.
        session.response = Response(head.status_code, reason, raw,
                                    (Frame(time.monotonic_ns() - t0, body),) if body else ())
        try:
            await conn.send_head(head.status_code, reason, raw, keep_alive=False)
            await conn.send_data(body)
            await conn.end()
        except ClientGone:
            session.ending, session.error = Ending.CLIENT_GONE, "the client left"
        return
    session.response = Response(101, reason, raw, ())
    shown = tuple((k, v) for k, v in raw if k.lower() != b"sec-websocket-extensions")
    try:
        early = await conn.switch_protocols(reason, shown)
    except ClientGone:
        session.ending, session.error = Ending.CLIENT_GONE, "the client left before the 101"
        return
    agent_reader, agent_writer = conn.streams
    agent = Peer(agent_reader, agent_writer, Side.SERVER, "client", t0, max_size)
    origin = Peer(reader, writer, Side.CLIENT, "server", t0, max_size)
    await _relay(agent, origin, early, bytes(h.trailing_data[0]), session, close_timeout)


async def _answer(h: h11.Connection, reader: asyncio.StreamReader,
                  ) -> tuple[h11.Response | h11.InformationalResponse, bytes]:
    """The origin's answer to the handshake: a 101, or a final response
    and its (de-chunked) body."""
    head: h11.Response | h11.InformationalResponse | None = None
    body = bytearray()
    while True:
        event = h.next_event()
        if event is h11.NEED_DATA:
            h.receive_data(await reader.read(65536))
            continue
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:
                return event, b""
            continue  # 100 and the like: the real answer follows
        if isinstance(event, h11.Response):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed) and head is not None:
            return head, bytes(body)
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            raise OSError("the origin closed the connection during the WebSocket handshake")


async def _relay(agent: Peer, origin: Peer, agent_early: bytes, origin_early: bytes,
                 session: Session, close_timeout: float) -> None:
    """Both directions at once until one side's stream ends (the other is
    then given ``CLOSE_GRACE`` seconds to finish), or until a closing
    handshake begins: from then on both ends have ``close_timeout`` seconds
    to finish it and end their streams, after which their connections are
    closed and the session's ending says which end did not answer."""
    closing, progress = asyncio.Event(), asyncio.Event()
    pumps = [asyncio.create_task(_pump(agent, origin, agent_early, session, closing, progress),
                                 name="wiretape-ws-client"),
             asyncio.create_task(_pump(origin, agent, origin_early, session, closing, progress),
                                 name="wiretape-ws-server")]
    watch = asyncio.create_task(closing.wait(), name="wiretape-ws-closing")
    try:
        done, _ = await asyncio.wait([*pumps, watch], return_when=asyncio.FIRST_COMPLETED)
        if closing.is_set():
            await _finish_closing(agent, origin, pumps, progress, close_timeout)
            _unanswered(agent, origin, session, close_timeout)
            return
        ended = agent if pumps[0] in done else origin
        other = origin if ended is agent else agent
        if session.ending is Ending.COMPLETE:
            # One end went away without a close handshake (RFC 6455 §7.1.5: 1006).
            if ended is agent:
                session.ending = Ending.CLIENT_GONE
                session.error = (ended.failure or "the client closed its connection without "
                                 "a WebSocket close handshake")
                # (what the origin receives: the client's stream is what is kept)
                other.close(*CLIENT_WENT_AWAY)
            else:
                session.ending = Ending.ORIGIN_RESET
                session.error = (ended.failure or "the origin closed its connection without "
                                 "a WebSocket close handshake")
                _told_client(session, other.close(1014, "wiretape: the origin went away"))
            await other.flush()
        pending = [task for task in pumps if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_GRACE)
    except asyncio.CancelledError:
        # wiretape is stopping: both ends are told so (RFC 6455 §7.4.1: 1001).
        await going_away(agent, origin)
        raise
    finally:
        for task in (*pumps, watch):
            task.cancel()
        await asyncio.gather(*pumps, watch, return_exceptions=True)
        await agent.hang_up()
        await origin.hang_up()
        _say_unseen(session)


def _told_client(session: Session, close: Message | None) -> None:
    """Keep a close wiretape sent the client on the origin's behalf as what
    the client received (a server close): a replay sends it in turn."""
    if close is not None:
        session.messages.append(close)


def _say_unseen(session: Session) -> None:
    """Name in the session's error what the origin sent after the client
    had gone (kept as such, not as messages the client received)."""
    unseen = [m for m in session.unseen if m.opcode is not Opcode.PING
              and m.opcode is not Opcode.PONG]
    if not unseen or session.error is None:
        return
    data = [m for m in unseen if m.opcode is not Opcode.CLOSE]
    parts = []
    if data:
        size = sum(len(m.payload) for m in data)
        parts.append(f"{len(data)} message{'s' if len(data) != 1 else ''} ({size} B)")
    for close in (m for m in unseen if m.opcode is Opcode.CLOSE):
        parts.append(f"its close ({describe_close(close)})")
    session.error += (f"; after that the origin sent {' and '.join(parts)}, which never "
                      "reached the client (not kept as its messages)")


async def _finish_closing(agent: Peer, origin: Peer, pumps: list[asyncio.Task[None]],
                          progress: asyncio.Event, close_timeout: float) -> None:
    """Wait, ``close_timeout`` seconds at most, until both streams ended or
    both closing handshakes are done (a close sent and received with each
    end: nothing more can cross, and wiretape may close the connections,
    RFC 6455 §7.1.1; an origin over TLS may wait for its client to close
    first)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + close_timeout
    while not (all(task.done() for task in pumps)
               or (agent.closing_handshake_done and origin.closing_handshake_done)):
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        progress.clear()
        changed = asyncio.create_task(progress.wait())
        try:
            await asyncio.wait([*(task for task in pumps if not task.done()), changed],
                               timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()


def _unanswered(agent: Peer, origin: Peer, session: Session, close_timeout: float) -> None:
    """After a closing handshake (or ``close_timeout`` seconds of it): when
    only one end sent a close, the session's ending names the other, which
    either closed its connection without answering (``client_gone``,
    ``origin_reset``) or was still silent (``timeout``; RFC 6455 §7.1.1
    lets wiretape close the connection then)."""
    if session.ending is not Ending.COMPLETE:
        return  # (a protocol failure, already said)
    closes: dict[str, Message] = {}
    for m in session.messages:
        if m.opcode is Opcode.CLOSE:
            closes.setdefault(m.direction, m)
    if len(closes) != 1:
        return  # both ends closed (or neither: a failure wiretape began)
    ((sender, close),) = closes.items()
    silent = origin if sender == "client" else agent
    who = "the client" if silent is agent else "the origin"
    whose = "the origin's" if sender == "server" else "the client's"
    said = describe_close(close)
    if silent.eof:
        session.ending = Ending.CLIENT_GONE if silent is agent else Ending.ORIGIN_RESET
        session.error = (f"{who} closed its connection without answering {whose} WebSocket "
                         f"close ({said})")
    else:
        session.ending = Ending.TIMEOUT
        session.error = (f"{who} did not answer {whose} WebSocket close ({said}) within "
                         f"{close_timeout:g} s ({WS_CLOSE_TIMEOUT_VARIABLE}); wiretape closed "
                         f"the connection")


async def _pump(src: Peer, dst: Peer, early: bytes, session: Session,
                closing: asyncio.Event, progress: asyncio.Event) -> None:
    """Read ``src`` to the end of its stream: relay each frame to ``dst``,
    keep each whole message in ``session``; ``closing`` is set once a
    closing handshake begins (a close from ``src``, or a frame the protocol
    refused), ``progress`` after each read is handled."""
    data = early
    while True:
        if not data:
            data = await src.read()
        received, frames = src.feed(data)
        if src.direction == "server" and dst.gone:
            # The client went away without a close: what the origin sends
            # now (its answer to the close wiretape sent it for the client
            # among it) never reaches the client, whose side is what a
            # session keeps and a replay plays.
            session.unseen.extend(received.messages)
        else:
            session.messages.extend(received.messages)
        for frame in frames:
            dst.relay(frame)
        failure = src.failure
        if failure is not None and session.ending is Ending.COMPLETE:
            # The protocol failed the session on what ``src`` sent (it told
            # ``src`` why with its close code); the other end is told too.
            who = "client" if src.direction == "client" else "origin"
            session.error = f"the {who} sent what WebSocket forbids: {failure}"
            if src.too_big:
                session.error += (" (--max-body caps a WebSocket message too; raise it to "
                                  "record larger ones)")
            session.ending = (Ending.CLIENT_GONE if src.direction == "client"
                              else Ending.ORIGIN_RESET)
            told = dst.close(1009 if src.too_big else 1002,
                             f"wiretape: the {who} sent a message over the size limit"
                             if src.too_big else f"wiretape: the {who} broke the WebSocket "
                             "protocol")
            if dst.direction == "client":
                _told_client(session, told)
        if received.closed or failure is not None:
            closing.set()
        if received.closed or failure is not None or not data:
            await src.flush()  # the close echoed (and, as a server, the end of stream)
        else:
            src.discard_replies()  # pongs: the other end answers the relayed ping
        await dst.flush()
        progress.set()
        if not data:
            return
        data = b""
