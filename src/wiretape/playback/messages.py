"""Replaying a WebSocket session's messages: which recorded message a live
client message answers to, and which recorded server messages to send
(DESIGN.md, "WebSockets"). Pure: values in, values out.

The recorded session is read as turns: the server messages before the
first client message open it; each client message is followed by the
server messages recorded after it, up to the next client message. Live
data messages (text, binary) are matched in order against the recorded
ones, and a live close against the recorded close: exact when opcode,
payload (and a close's code) are equal, else diverged with the explanation
of how the payloads differ (``matching.explain``: a JSON pointer inside a
JSON message). A live client message with no recorded one left is
missing: nothing was recorded to answer it, so the session ends there.
Pings and pongs are the connection's liveness, answered by the protocol on
each side: they are neither matched nor sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wiretape.matching import explain
from wiretape.model import Message, MessageDecisionJSON, MessagesJSON, Opcode, Request
from wiretape.playback.decide import Mode

#: The opcodes a session's content is made of.
CONTENT = frozenset({Opcode.TEXT, Opcode.BINARY, Opcode.CLOSE})


@dataclass(frozen=True)
class Step:
    """What to do after a live client message: how it was decided, the
    indices of the recorded server messages to send now, and whether the
    replay stops (strict mode, a mismatch)."""

    decision: MessageDecisionJSON
    send: tuple[int, ...]
    stop: bool

    @property
    def end(self) -> bool:
        """Whether the session ends here (a stop, or a missing message)."""
        return self.stop or self.decision["kind"] == "missing"


class SessionScript:
    """The recorded ``messages`` of one session and what is left of them.
    ``mode`` is the replay's (strict: a mismatch stops)."""

    def __init__(self, messages: Sequence[Message], mode: Mode = Mode.STRICT) -> None:
        self.messages = tuple(messages)
        self._mode = mode
        content = [i for i, m in enumerate(self.messages) if m.opcode in CONTENT]
        clients = [i for i in content if self.messages[i].direction == "client"]
        #: the recorded client data messages, in order, and the client's close
        self._clients = [i for i in clients if self.messages[i].opcode is not Opcode.CLOSE]
        self._close = next((i for i in clients if self.messages[i].opcode is Opcode.CLOSE),
                           None)
        self._anchors = clients
        #: per recorded client message (and -1: the opening), the server
        #: messages that followed it
        self._after: dict[int, list[int]] = {-1: []}
        anchor = -1
        for i in content:
            if self.messages[i].direction == "client":
                anchor = i
                self._after[i] = []
            else:
                self._after[anchor].append(i)
        self._next = 0
        self._live = 0
        self.used: set[int] = set()
        self.decisions: list[MessageDecisionJSON] = []

    def opening(self) -> tuple[int, ...]:
        """The server messages to send at once, before any client message."""
        return tuple(self._after[-1])

    def anchor_offset(self, index: int) -> int:
        """The recorded offset (ns) that a server message's pacing counts
        from: that of the client message it followed (0: the opening)."""
        before = [c for c in self._anchors if c < index]
        return self.messages[before[-1]].offset_ns if before else 0

    def peek(self, opcode: Opcode) -> int | None:
        """The index of the recorded client message a live one of
        ``opcode`` is compared with (None: none left)."""
        if opcode is Opcode.CLOSE:
            return self._close if self._close not in self.used else None
        return self._clients[self._next] if self._next < len(self._clients) else None

    def receive(self, live: Message) -> Step:
        """Decide the live client message ``live`` (its payload redacted as
        the recording was)."""
        index = self._live
        self._live += 1
        at = self.peek(live.opcode)
        if at is None:
            decision: MessageDecisionJSON = {
                "index": index, "kind": "missing", "recorded": None,
                "opcode": live.opcode.value, "size": len(live.payload)}
            self.decisions.append(decision)
            return Step(decision, (), self._mode is Mode.STRICT)
        if live.opcode is not Opcode.CLOSE:
            self._next += 1
        self.used.add(at)
        recorded = self.messages[at]
        same = (recorded.opcode is live.opcode and recorded.payload == live.payload
                and recorded.close_code == live.close_code)
        decision = {"index": index, "kind": "exact" if same else "diverged", "recorded": at,
                    "opcode": live.opcode.value, "size": len(live.payload)}
        if not same:
            decision["explanation"] = explain(_as_request(recorded),
                                              _as_request(live)).to_json()
        self.decisions.append(decision)
        stop = not same and self._mode is Mode.STRICT
        return Step(decision, () if stop else tuple(self._after[at]), stop)

    def sent(self, index: int) -> None:
        """Note that recorded server message ``index`` reached the client."""
        self.used.add(index)

    def result(self) -> MessagesJSON:
        """The decisions so far, and the recorded content messages unused."""
        unused = [i for i, m in enumerate(self.messages)
                  if m.opcode in CONTENT and i not in self.used]
        return {"decisions": list(self.decisions), "unused": unused}


def _as_request(message: Message) -> Request:
    """A message as a request for ``explain``: its payload is the body
    (a close's code leads its reason)."""
    body = message.payload
    if message.opcode is Opcode.CLOSE:
        body = f"{message.close_code} ".encode() + body
    return Request(b"WEBSOCKET", message.opcode.value.encode(), (), body)


def counts(results: Sequence[MessagesJSON]) -> tuple[int, int, int, int]:
    """(exact, diverged, missing, unused) over sessions' results."""
    exact = diverged = missing = unused = 0
    for result in results:
        for d in result["decisions"]:
            exact += d["kind"] == "exact"
            diverged += d["kind"] == "diverged"
            missing += d["kind"] == "missing"
        unused += len(result["unused"])
    return exact, diverged, missing, unused
