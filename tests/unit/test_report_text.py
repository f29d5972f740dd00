"""The HTML report shows stored bytes as ``show`` prints them: a control
character from a run (in a WebSocket payload, a close reason, a body, a
target, an error) is written as its escape, never as the raw byte."""

from __future__ import annotations

import json

from wiretape.inspect.formats import read_exchange
from wiretape.inspect.ledger import build_ledger
from wiretape.inspect.report import render
from wiretape.inspect.timeline import timeline
from wiretape.model import Ending, Exchange, Frame, Message, Opcode, Request, Response, RunInfo

INFO = RunInfo("run_0123456789ab", "t", ("agent", "--title=\x1b]0;argv\x07"), "/", (), (),
               started_at_ns=1_000)
RAW = ("\x1b", "\x07", "\x9b", "\r", "\x00", "\u202e")


def test_control_characters_from_a_run_are_escaped_in_the_report() -> None:
    answer = {"choices": [{"message": {"role": "assistant",
                                       "content": "hi \x1b[2J there\r\nline 2\tend"}}]}
    chat = Exchange(0, 1, "openai", 1_000,
                    Request(b"POST", b"/v1/chat/completions?x=\x1b[31m", (), json.dumps(
                        {"model": "m", "messages": [{"role": "user",
                                                     "content": "q\u202eevil"}]}).encode()),
                    Response(200, b"OK", ((b"Content-Type", b"application/json"),),
                             (Frame(5, json.dumps(answer).encode()),)),
                    Ending.COMPLETE, 5, 9)
    session = Exchange(1, 2, "openai", 2_000, Request(b"GET", b"/v1/responses", (), b""),
                       Response(101, b"Switching Protocols", (), ()), Ending.TIMEOUT, 5, 90,
                       "the client did not answer (1000 'bye\x1b[5m')",
                       (Message("client", Opcode.TEXT, b"\x1b]0;PWNED\x07 hi\x9b2J\x00", 10),
                        Message("server", Opcode.BINARY, b"\x1b\xff", 20),
                        Message("server", Opcode.CLOSE, b"bye\x1b[5m", 30, 1000)))
    exchanges = [chat, session]
    views = [(e.seq, read_exchange(e)) for e in exchanges]
    page = render(INFO, "/runs/r\x1b.wtape", timeline(INFO, exchanges, views), dict(views),
                  build_ledger(views), [], {1: session.messages})
    assert not any(c in page for c in RAW), [c for c in RAW if c in page]
    assert "\\x1b]0;PWNED\\x07 hi\\x9b2J\\x00" in page  # a payload, in its row and tick
    assert page.count("bye\\x1b[5m") >= 2  # the close reason, in the session and the error
    assert "hi \\x1b[2J there\\r\nline 2\tend" in page  # a body: its lines kept
    assert "/v1/chat/completions?x=\\x1b[31m" in page and "q\\u202eevil" in page
    assert "\\x1b\\xff" in page  # a byte that was not UTF-8, as show prints it
