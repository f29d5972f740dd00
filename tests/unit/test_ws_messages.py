"""Replaying a WebSocket session's messages (playback.messages): which
recorded message a live one is compared with, what is sent after it, and
what is left unused."""

from __future__ import annotations

from wiretape.matching.correspond import Learned
from wiretape.model import Ending, Message, Opcode
from wiretape.playback.decide import Mode, Policy, Substitution
from wiretape.playback.messages import (
    MessageCounts,
    OwnKnowledge,
    SessionScript,
    counts,
    message_label,
    never_received,
)


def c(payload: bytes, at: int, op: Opcode = Opcode.TEXT, code: int | None = None) -> Message:
    return Message("client", op, payload, at, code)


def s(payload: bytes, at: int, op: Opcode = Opcode.TEXT, code: int | None = None) -> Message:
    return Message("server", op, payload, at, code)


RECORDED = (
    s(b'{"type":"session.created"}', 1),          # 0: opens the session
    c(b'{"type":"response.create","input":"hi"}', 2),  # 1
    s(b'{"type":"response.created"}', 3),         # 2
    s(b"", 4, Opcode.PING),                       # 3: liveness, never sent
    s(b'{"type":"response.completed"}', 5),       # 4
    c(b"", 6, Opcode.PONG),                       # 5: never matched
    c(b'{"type":"response.create","input":"more"}', 7),  # 6
    s(b'{"type":"response.completed"}', 8),       # 7
    c(b"done", 9, Opcode.CLOSE, 1000),            # 8
    s(b"done", 10, Opcode.CLOSE, 1000),           # 9
)


def test_an_exact_session_sends_each_turn_after_its_client_message() -> None:
    script = SessionScript(RECORDED)
    assert script.opening() == (0,)
    script.sent(0)
    first = script.receive(c(b'{"type":"response.create","input":"hi"}', 0))
    assert (first.decision["kind"], first.decision["recorded"], first.send) == ("exact", 1, (2, 4))
    for i in first.send:
        script.sent(i)
    second = script.receive(c(b'{"type":"response.create","input":"more"}', 0))
    assert second.send == (7,) and not second.stop
    script.sent(7)
    close = script.receive(c(b"done", 0, Opcode.CLOSE, 1000))
    assert (close.decision["kind"], close.send) == ("exact", (9,))
    script.sent(9)
    result = script.result()
    assert [d["kind"] for d in result["decisions"]] == ["exact", "exact", "exact"]
    assert (result["unused"], result["not_sent"]) == ([], [])
    assert counts([result]) == MessageCounts(exact=3)
    # pacing counts from the client message a server message followed
    assert script.anchor_offset(4) == 2 and script.anchor_offset(0) == 0


def test_a_changed_message_diverges_with_its_pointer_and_strict_stops() -> None:
    script = SessionScript(RECORDED, Policy(mode=Mode.STRICT))
    step = script.receive(c(b'{"type":"response.create","input":"hello"}', 0))
    assert step.decision["kind"] == "diverged" and step.stop and step.end
    assert step.send == ()
    span = step.decision["explanation"]["spans"][0]
    assert span["pointer"] == "/input"
    assert (span["recorded"], span["live"]) == ("hi", "hello")
    # the recorded client messages left are unused; the server ones were not sent
    result = script.result()
    assert (result["unused"], result["not_sent"]) == ([6, 8], [0, 2, 4, 7, 9])
    assert counts([result]) == MessageCounts(diverged=1, unused=2, not_sent=5)
    # a result written before not_sent existed is counted as it was judged
    assert counts([{"decisions": [], "unused": [0, 6]}]) == MessageCounts(unused=2)


def test_a_message_is_labelled_by_its_index_in_the_session() -> None:
    script = SessionScript(RECORDED, Policy(mode=Mode.DIAGNOSTIC))
    script.receive(c(b'{"type":"response.create","input":"hi"}', 0))
    script.receive(c(b'{"type":"response.create","input":"more"}', 0))
    script.receive(c(b"done", 0, Opcode.CLOSE, 1000))
    extra = script.receive(c(b"again", 0))
    labels = [message_label(d) for d in script.decisions]
    assert labels == ["message #1 (client text)", "message #6 (client text)",
                      "message #8 (client close)", "a client text past the recorded ones"]
    assert extra.decision["kind"] == "missing"


def test_a_diagnostic_replay_serves_past_a_divergence() -> None:
    script = SessionScript(RECORDED, Policy(mode=Mode.DIAGNOSTIC))
    step = script.receive(c(b'{"type":"response.create","input":"hello"}', 0))
    assert step.decision["kind"] == "diverged" and not step.stop and not step.end
    assert step.send == (2, 4)


def test_a_message_past_the_recording_is_missing_and_ends_the_session() -> None:
    script = SessionScript(RECORDED, Policy(mode=Mode.DIAGNOSTIC))
    script.receive(c(b'{"type":"response.create","input":"hi"}', 0))
    script.receive(c(b'{"type":"response.create","input":"more"}', 0))
    extra = script.receive(c(b'{"type":"response.create","input":"again"}', 0))
    assert extra.decision == {"index": 2, "kind": "missing", "recorded": None,
                              "opcode": "text", "size": 42}
    assert extra.end and not extra.stop
    # the close is still matched against the recorded close, not the data messages
    assert script.peek(Opcode.CLOSE) == 8
    # (no server message was marked sent here: all five are not sent)
    assert counts([script.result()]) == MessageCounts(exact=2, missing=1, unused=1, not_sent=5)


def test_a_close_with_another_code_diverges() -> None:
    script = SessionScript(RECORDED, Policy(mode=Mode.DIAGNOSTIC))
    step = script.receive(c(b"done", 0, Opcode.CLOSE, 1001))
    assert step.decision["kind"] == "diverged" and step.decision["recorded"] == 8
    assert step.decision["explanation"]["spans"][0]["live"].startswith("1001")


# Learned correspondences (matching.correspond), as a request's body has them.

REC_ID, LIVE_ID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
ID_SESSION = (
    c(b'{"type":"turn","id":"%s","at":"2026-03-01T10:00:00Z"}' % REC_ID.encode(), 1),
    s(b'{"type":"ok"}', 2),
    c(b'{"type":"again","id":"%s"}' % REC_ID.encode(), 3),
    s(b'{"type":"ok"}', 4),
)
#: when the recording ran (epoch seconds): the clock reading above lies in it
RECORDED_SPAN = (1772359200.0 - 60, 1772359200.0 + 60)


def live_turn(uuid: str = LIVE_ID, at: str = "2026-03-02T11:30:00Z") -> Message:
    return c(b'{"type":"turn","id":"%s","at":"%s"}' % (uuid.encode(), at.encode()), 0)


def allowing(*rules: str, mode: Mode = Mode.STRICT) -> Policy:
    return Policy(mode=mode, allow=frozenset(rules), recorded_span=RECORDED_SPAN)


def test_a_fresh_id_and_clock_reading_are_equivalent_when_allowed() -> None:
    knowledge = OwnKnowledge(Learned(recorded_span=RECORDED_SPAN))
    script = SessionScript(ID_SESSION, allowing("ids", "clock"), knowledge)
    step = script.receive(live_turn())
    d = step.decision
    assert (d["kind"], d["recorded"], step.send, step.stop) == ("equivalent", 0, (1,), False)
    assert "explanation" not in d and "not_allowed" not in d
    assert {(e["rule"], tuple(e["pointers"])) for e in d["learned"]} == {
        ("ids", ("/id",)), ("clock", ("/at",))}
    # what was learned is held: the recorded id must come back as the same live id
    assert knowledge.state.forward[REC_ID] == LIVE_ID
    assert knowledge.state.shift_s == 91800.0
    again = script.receive(c(b'{"type":"again","id":"%s"}' % LIVE_ID.encode(), 0))
    assert again.decision["kind"] == "equivalent" and again.send == (3,)
    script.sent(1)
    script.sent(3)
    assert counts([script.result()]) == MessageCounts(equivalent=2)


def test_without_the_allowance_strict_stops_naming_the_rule_and_the_pointer() -> None:
    script = SessionScript(ID_SESSION, allowing("ids"))
    step = script.receive(live_turn())
    d = step.decision
    assert (d["kind"], step.stop, step.send) == ("diverged", True, ())
    assert d["not_allowed"] == ["clock"]
    assert {e["rule"] for e in d["learned"]} == {"ids", "clock"}
    assert [span["pointer"] for span in d["explanation"]["spans"]] == ["/id", "/at"]


def test_a_broken_bijection_diverges() -> None:
    """The recorded id met one live id; a message that maps it to another
    is a real difference, allowances or not."""
    script = SessionScript(ID_SESSION, allowing("ids", "clock", mode=Mode.DIAGNOSTIC),
                           OwnKnowledge(Learned(recorded_span=RECORDED_SPAN)))
    assert script.receive(live_turn()).decision["kind"] == "equivalent"
    other = "11111111-2222-4333-8444-555555555555"
    step = script.receive(c(b'{"type":"again","id":"%s"}' % other.encode(), 0))
    assert step.decision["kind"] == "diverged"
    assert "earlier in this replay" in step.decision["unexplained"]


def test_knowledge_is_shared_with_what_the_replay_learned_elsewhere() -> None:
    """An id learned before the session (in a request) maps the same in a
    message: met the other way round, it breaks the bijection."""
    learned = Learned(recorded_span=RECORDED_SPAN)
    learned.forward[REC_ID], learned.backward[LIVE_ID] = LIVE_ID, REC_ID
    knowledge = OwnKnowledge(learned)
    script = SessionScript(ID_SESSION, allowing("ids", "clock"), knowledge)
    assert script.receive(live_turn()).decision["kind"] == "equivalent"
    other = OwnKnowledge(Learned(recorded_span=RECORDED_SPAN))
    other.state.forward[REC_ID] = "99999999-2222-4333-8444-555555555555"
    other.state.backward["99999999-2222-4333-8444-555555555555"] = REC_ID
    step = SessionScript(ID_SESSION, allowing("ids", "clock"), other).receive(live_turn())
    assert step.decision["kind"] == "diverged" and step.stop


def test_a_declared_substitution_makes_a_message_substituted() -> None:
    session = (c(b'{"cwd":"/home/rec/work"}', 1), s(b'{"ok":1}', 2))
    subs = (Substitution(b"/home/rec/work", b"/tmp/sandbox/work"),)
    live = c(b'{"cwd":"/tmp/sandbox/work"}', 0)
    allowed = SessionScript(session, Policy(substitutions=subs, allow_substitutions=True))
    step = allowed.receive(live)
    assert (step.decision["kind"], step.stop, step.send) == ("substituted", False, (1,))
    assert step.decision["substitutions"] == [["/home/rec/work", "/tmp/sandbox/work", 1]]
    refused = SessionScript(session, Policy(substitutions=subs)).receive(live)
    assert (refused.decision["kind"], refused.stop) == ("substituted", True)


def test_the_origin_s_answer_to_wiretape_s_own_close_is_never_sent() -> None:
    # A run recorded before such answers were left out: the client went
    # away after message 2; the origin answered wiretape's 1001.
    recorded = (c(b"hi", 1), s(b"one", 2), s(b"two", 3),
                s(b"the client went away", 4, Opcode.CLOSE, 1001))
    withheld = never_received(recorded, Ending.CLIENT_GONE)
    assert withheld == (3,)
    script = SessionScript(recorded, withheld=withheld)
    step = script.receive(c(b"hi", 0))
    assert step.send == (1, 2)
    script.sent(1)
    # the client left before "two": not sent, reported; the close is neither
    assert (script.result()["unused"], script.result()["not_sent"]) == ([], [2])
    # a session the client closed itself, or one that ended otherwise, keeps it
    assert never_received((*recorded, c(b"", 5, Opcode.CLOSE, 1000)), Ending.CLIENT_GONE) == ()
    assert never_received(recorded, Ending.COMPLETE) == ()
