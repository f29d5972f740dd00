"""Replaying a WebSocket session's messages (playback.messages): which
recorded message a live one is compared with, what is sent after it, and
what is left unused."""

from __future__ import annotations

from wiretape.model import Message, Opcode
from wiretape.playback.decide import Mode
from wiretape.playback.messages import SessionScript, counts


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
    assert result["unused"] == []
    assert counts([result]) == (3, 0, 0, 0)
    # pacing counts from the client message a server message followed
    assert script.anchor_offset(4) == 2 and script.anchor_offset(0) == 0


def test_a_changed_message_diverges_with_its_pointer_and_strict_stops() -> None:
    script = SessionScript(RECORDED, Mode.STRICT)
    step = script.receive(c(b'{"type":"response.create","input":"hello"}', 0))
    assert step.decision["kind"] == "diverged" and step.stop and step.end
    assert step.send == ()
    span = step.decision["explanation"]["spans"][0]
    assert span["pointer"] == "/input"
    assert (span["recorded"], span["live"]) == ("hi", "hello")
    # everything else recorded is unused
    assert script.result()["unused"] == [0, 2, 4, 6, 7, 8, 9]


def test_a_diagnostic_replay_serves_past_a_divergence() -> None:
    script = SessionScript(RECORDED, Mode.DIAGNOSTIC)
    step = script.receive(c(b'{"type":"response.create","input":"hello"}', 0))
    assert step.decision["kind"] == "diverged" and not step.stop and not step.end
    assert step.send == (2, 4)


def test_a_message_past_the_recording_is_missing_and_ends_the_session() -> None:
    script = SessionScript(RECORDED, Mode.DIAGNOSTIC)
    script.receive(c(b'{"type":"response.create","input":"hi"}', 0))
    script.receive(c(b'{"type":"response.create","input":"more"}', 0))
    extra = script.receive(c(b'{"type":"response.create","input":"again"}', 0))
    assert extra.decision == {"index": 2, "kind": "missing", "recorded": None,
                              "opcode": "text", "size": 42}
    assert extra.end and not extra.stop
    # the close is still matched against the recorded close, not the data messages
    assert script.peek(Opcode.CLOSE) == 8
    assert counts([script.result()]) == (2, 0, 1, 6)


def test_a_close_with_another_code_diverges() -> None:
    script = SessionScript(RECORDED, Mode.DIAGNOSTIC)
    step = script.receive(c(b"done", 0, Opcode.CLOSE, 1001))
    assert step.decision["kind"] == "diverged" and step.decision["recorded"] == 8
    assert step.decision["explanation"]["spans"][0]["live"].startswith("1001")
