"""The Responses API over WebSocket, as the fake provider speaks it.

``GET .../responses`` with ``Upgrade: websocket`` (RFC 6455) opens a
session: the client sends ``{"type": "response.create", ...}`` events (the
fields of a ``POST .../responses`` body, at the top level or under
``response``), and for each the server sends, one text message per event,
the events its SSE stream would carry for the next turn of the script
(``response.created`` ... ``response.completed``). An event of another
type, or one the script cannot answer, gets an ``{"type": "error"}``
event. Frames are the ``websockets`` library's sans-I/O protocol's.

As the service does for Codex (``openai/codex``, codex-rs
``core/src/client.rs``: ``prewarm_websocket``, ``prepare_websocket_request``):
a ``response.create`` with ``"generate": false`` is a warm-up, answered
``response.created`` and ``response.completed`` with no output and no turn
of the script used; a ``previous_response_id`` must name a response this
session gave (else the ``previous_response_not_found`` error), and the
``input`` then holds only the items after that response's.

``GET .../realtime`` opens a Realtime API session instead
(``openai_realtime``). It must not know about recording or replay.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State
from websockets.utils import accept_key

from wiretape.testing.openai_realtime import RealtimeSession, is_realtime
from wiretape.testing.playbook import ReceivedRequest
from wiretape.testing.wire import CREATED, Reply

#: What a session asks of the playbook: (method, target, headers, body) to the reply.
Answer = Callable[[str, str, tuple[tuple[bytes, bytes], ...], bytes],
                  tuple[ReceivedRequest, Reply]]

_READ_SIZE = 65_536


def is_websocket_upgrade(method: str, target: str, headers: tuple[tuple[bytes, bytes], ...]
                         ) -> bool:
    """Whether the request opens a WebSocket session (a GET to a path
    ending in ``/responses`` or ``/realtime`` asking ``Upgrade: websocket``
    with a key)."""
    names = {k.lower(): v for k, v in headers}
    path = target.split("?", 1)[0].rstrip("/")
    return (method == "GET" and (path.endswith("/responses") or is_realtime(target))
            and b"websocket" in names.get(b"upgrade", b"").lower()
            and b"sec-websocket-key" in names)


def accept_headers(headers: tuple[tuple[bytes, bytes], ...]) -> list[tuple[bytes, bytes]]:
    """The 101 answer's header fields (RFC 6455 §4.2.2)."""
    key = next(v for k, v in headers if k.lower() == b"sec-websocket-key").strip()
    return [(b"upgrade", b"websocket"), (b"connection", b"Upgrade"),
            (b"sec-websocket-accept", accept_key(key.decode("latin-1")).encode("ascii")),
            (b"server", b"wiretape-fake-provider")]


def _events(reply: Reply) -> list[bytes]:
    """The JSON of each event of a reply: an SSE stream's data lines, or an
    error body as an ``error`` event."""
    if not reply.streamed:
        body = json.loads(b"".join(reply.chunks))
        error = body.get("error") if isinstance(body, dict) else None
        return [json.dumps({"type": "error", "status": reply.status, "error": error},
                           separators=(",", ":")).encode("utf-8")]
    out = []
    for chunk in reply.chunks:
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(line[len(b"data: "):])
    return out


async def serve_session(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        early: bytes, target: str, headers: tuple[tuple[bytes, bytes], ...],
                        answer: Answer, delay: float) -> None:
    """Play one session after the 101 was sent, until the client closes it
    (``early``: bytes the client sent with its handshake; ``delay``:
    seconds between two events)."""
    proto = Protocol(Side.SERVER, state=State.OPEN, max_size=None)
    path = target.split("?", 1)[0]
    realtime = RealtimeSession(target, headers, answer) if is_realtime(target) else None
    given: set[str] = set()  # the response ids this session gave

    def respond(text: bytes) -> list[bytes]:
        if realtime is not None:
            return realtime.receive(text)
        return _answer_event(text, path, headers, answer, given)

    if realtime is not None:
        for out in realtime.opening():
            proto.send_text(out)
        writer.write(b"".join(proto.data_to_send()))
    data = early
    while True:
        if not data:
            try:
                data = await reader.read(_READ_SIZE)
            except ConnectionError:
                return
        if data:
            proto.receive_data(data)
        else:
            proto.receive_eof()
        for event in proto.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                for index, out in enumerate(respond(bytes(event.data))):
                    if index:
                        await asyncio.sleep(delay)
                    if proto.state is State.OPEN:
                        proto.send_text(out)
                        writer.write(b"".join(proto.data_to_send()))
                        await writer.drain()
        for out in proto.data_to_send():
            if out:
                writer.write(out)
            elif writer.can_write_eof():
                writer.write_eof()
        await writer.drain()
        if not data or proto.state is State.CLOSED:
            return
        data = b""


def _error(status: int, message: str, kind: str = "invalid_request_error",
           code: str | None = None) -> bytes:
    error: dict[str, object] = {"message": message, "type": kind}
    if code is not None:
        error["code"] = code
    return json.dumps({"type": "error", "status": status, "error": error},
                      separators=(",", ":")).encode("utf-8")


def _answer_event(text: bytes, path: str, headers: tuple[tuple[bytes, bytes], ...],
                  answer: Answer, given: set[str]) -> list[bytes]:
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if not isinstance(event, dict) or event.get("type") != "response.create":
        kind = event.get("type") if isinstance(event, dict) else None
        return [_error(400, "wiretape fake provider: expected a response.create event, got "
                            f"{kind if isinstance(kind, str) else 'something else'}")]
    inner = event.get("response")
    body = dict(inner) if isinstance(inner, dict) else {
        k: v for k, v in event.items() if k != "type"}
    previous = body.get("previous_response_id")
    if previous is not None and previous not in given:
        return [_error(400, f"Previous response with id '{previous}' not found.",
                       code="previous_response_not_found")]
    if body.get("generate") is False:
        return _warm_up(body, given)
    body["stream"] = True
    _, reply = answer("POST", path, headers, json.dumps(body).encode("utf-8"))
    events = _events(reply)
    for raw in events:
        done = json.loads(raw)
        if done.get("type") == "response.completed":
            given.add(done["response"]["id"])
    return events


def _warm_up(body: dict[str, object], given: set[str]) -> list[bytes]:
    """``response.created`` and ``response.completed`` of a response with no
    output (``generate: false``), its id ``resp_fake_warmup_N``."""
    rid = f"resp_fake_warmup_{len(given) + 1}"
    given.add(rid)
    response = {"id": rid, "object": "response", "created_at": CREATED, "status": "completed",
                "model": body.get("model"), "output": [],
                "previous_response_id": body.get("previous_response_id"),
                "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}
    return [json.dumps({"type": name, "sequence_number": seq,
                        "response": {**response, "status": status}},
                       separators=(",", ":")).encode("utf-8")
            for seq, (name, status) in enumerate((("response.created", "in_progress"),
                                                  ("response.completed", "completed")))]
