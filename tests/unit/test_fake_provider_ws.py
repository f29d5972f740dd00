"""The fake provider's WebSocket sessions, spoken to by a real
``websockets`` client: the Responses API's WebSocket mode and the Realtime
API's text event flow, each played on the script."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from wiretape.testing import FakeProvider, TextTurn, ToolCall, ToolCallTurn


async def _until(ws: Any, last: str) -> list[dict[str, Any]]:
    events = []
    while True:
        event = json.loads(await ws.recv())
        events.append(event)
        if event["type"] in (last, "error"):
            return events


def test_responses_over_websocket_streams_each_turn_as_its_sse_events() -> None:
    script = [ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]), TextTurn("Five.")]

    async def session(url: str) -> list[list[dict[str, Any]]]:
        async with connect(url + "/v1/responses") as ws:
            turns = []
            for prompt in ("add", "thanks"):
                await ws.send(json.dumps({"type": "response.create", "model": "m",
                                          "input": [{"role": "user", "content": prompt}]}))
                turns.append(await _until(ws, "response.completed"))
            await ws.send(json.dumps({"type": "session.update"}))
            turns.append(await _until(ws, "response.completed"))
            return turns

    with FakeProvider(script, delay=0) as fp:
        first, second, wrong = asyncio.run(session(fp.url.replace("http", "ws", 1)))
        assert [r.target for r in fp.requests] == ["/v1/responses"] * 2
        assert all(json.loads(r.body)["stream"] is True for r in fp.requests)
    assert [e["sequence_number"] for e in first] == list(range(len(first)))
    assert first[0]["type"] == "response.created"
    done = [e for e in first if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"]) for e in done] == [("add", '{"a": 2, "b": 3}')]
    assert "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta") \
        == "Five."
    assert wrong == [{"type": "error", "status": 400, "error": {
        "message": "wiretape fake provider: expected a response.create event, got "
                   "session.update", "type": "invalid_request_error"}}]


def test_realtime_session_plays_a_function_call_and_its_answer() -> None:
    script = [ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]), TextTurn("Five.")]

    async def session(url: str) -> list[list[dict[str, Any]]]:
        async with connect(url + "/v1/realtime?model=gpt-realtime") as ws:
            opened = [json.loads(await ws.recv())]
            await ws.send(json.dumps({"type": "session.update", "session": {
                "type": "realtime", "instructions": "Be brief."}}))
            updated = [json.loads(await ws.recv())]
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "add 2 and 3"}]}}))
            added = [json.loads(await ws.recv())]
            await ws.send(json.dumps({"type": "response.create"}))
            call = await _until(ws, "response.done")
            done = call[-1]["response"]["output"][0]
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "function_call_output", "call_id": done["call_id"], "output": "5"}}))
            await ws.recv()
            await ws.send(json.dumps({"type": "response.create"}))
            text = await _until(ws, "response.done")
            return [opened, updated, added, call, text]

    with FakeProvider(script, delay=0) as fp:
        opened, updated, added, call, text = asyncio.run(
            session(fp.url.replace("http", "ws", 1)))
        second = json.loads(fp.requests[1].body)
    assert opened[0]["type"] == "session.created"
    assert opened[0]["session"]["model"] == "gpt-realtime"
    assert updated[0]["session"]["instructions"] == "Be brief."
    assert added[0]["item"]["id"] == "item_fake_0001"
    assert call[0]["type"] == "response.created"
    assert call[-1]["type"] == "response.done"
    assert call[-1]["response"]["output"][0]["name"] == "add"
    assert all(e["response_id"] == "resp_fake_0001" for e in call[1:-1])
    assert "".join(e["delta"] for e in text if e["type"] == "response.output_text.delta") \
        == "Five."
    # the second turn saw the conversation: the message, the call and its output
    assert [i["type"] for i in second["input"]] == ["message", "function_call",
                                                    "function_call_output"]
    assert len({e["event_id"] for e in call + text}) == len(call + text)


def test_an_upgrade_elsewhere_is_refused_with_404() -> None:
    async def session(url: str) -> int:
        try:
            async with connect(url + "/v1/chat/completions"):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    with FakeProvider([], delay=0) as fp:
        assert asyncio.run(session(fp.url.replace("http", "ws", 1))) == 404


def test_a_warm_up_uses_no_turn_and_previous_response_ids_must_be_known() -> None:
    """Codex's flow: ``generate: false`` first (a response with no output), then
    each request names the response before it and sends only the new items."""
    script = [TextTurn("Hello.")]

    async def session(url: str) -> list[list[dict[str, Any]]]:
        async with connect(url + "/v1/responses") as ws:
            out = []
            for event in (
                {"type": "response.create", "model": "m", "generate": False,
                 "input": [{"role": "developer", "content": "be brief"}]},
                {"type": "response.create", "model": "m",
                 "previous_response_id": "resp_elsewhere",
                 "input": [{"role": "user", "content": "hi"}]},
                {"type": "response.create", "model": "m",
                 "previous_response_id": "resp_fake_warmup_1",
                 "input": [{"role": "user", "content": "hi"}]},
            ):
                await ws.send(json.dumps(event))
                out.append(await _until(ws, "response.completed"))
            return out

    with FakeProvider(script, delay=0) as fp:
        warm, unknown, turn = asyncio.run(session(fp.url.replace("http", "ws", 1)))
        assert [r.turn for r in fp.requests] == [1]
        assert json.loads(fp.requests[0].body)["previous_response_id"] == "resp_fake_warmup_1"
    assert [e["type"] for e in warm] == ["response.created", "response.completed"]
    assert warm[-1]["response"]["id"] == "resp_fake_warmup_1"
    assert warm[-1]["response"]["output"] == []
    assert unknown == [{"type": "error", "status": 400, "error": {
        "message": "Previous response with id 'resp_elsewhere' not found.",
        "type": "invalid_request_error", "code": "previous_response_not_found"}}]
    assert turn[-1]["response"]["id"] == "resp_fake_0001"
    assert turn[-1]["response"]["previous_response_id"] == "resp_fake_warmup_1"
