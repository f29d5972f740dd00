"""WebSocket sessions read as one exchange (``inspect.formats.sessions``):
hand-made sessions of the Responses API's WebSocket mode and the Realtime
API, with the event names both Realtime versions use, a resent history,
bad messages, a session of no known flow; and the ledger and diff on them."""

from __future__ import annotations

import json

from wiretape.inspect.diff import diff_runs
from wiretape.inspect.formats import read_exchange
from wiretape.inspect.ledger import build_ledger
from wiretape.model import Ending, Exchange, Message, Opcode, Request, Response


def session(target: bytes, *messages: tuple[str, object]) -> Exchange:
    """An exchange answered 101 whose session carried ``messages``, each
    (direction, JSON value or raw text)."""
    rows = tuple(Message("client" if d == "client" else "server", Opcode.TEXT,
                         v.encode() if isinstance(v, str) else json.dumps(v).encode(), n + 1)
                 for n, (d, v) in enumerate(messages))
    return Exchange(0, 1, "openai", 1, Request(b"GET", target, (), b""),
                    Response(101, b"Switching Protocols", (), ()), Ending.COMPLETE, 1, 100,
                    messages=rows)


def completed(rid: str, tokens: tuple[int, int], output: list[object] | None = None,
              kind: str = "response.completed") -> dict[str, object]:
    return {"type": kind, "response": {
        "id": rid, "status": "completed", "output": output or [],
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}}


CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
        "arguments": '{"path":"a.txt"}'}


def test_a_realtime_session_of_either_version_reads_its_text_calls_and_summed_usage() -> None:
    ex = session(
        b"/v1/realtime?model=gpt-realtime-mini",
        ("server", {"type": "session.created", "session": {"model": "gpt-realtime-mini"}}),
        ("client", {"type": "session.update", "session": {
            "instructions": "be brief", "tools": [{"type": "function", "name": "read_file"}]}}),
        ("client", {"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "read a.txt"}]}}),
        ("server", {"type": "conversation.item.created", "item": {}}),
        ("client", {"type": "response.create"}),
        ("server", {"type": "response.output_item.added", "item": {**CALL, "arguments": ""}}),
        ("server", {"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                    "delta": '{"path":'}),
        ("server", {"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                    "delta": '"a.txt"}'}),
        ("server", {"type": "rate_limits.updated", "rate_limits": []}),
        ("server", completed("r1", (10, 2), [CALL], kind="response.done")),
        ("client", {"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": "call_1", "output": "apples"}}),
        ("client", {"type": "response.create"}),
        ("server", {"type": "response.text.delta", "delta": "It says "}),  # beta name
        ("server", {"type": "response.output_audio_transcript.delta", "delta": "apples."}),
        ("server", completed("r2", (20, 3), kind="response.done")),
    )
    view = read_exchange(ex)
    assert view.session is True
    assert view.request.format == "openai-realtime" and view.model == "gpt-realtime-mini"
    assert view.request.system == "be brief" and view.request.tools == ("read_file",)
    assert [(m.role, m.text, m.result_for) for m in view.request.messages] == [
        ("user", "read a.txt", None), ("tool", "apples", "call_1")]
    resp = view.response
    assert resp is not None
    assert resp.text == "It says apples." and resp.stop_reason == "completed"
    assert [(c.call_id, c.name, c.arguments) for c in resp.tool_calls] == [
        ("call_1", "read_file", '{"path":"a.txt"}')]
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.total) == (30, 5, 35)
    assert resp.unknown_events == () and resp.events == 10  # every server message
    assert view.tool_results == (("call_1", None),)
    (entry,) = build_ledger([(0, view)]).entries
    assert (entry.status, entry.answered_in, entry.result) == ("completed", 0, "apples")


def test_a_responses_session_that_resends_its_history_lists_each_item_once() -> None:
    first = {"role": "user", "content": "read a.txt"}
    result = {"type": "function_call_output", "call_id": "call_1", "output": "apples"}
    ex = session(
        b"/v1/responses",
        ("client", {"type": "response.create", "model": "gpt-5", "input": [first]}),
        ("server", {"type": "response.created", "response": {"model": "gpt-5"}}),
        ("server", {"type": "response.output_item.done", "item": CALL}),
        ("server", completed("r1", (7, 1), [CALL])),
        ("client", {"type": "response.create", "response": {
            "model": "gpt-5", "input": [first, CALL, result]}}),
        ("server", {"type": "response.output_text.delta", "delta": "apples"}),
        ("server", completed("r2", (9, 1))),
    )
    view = read_exchange(ex)
    assert view.request.format == "openai-responses" and view.model == "gpt-5"
    assert [(m.role, m.text) for m in view.request.messages] == [
        ("user", "read a.txt"), ("assistant", ""), ("tool", "apples")]
    assert view.response is not None and view.response.usage is not None
    assert view.response.usage.total == 18 and view.response.text == "apples"


def test_a_call_answered_in_no_message_of_its_session_is_pending() -> None:
    ex = session(b"/v1/responses",
                 ("client", {"type": "response.create", "input": "hi"}),
                 ("server", completed("r1", (1, 1), [CALL])))
    (entry,) = build_ledger([(0, read_exchange(ex))]).entries
    assert entry.status == "pending"


def test_bad_messages_and_unknown_flows_never_raise() -> None:
    broken = read_exchange(session(b"/v1/responses", ("client", "not json {"),
                                   ("server", "also not json"),
                                   ("server", {"type": "error", "error": {"message": "no"}})))
    assert broken.request.notes == ("1 client message(s) not JSON",)
    assert broken.response is not None
    assert [e.message for e in broken.response.errors] == ["no"]
    other = read_exchange(session(b"/chat", ("client", {"hello": 1}), ("server", "hi")))
    assert other.session is False and other.response is not None
    assert other.response.tool_calls == ()


def test_diff_pairs_client_messages_in_order_and_names_what_only_one_side_sent() -> None:
    a = session(b"/v1/responses", ("client", {"type": "response.create", "input": "x"}))
    b = session(b"/v1/responses", ("client", {"type": "response.create", "input": "y"}),
                ("client", {"type": "response.create", "input": "z"}))
    (pair,) = diff_runs([a], [b]).pairs
    assert not pair.same and pair.explanation is None
    first, extra = pair.messages
    assert first.explanation is not None
    assert [s.pointer for s in first.explanation.spans] == ["/input"]
    assert (extra.index, extra.a, extra.b, extra.explanation) == (1, None, 1, None)
    assert diff_runs([a], [a]).pairs[0].same
