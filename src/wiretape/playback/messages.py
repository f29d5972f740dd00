"""Replaying a WebSocket session's messages: which recorded message a live
client message answers to, and which recorded server messages to send
(DESIGN.md, "WebSockets"). Pure: values in, values out.

The recorded session is read as turns: the server messages before the
first client message open it; each client message is followed by the
server messages recorded after it, up to the next client message. Live
data messages (text, binary) are matched in order against the recorded
ones, and a live close against the recorded close, by the rules of a
request's body (``playback.decide``): exact when opcode, payload (and a
close's code) are equal; substituted when the replay's declared
substitutions make the payloads equal; equivalent when they differ only by
learned correspondences (``matching.correspond``: ids, clock, key order,
durations) the replay allows, learned from and held to in the replay's
shared :class:`Knowledge` (what its HTTP exchanges learned too); else
diverged, with the explanation of how the payloads differ
(``matching.explain``: a JSON pointer inside a JSON message) and the rules
that would have made it equivalent but are not allowed. A live client
message with no recorded one left is missing: nothing was recorded to
answer it, so the session ends there. Pings and pongs are the connection's
liveness, answered by the protocol on each side: they are neither matched
nor sent.

One counting scheme (the verdict's ``messages``): the live client messages
are decided (exact, substituted, equivalent, diverged, missing); the
recorded client messages no live one matched are unused (a failure, as an
unused exchange is); the recorded server messages the replay did not send
(the client closed or went away first, or the session ended at a
mismatch) are reported as not sent, and fail nothing by themselves. Every
message is named by its index in the session (``#N``, as ``show`` lists
it); a missing one has none.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple, Protocol

from wiretape.matching import correspond, explain
from wiretape.matching.correspond import Learned
from wiretape.matching.documents import session_stream
from wiretape.model import (
    CLIENT_WENT_AWAY,
    Ending,
    Message,
    MessageDecisionJSON,
    MessagesJSON,
    Opcode,
    Request,
    Response,
)
from wiretape.playback.decide import Mode, Policy, apply_substitutions

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


class Knowledge(Protocol):
    """What a replay has learned (the identifier bijection, the clock shift),
    shared by its exchanges and sessions: read before a comparison, held
    after one that corresponds."""

    def learned(self) -> Learned:
        """The state to compare from (not changed by the comparison)."""
        ...

    def hold(self, learned: Learned) -> None:
        """Keep ``learned`` from now on."""
        ...


class OwnKnowledge:
    """A session's own learning, for a session replayed on its own."""

    def __init__(self, learned: Learned | None = None) -> None:
        self.state = learned or Learned()

    def learned(self) -> Learned:
        return self.state

    def hold(self, learned: Learned) -> None:
        self.state = learned


class SessionScript:
    """The recorded ``messages`` of one session and what is left of them.
    ``policy`` is the replay's (its mode: strict, a mismatch stops; its
    allowances and declared substitutions), ``knowledge`` what the replay
    has learned (a session's own when None)."""

    def __init__(self, messages: Sequence[Message], policy: Policy | None = None,
                 knowledge: Knowledge | None = None, *,
                 withheld: Collection[int] = ()) -> None:
        self.messages = tuple(messages)
        self._policy = policy or Policy()
        self._mode = self._policy.mode
        self._knowledge = knowledge or OwnKnowledge(Learned(self._policy.clock_tolerance_s))
        #: recorded messages the client never received (see
        #: :func:`never_received`): neither sent nor counted
        self.withheld = frozenset(withheld)
        content = [i for i, m in enumerate(self.messages)
                   if m.opcode in CONTENT and i not in self.withheld]
        clients = [i for i in content if self.messages[i].direction == "client"]
        #: the recorded client data messages, in order, and the client's close
        self._clients = [i for i in clients if self.messages[i].opcode is not Opcode.CLOSE]
        self._close = next((i for i in clients if self.messages[i].opcode is Opcode.CLOSE),
                           None)
        #: per recorded client message (and -1: the opening), the server
        #: messages that followed it
        self._after: dict[int, list[int]] = {-1: []}
        #: per recorded message, the client message it followed (-1: none)
        self._anchor_of: list[int] = []
        anchor = -1
        counted = frozenset(content)
        for i, message in enumerate(self.messages):
            self._anchor_of.append(anchor)
            if i not in counted:
                continue
            if message.direction == "client":
                anchor = i
                self._after[i] = []
            else:
                self._after[anchor].append(i)
        self._next = 0
        self._live = 0
        self.used: set[int] = set()
        self.decisions: list[MessageDecisionJSON] = []
        #: how the session ended when that is worth saying (a closing
        #: handshake the client never finished), in words; None otherwise
        self.ending: str | None = None

    def opening(self) -> tuple[int, ...]:
        """The server messages to send at once, before any client message."""
        return tuple(self._after[-1])

    def anchor_offset(self, index: int) -> int:
        """The recorded offset (ns) that a server message's pacing counts
        from: that of the client message it followed (0: the opening).
        ``index``: a recorded message's, 0 to ``len(messages) - 1``."""
        anchor = self._anchor_of[index]
        return self.messages[anchor].offset_ns if anchor >= 0 else 0

    @cached_property
    def _named(self) -> tuple[Response]:
        """The server's messages as a response, to name a result's tool
        (built on first use: only explaining a mismatch needs it)."""
        return (session_stream(self.messages),)

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
        decision = {"index": index, "kind": "exact", "recorded": at,
                    "opcode": live.opcode.value, "size": len(live.payload)}
        if (recorded.opcode is not live.opcode or recorded.payload != live.payload
                or recorded.close_code != live.close_code):
            self._judge(recorded, live, decision)
        self.decisions.append(decision)
        kind = decision["kind"]
        stop = self._mode is Mode.STRICT and (
            kind == "diverged"
            or (kind == "substituted" and not self._policy.allow_substitutions))
        return Step(decision, () if stop else tuple(self._after[at]), stop)

    def is_exact(self, live: Message) -> bool:
        """Whether ``live`` equals the recorded message it will be compared
        with byte for byte (nothing to learn or hold)."""
        at = self.peek(live.opcode)
        if at is None:
            return False
        recorded = self.messages[at]
        return (recorded.opcode is live.opcode and recorded.payload == live.payload
                and recorded.close_code == live.close_code)

    def _judge(self, recorded: Message, live: Message, decision: MessageDecisionJSON) -> None:
        """Decide a live message that is not byte for byte its recording:
        substituted, equivalent or diverged, as a request's body is
        (``playback.decide.decide``); fills ``decision`` in."""
        policy = self._policy
        rec_req, live_req = as_request(recorded), as_request(live)
        same_kind = (recorded.opcode is live.opcode and recorded.close_code == live.close_code
                     and live.opcode is not Opcode.BINARY)
        fired: tuple[tuple[str, str, int], ...] = ()
        if same_kind and policy.substitutions:
            replaced, fired = apply_substitutions(live_req, policy.substitutions)
            if fired:
                decision["substitutions"] = [list(f) for f in fired]
                if replaced.body == rec_req.body:
                    decision["kind"] = "substituted"
                    decision["explanation"] = explain(
                        rec_req, live_req, recorded_responses=self._named).to_json()
                    return
                live_req = replaced
        decision["kind"] = "equivalent" if same_kind and self._corresponds(
            rec_req.body, live_req.body, decision, substituted=bool(fired)) else "diverged"
        if decision["kind"] == "diverged":
            decision["explanation"] = explain(rec_req, as_request(live),
                                              recorded_responses=self._named).to_json()

    def _corresponds(self, recorded: bytes, live: bytes, decision: MessageDecisionJSON, *,
                     substituted: bool) -> bool:
        """Whether the payloads differ only by learned correspondences the
        replay allows (their summary, or what was not allowed, noted in
        ``decision``); what a served message needed is held from now on."""
        policy = self._policy
        try:
            rec_text, live_text = recorded.decode("utf-8"), live.decode("utf-8")
        except UnicodeDecodeError:
            return False
        found = correspond.compare(rec_text, live_text, self._knowledge.learned())
        if found.equivalent and not found.fired:
            # Equal values in other bytes: no rule explains that (as a request).
            found.problem = "the JSON values are equal but their bytes are not"
        if not found.equivalent:
            if found.problem is not None:
                decision["unexplained"] = found.problem
            return False
        needed = sorted(rule.value for rule in found.rules)
        not_allowed = [r for r in needed if r not in policy.allow]
        if substituted and not policy.allow_substitutions:
            not_allowed.insert(0, "paths")
        decision["learned"] = found.summary()
        if not_allowed:
            decision["not_allowed"] = not_allowed
        if not not_allowed or self._mode is Mode.DIAGNOSTIC:
            self._knowledge.hold(found.learned)
        return not not_allowed

    def sent(self, index: int) -> None:
        """Note that recorded server message ``index`` reached the client."""
        self.used.add(index)

    def result(self) -> MessagesJSON:
        """The decisions so far, the recorded client messages unused and
        the recorded server messages not sent (content ones, by index)."""
        left = [i for i, m in enumerate(self.messages)
                if m.opcode in CONTENT and i not in self.used and i not in self.withheld]
        unused = [i for i in left if self.messages[i].direction == "client"]
        not_sent = [i for i in left if self.messages[i].direction == "server"]
        result: MessagesJSON = {"decisions": list(self.decisions), "unused": unused,
                                "not_sent": not_sent}
        if self.ending is not None:
            result["ending"] = self.ending
        return result


def never_received(messages: Sequence[Message], ending: Ending) -> tuple[int, ...]:
    """The indices of recorded server messages that are the origin's answer
    to the close wiretape sent it for a client that went away (``ending``
    ``client_gone``, no client close recorded): a run recorded before such
    answers were left out kept them, though the client never received them,
    and a replay must not send them."""
    if ending is not Ending.CLIENT_GONE or any(
            m.direction == "client" and m.opcode is Opcode.CLOSE for m in messages):
        return ()
    return tuple(i for i, m in enumerate(messages)
                 if m.direction == "server" and m.opcode is Opcode.CLOSE
                 and m.close_code == CLIENT_WENT_AWAY[0]
                 and m.payload == CLIENT_WENT_AWAY[1].encode("utf-8"))


def as_request(message: Message) -> Request:
    """A message as a request for ``explain``: its payload is the body
    (a close's code leads its reason), its opcode the target."""
    body = message.payload
    if message.opcode is Opcode.CLOSE:
        body = f"{message.close_code} ".encode() + body
    return Request(b"WEBSOCKET", message.opcode.value.encode(), (), body)


def message_label(d: MessageDecisionJSON) -> str:
    """A live client message named by the recorded one it was compared
    with (``message #3 (client text)``: its index in the session, as
    ``show`` lists it), or, missing, as past the recorded ones (``a client
    close past the recorded ones``)."""
    what = d.get("method") or d["opcode"]  # (an MCP message: its JSON-RPC method)
    if d["recorded"] is None:
        return f"a client {what} past the recorded ones"
    return f"message #{d['recorded']} (client {what})"


class MessageCounts(NamedTuple):
    """The live client messages of replayed sessions by kind, the recorded
    client messages unused, and (reported only) the recorded server
    messages not sent."""

    exact: int = 0
    substituted: int = 0
    equivalent: int = 0
    diverged: int = 0
    missing: int = 0
    unused: int = 0
    not_sent: int = 0


def counts(results: Sequence[MessagesJSON]) -> MessageCounts:
    """The decisions of sessions' results, counted by kind, their unused
    client messages and their server messages not sent (a result written
    before ``not_sent`` existed counts both as unused, as it was judged)."""
    kinds = {"exact": 0, "substituted": 0, "equivalent": 0, "diverged": 0, "missing": 0}
    unused = not_sent = 0
    for result in results:
        for d in result["decisions"]:
            kinds[d["kind"]] += 1
        unused += len(result["unused"])
        not_sent += len(result.get("not_sent", []))
    return MessageCounts(**kinds, unused=unused, not_sent=not_sent)
