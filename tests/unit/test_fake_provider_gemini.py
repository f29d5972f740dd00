"""The scripted fake provider's Gemini endpoints, driven by the real google-genai
SDK over real sockets: generateContent, streamGenerateContent (SSE) with a
functionCall part then text, countTokens, and errors in Google's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from support.sockets import raw_exchange
from wiretape.testing import FakeProvider, TextTurn, ToolCall, ToolCallTurn

READ = ToolCall("read_file", {"file_path": "notes.txt"})
TOOLS = [types.Tool(function_declarations=[types.FunctionDeclaration(
    name="read_file", parameters_json_schema={"type": "object"})])]
CONFIG = types.GenerateContentConfig(
    tools=TOOLS, automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def client(fp: FakeProvider) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=fp.url))


def post(fp: FakeProvider, path: str, body: Any) -> tuple[bytes, list[bytes]]:
    """POST over a bare socket; the response head and its body chunks as framed."""
    return raw_exchange(fp.url, path, body)


def test_stream_function_call_then_text() -> None:
    with FakeProvider([ToolCallTurn([READ]), TextTurn("The code is PELICAN-42.",
                                                      expect="PELICAN-42")]) as fp:
        gemini = client(fp)
        asked = [types.Content(role="user", parts=[types.Part(text="What is in notes.txt?")])]
        chunks = list(gemini.models.generate_content_stream(
            model="gemini-2.5-flash", contents=asked, config=CONFIG))
        (chunk,) = chunks  # a call is never split across events
        (call,) = chunk.function_calls or []
        assert (call.name, call.args, call.id) == ("read_file", {"file_path": "notes.txt"}, None)
        assert chunk.candidates and chunk.candidates[0].finish_reason == types.FinishReason.STOP
        assert chunk.model_version == "gemini-2.5-flash"
        assert chunk.response_id == "fake-gemini-0001"

        answer = types.Part(function_response=types.FunctionResponse(
            name="read_file", response={"output": "The launch code is PELICAN-42.\n"}))
        followup = [*asked, chunk.candidates[0].content,
                    types.Content(role="user", parts=[answer])]
        texts = list(gemini.models.generate_content_stream(
            model="gemini-2.5-flash", contents=followup, config=CONFIG))
        assert "".join(c.text or "" for c in texts) == "The code is PELICAN-42."
        assert len(texts) > 1
        last = texts[-1]
        assert last.candidates and last.candidates[0].finish_reason == types.FinishReason.STOP
        assert last.usage_metadata and last.usage_metadata.candidates_token_count
        assert all(c.candidates and c.candidates[0].finish_reason is None for c in texts[:-1])
        requests = fp.requests
    assert all(r.target.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
               for r in requests), [r.target for r in requests]
    assert [r.turn for r in requests] == [1, 2]


def test_stream_events_on_the_wire_are_data_lines_of_whole_responses() -> None:
    with FakeProvider([TextTurn("one two three")]) as fp:
        head, chunks = post(fp, "/v1beta/models/m:streamGenerateContent?alt=sse",
                            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert b"content-type: text/event-stream" in head.lower()
    assert all(c.startswith(b"data: {") and c.endswith(b"}\r\n\r\n") for c in chunks)
    events = [json.loads(c[len(b"data: "):]) for c in chunks]
    assert [e["candidates"][0]["content"]["parts"][0]["text"] for e in events] == [
        "one ", "two ", "three"]
    assert [e["candidates"][0].get("finishReason") for e in events] == [None, None, "STOP"]
    assert all(e["modelVersion"] == "m" for e in events)


def test_generate_content_json_and_count_tokens() -> None:
    with FakeProvider([TextTurn("A short answer.")]) as fp:
        gemini = client(fp)
        reply = gemini.models.generate_content(model="gemini-2.5-pro", contents="hello")
        assert reply.text == "A short answer."
        assert reply.model_version == "gemini-2.5-pro"
        counted = gemini.models.count_tokens(model="gemini-2.5-pro", contents="hello")
        assert counted.total_tokens and counted.total_tokens > 0
        assert fp.remaining == 0  # counting tokens consumes no turn
        assert [r.turn for r in fp.requests] == [1, None]


@pytest.mark.parametrize(("script", "status", "google_status", "message"), [
    ([], 500, "INTERNAL", "script exhausted"),
    ([TextTurn("x", expect="never said")] * 2, 400, "INVALID_ARGUMENT", "expects the last message"),
])
def test_errors_are_in_googles_shape(
        script: list[Any], status: int, google_status: str, message: str) -> None:
    with FakeProvider(script) as fp:
        head, (body,) = post(fp, "/v1beta/models/m:generateContent",
                             {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        gemini = client(fp)  # held: a client collected mid-call closes its connection
        with pytest.raises(errors.APIError) as raised:
            gemini.models.generate_content(model="m", contents="hi")
    assert head.startswith(f"HTTP/1.1 {status}".encode())
    error = json.loads(body)["error"]
    assert (error["code"], error["status"]) == (status, google_status)
    assert message in error["message"]
    assert raised.value.code == status


def test_the_last_message_is_a_function_response() -> None:
    """``expect`` is checked against the tool's output inside a functionResponse."""
    with FakeProvider([TextTurn("ok", expect="PELICAN-42")]) as fp:
        head, _ = post(fp, "/v1beta/models/m:generateContent", {"contents": [
            {"role": "user", "parts": [{"text": "read it"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {
                "name": "read_file", "response": {"output": "code PELICAN-42"}}}]},
        ]})
    assert head.startswith(b"HTTP/1.1 200")
