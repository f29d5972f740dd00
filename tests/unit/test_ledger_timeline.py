"""The tool-call ledger (completed and pending partition every call), the
timeline's offsets and rows, and terminal progress, on hand-made views."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest

from wiretape.inspect.formats import (
    ExchangeView,
    Message,
    RequestView,
    ResponseView,
    ToolCall,
    Usage,
    WireError,
    read_exchange,
)
from wiretape.inspect.ledger import build_ledger
from wiretape.inspect.progress import Progress
from wiretape.inspect.timeline import run_start, timeline
from wiretape.model import Ending, Exchange, Frame, Request, Response, RunInfo


def view(calls: tuple[ToolCall, ...] = (), results: tuple[tuple[str, str | None], ...] = (),
         messages: tuple[Message, ...] = ()) -> ExchangeView:
    return ExchangeView(RequestView("openai-chat", messages=messages),
                        ResponseView("openai-chat", True, tool_calls=calls), results)


def test_completed_where_a_later_request_carries_the_result_pending_otherwise() -> None:
    a, b, c = (ToolCall("c1", "read_file", '{"path":"x"}'), ToolCall("c2", "add", "{}"),
               ToolCall("c3", "add", '{"a":1}'))
    views = [
        (0, view(calls=(a,))),
        (1, view(calls=(b, c), results=(("c1", None),),
                 messages=(Message("tool", "apples: 17", result_for="c1"),))),
        (2, view(results=(("c1", None), ("c2", None)),
                 messages=(Message("tool", "apples: 17", result_for="c1"),
                           Message("tool", "42", result_for="c2")))),
        # the run was interrupted here: c3 was asked for and never answered
    ]
    ledger = build_ledger(views)
    assert [(e.call_id, e.name, e.issued_in, e.answered_in, e.status, e.result)
            for e in ledger.entries] == [
        ("c1", "read_file", 0, 1, "completed", "apples: 17"),
        ("c2", "add", 1, 2, "completed", "42"),
        ("c3", "add", 1, None, "pending", None),
    ]
    assert [e.call_id for e in ledger.completed] == ["c1", "c2"]
    assert [e.call_id for e in ledger.pending] == ["c3"]
    assert set(ledger.completed).isdisjoint(ledger.pending)
    assert set(ledger.completed) | set(ledger.pending) == set(ledger.entries)
    assert ledger.to_json()["completed"] == 2 and ledger.to_json()["pending"] == 1


def test_a_result_in_the_same_or_an_earlier_request_does_not_complete_a_call() -> None:
    views = [(0, view(results=(("c9", None),))), (1, view(calls=(ToolCall("c9", "f", "{}"),),
                                                         results=(("c9", None),)))]
    ledger = build_ledger(views)
    assert [e.status for e in ledger.entries] == ["pending"]
    assert ledger.unmatched_results == ()


def test_calls_without_ids_are_matched_by_name_and_count() -> None:
    w1, w2 = ToolCall("", "getWeather", '{"c":"NY"}'), ToolCall("", "getWeather", '{"c":"SF"}')
    views = [
        (0, view(calls=(w1,))),
        (1, view(calls=(w2,), results=(("", "getWeather"),),
                 messages=(Message("tool", "20", result_for="", result_name="getWeather"),))),
        (2, view(results=(("", "getWeather"), ("", "getWeather")))),
    ]
    ledger = build_ledger(views)
    assert [(e.call_id, e.answered_in) for e in ledger.entries] == [("#0.0", 1), ("#1.0", 2)]
    assert ledger.entries[0].result == "20"


def _gemini_exchange(seq: int, contents: list[object], parts: list[object]) -> Exchange:
    """A streamed Gemini exchange: the request's ``contents``, the model's ``parts``."""
    body = json.dumps({"contents": contents}).encode()
    answer = {"candidates": [{"content": {"role": "model", "parts": parts},
                              "finishReason": "STOP"}], "modelVersion": "gemini-2.5-pro"}
    return Exchange(seq, 1, "gemini", 100 + seq,
                    Request(b"POST", b"/v1beta/models/gemini-2.5-pro:streamGenerateContent"
                            b"?alt=sse", ((b"content-type", b"application/json"),), body),
                    Response(200, b"OK", ((b"content-type", b"text/event-stream"),),
                             (Frame(5, b"data: " + json.dumps(answer).encode() + b"\r\n\r\n"),)),
                    Ending.COMPLETE, 5, 9)


def test_a_call_the_client_named_is_completed_by_name_and_position() -> None:
    """gemini-cli: the model's functionCall has no id, and the client sends
    its functionResponse with an id of its own (``read_file_<ms>_0``)."""
    user = {"role": "user", "parts": [{"text": "What do my notes say?"}]}
    call = {"functionCall": {"name": "read_file", "args": {"path": "notes.txt"}}}
    answered = {"role": "user", "parts": [{"functionResponse": {
        "id": "read_file_1730000000000_0", "name": "read_file",
        "response": {"output": "buy apples"}}}]}
    second = {"functionCall": {"name": "read_file", "args": {"path": "todo.txt"}}}
    exchanges = [
        _gemini_exchange(0, [user], [call]),
        _gemini_exchange(1, [user, {"role": "model", "parts": [call]}, answered], [second]),
        # the run stopped before the second call's answer was sent
    ]
    ledger = build_ledger([(e.seq, read_exchange(e)) for e in exchanges])
    assert [(e.call_id, e.name, e.arguments, e.issued_in, e.answered_in, e.status, e.result)
            for e in ledger.entries] == [
        ("#0.0", "read_file", '{"path":"notes.txt"}', 0, 1, "completed",
         '{"output":"buy apples"}'),
        ("#1.0", "read_file", '{"path":"todo.txt"}', 1, None, "pending", None),
    ]
    assert ledger.unmatched_results == ()  # the client's id answered the call


def test_a_result_by_id_is_not_taken_again_by_name() -> None:
    """Results that answer a call by id never complete another by name; a
    client-made id that answers nothing is still listed as unmatched."""
    with_id, without = ToolCall("c1", "grep", "{}"), ToolCall("", "grep", '{"q":2}')
    views = [
        (0, view(calls=(with_id, without))),
        (1, view(results=(("c1", "grep"),),
                 messages=(Message("tool", "one", result_for="c1", result_name="grep"),))),
        (2, view(results=(("c1", "grep"), ("grep_17_0", "grep"), ("glob_18_0", "glob")),
                 messages=(Message("tool", "one", result_for="c1", result_name="grep"),
                           Message("tool", "two", result_for="grep_17_0", result_name="grep"),
                           Message("tool", "x", result_for="glob_18_0", result_name="glob")))),
    ]
    ledger = build_ledger(views)
    assert [(e.call_id, e.answered_in, e.result) for e in ledger.entries] == [
        ("c1", 1, "one"), ("#0.1", 2, "two")]
    assert ledger.unmatched_results == ((2, "glob_18_0", "glob"),)


def test_server_tools_complete_in_their_own_exchange_and_stray_results_are_listed() -> None:
    views = [(0, view(calls=(ToolCall("srv_1", "web_search", "{}", "server"),))),
             (1, view(results=(("from_before", "f"),)))]
    ledger = build_ledger(views)
    assert [(e.call_id, e.answered_in, e.kind) for e in ledger.entries] == [("srv_1", 0, "server")]
    assert ledger.unmatched_results == ((1, "from_before", "f"),)


def _exchange(seq: int, start: int, ttfb: int | None, duration: int) -> Exchange:
    return Exchange(seq, 1, "openai", start, Request(b"POST", b"/v1/chat/completions", (), b"{}"),
                    Response(200, b"OK", ((b"content-type", b"text/event-stream"),),
                             (Frame(ttfb or 0, b"data: x\n\n"), Frame(duration, b"data: y\n\n"))),
                    Ending.COMPLETE, ttfb, duration)


def test_timeline_offsets_count_from_the_run_start() -> None:
    info = RunInfo("run_000000000000", "t", (), "/", (), (), started_at_ns=1_000)
    exchanges = [_exchange(0, 5_000, 100, 900), _exchange(1, 9_000, None, 50)]
    views = [(e.seq, view(calls=(ToolCall("c", "f", "{}"),) if e.seq == 0 else ()))
             for e in exchanges]
    rows = timeline(info, exchanges, views)
    assert [(r.seq, r.offset_ns, r.ttfb_ns, r.duration_ns, r.frames, r.streamed, r.tool_calls)
            for r in rows] == [(0, 4_000, 100, 900, 2, True, ("f",)),
                               (1, 8_000, None, 50, 2, True, ())]
    # an imported run whose metadata starts after its first exchange
    late = RunInfo("run_000000000000", "t", (), "/", (), (), started_at_ns=7_000)
    assert run_start(late, exchanges) == 5_000


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_at_most_every_interval() -> None:
    now = [0.0]
    out = FakeTerminal()
    progress = Progress("importing", 4, out, interval=1.0, clock=lambda: now[0])
    for t in (0.1, 0.2, 1.5, 1.6):
        now[0] = t
        progress.advance()
    progress.close()
    lines = out.getvalue().split("\r\x1b[2K")[1:]
    assert [line.split(",")[0] for line in lines] == [
        "importing [#####               ] 1/4 (25%)",
        "importing [###############     ] 3/4 (75%)",
        "importing [####################] 4/4 (100%)",
    ]
    assert out.getvalue().endswith("\n")


@pytest.mark.parametrize("stream", [io.StringIO(), None])
def test_progress_is_silent_off_a_terminal(stream: io.StringIO | None) -> None:
    progress = Progress("exporting", 2, stream)
    progress.advance()
    progress.close()
    assert not progress.active
    assert stream is None or stream.getvalue() == ""


def _as_asdict_gave_it(value: object) -> object:
    """What ``dataclasses.asdict`` gave for the JSON form: every field in
    declaration order, nested dataclasses as dicts."""
    assert dataclasses.is_dataclass(value) and not isinstance(value, type)
    return json.loads(json.dumps(dataclasses.asdict(value)))


def test_json_forms_hold_every_field_in_order() -> None:
    call = ToolCall("c1", "read_file", '{"path":"x"}')
    response = ResponseView("openai-chat", True, "m", "hi", "", (call,), "stop",
                            Usage(3, 4, None, 1), (WireError("bad", "t", True),), 5,
                            (("ping", 2),), None, None, ("a note",))
    expected = _as_asdict_gave_it(response)
    assert isinstance(expected, dict)
    expected["unknown_events"] = [{"name": "ping", "count": 2}]
    expected["usage"]["total"] = 7
    assert json.dumps(response.to_json()) == json.dumps(expected)
    request = RequestView("openai-chat", "m", True, "sys",
                          (Message("assistant", "x", (call,)), Message("tool", "17", (), "c1")),
                          ("read_file",), None, ("n",))
    assert json.dumps(request.to_json()) == json.dumps(_as_asdict_gave_it(request))
    exchange = Exchange(0, 1, "openai", 10, Request(b"POST", b"/v1/x", (), b"{}"),
                        Response(200, b"OK", (), (Frame(5, b"{}"),)), Ending.COMPLETE, 5, 9)
    row = timeline(RunInfo("r", "0", (), "/", (), (), 10), [exchange],
                   [(0, ExchangeView(request, response))])[0]
    assert json.dumps(row.to_json()) == json.dumps(_as_asdict_gave_it(row))
    entry = build_ledger([(0, view(calls=(call,)))]).entries[0]
    expected_entry = _as_asdict_gave_it(entry)
    assert isinstance(expected_entry, dict)
    assert json.dumps(entry.to_json()) == json.dumps({**expected_entry, "status": "pending"})


def test_a_websocket_session_s_bytes_are_its_messages_payloads() -> None:
    from wiretape.model import Message as WsMessage
    from wiretape.model import Opcode

    info = RunInfo("run_000000000000", "t", (), "/", (), (), started_at_ns=1_000)
    session = Exchange(0, 1, "openai", 1_000, Request(b"GET", b"/v1/responses", (), b""),
                       Response(101, b"Switching Protocols", (), ()), Ending.COMPLETE, 5, 90,
                       None, (WsMessage("client", Opcode.TEXT, b"x" * 300, 10),
                              WsMessage("server", Opcode.BINARY, b"\x00" * 45, 20),
                              WsMessage("client", Opcode.CLOSE, b"bye", 30, 1000)))
    (row,) = timeline(info, [session], [(0, read_exchange(session))])
    assert row.bytes == 348
