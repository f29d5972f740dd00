"""A WebSocket session is played after any served handshake (exact,
substituted, equivalent): its message results are listed in the replay's
text and in the report whatever the handshake's kind."""

from __future__ import annotations

from wiretape.inspect.report import replays
from wiretape.model import MessageDecisionJSON, ReplayRow
from wiretape.playback.text import verdict_details
from wiretape.playback.verdict import Verdict, compute

DIVERGED: MessageDecisionJSON = {
    "index": 1, "kind": "diverged", "recorded": 3, "opcode": "text", "size": 17,
    "explanation": {"first_line": "the message's body differs at /input/0/text"},  # type: ignore[typeddict-item]
}


def verdict(kind: str) -> Verdict:
    row: ReplayRow = {
        "index": 0, "kind": kind, "seq": 0, "served": True,  # type: ignore[typeddict-item]
        "method": "GET", "target": "/v1/realtime",
        "detail": {"learned": [], "messages": {
            "decisions": [{"index": 0, "kind": "exact", "recorded": 1, "opcode": "text",
                           "size": 9}, DIVERGED],
            "unused": [5], "not_sent": [4]}},
    }
    return compute(run_id="r", replay_id="p", mode="strict", complete=True, recorded_seqs=[0],
                   rows=[row], allow=("ids",))


def test_the_text_lists_a_session_after_an_equivalent_handshake() -> None:
    exact = verdict_details(verdict("exact"))
    equivalent = verdict_details(verdict("equivalent"))
    assert exact[0] == "request 0 GET /v1/realtime: exact, its WebSocket session:"
    messages = exact[1:]
    assert "  message #3 (client text), 17 B: diverged" in messages
    assert "  recorded client messages never matched: #5" in messages
    assert "  recorded server messages not sent: #4" in messages
    assert equivalent[0] == ("request 0 GET /v1/realtime: equivalent "
                             "(recorded #0, served)")
    assert equivalent[-len(messages):] == messages


def test_the_report_lists_a_session_after_a_substituted_handshake() -> None:
    for kind in ("exact", "substituted", "equivalent"):
        page = replays([verdict(kind)])
        assert page.count('data-kind="diverged"') == 1, kind
        assert "the message&#x27;s body differs at /input/0/text" in page, kind
