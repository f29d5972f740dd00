"""The scripted fake provider, driven by the real SDKs over real sockets, and the
example agent run against it as a child process."""

from __future__ import annotations

import base64
import json
import math
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from support.sockets import raw_exchange
from wiretape.errors import PortInUse
from wiretape.examples.tool_agent import WORKSPACE, run_tool
from wiretape.testing import (
    CREATED,
    FakeProvider,
    ScriptError,
    TextTurn,
    ToolCall,
    ToolCallTurn,
    Turn,
    demo_script,
    load_script,
    script_from_json,
    script_to_json,
)

WEATHER = ToolCall("get_weather", {"city": "Paris", "unit": "celsius"})
ADD = ToolCall("add", {"a": 17, "b": 25})
TOOLS_CHAT: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
]


def openai_client(fp: FakeProvider) -> openai.OpenAI:
    return openai.OpenAI(base_url=fp.url + "/v1", api_key="sk-test")


def anthropic_client(fp: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fp.url, api_key="sk-ant-test")


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> Iterator[FakeProvider]:
    script: list[Turn] = request.param
    with FakeProvider(script) as fp:
        yield fp


def scripted(*turns: Turn) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("provider", [list(turns)], indirect=True, ids=["script"])


# --- OpenAI chat completions -------------------------------------------------------------


@scripted(ToolCallTurn([WEATHER, ADD]), TextTurn("It is 21 degrees in Paris."))
def test_chat_stream_tool_calls_reassemble_from_fragments(provider: FakeProvider) -> None:
    stream = openai_client(provider).chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "weather?"}],
        tools=TOOLS_CHAT,
        stream=True,
        stream_options={"include_usage": True},
    )
    calls: dict[int, dict[str, str]] = {}
    fragments: dict[int, int] = {}
    finish, usage, ids = None, None, set()
    for chunk in stream:
        ids.add(chunk.id)
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
                    fragments[delta.index] = fragments.get(delta.index, 0) + bool(
                        delta.function.arguments
                    )

    assert ids == {"chatcmpl-fake-0001"}
    assert finish == "tool_calls"
    assert [calls[0]["id"], calls[1]["id"]] == ["call_fake_1_0", "call_fake_1_1"]
    assert [calls[0]["name"], calls[1]["name"]] == ["get_weather", "add"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert json.loads(calls[1]["arguments"]) == {"a": 17, "b": 25}
    assert fragments[0] >= 3
    assert fragments[1] >= 2
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@scripted(TextTurn("Hello there, friend."))
def test_chat_stream_helper_gets_text(provider: FakeProvider) -> None:
    with openai_client(provider).chat.completions.stream(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert deltas == ["", "Hello ", "there, ", "friend."]  # the role chunk carries content ""
    assert final.choices[0].message.content == "Hello there, friend."
    assert final.choices[0].finish_reason == "stop"


@scripted(TextTurn("Plain answer."), ToolCallTurn([ADD]))
def test_chat_non_streaming_text_then_tool_call(provider: FakeProvider) -> None:
    client = openai_client(provider)
    first = client.chat.completions.create(model="m-1", messages=[{"role": "user", "content": "a"}])
    second = client.chat.completions.create(
        model="m-2", messages=[{"role": "user", "content": "b"}]
    )

    assert (first.id, first.created, first.model) == ("chatcmpl-fake-0001", CREATED, "m-1")
    assert first.choices[0].message.content == "Plain answer."
    assert first.choices[0].finish_reason == "stop"
    assert second.id == "chatcmpl-fake-0002"
    assert second.choices[0].finish_reason == "tool_calls"
    (call,) = second.choices[0].message.tool_calls or []
    assert call.id == "call_fake_2_0"
    assert call.function.name == "add"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"a": 17, "b": 25}  # type: ignore[union-attr]
    assert [r.turn for r in provider.requests] == [1, 2]
    assert provider.remaining == 0


@scripted(TextTurn("One two three four."))
def test_stream_is_one_sse_event_per_http_chunk(provider: FakeProvider) -> None:
    body = {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
    head, chunks = raw_exchange(provider.url, "/v1/chat/completions", body)

    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"content-type: text/event-stream; charset=utf-8" in head
    assert all(
        c.startswith(b"data: ") and c.endswith(b"\n\n") and c.count(b"\n\n") == 1 for c in chunks
    )
    # role, 4 words, finish, usage, [DONE]
    assert len(chunks) == 8
    assert chunks[-1] == b"data: [DONE]\n\n"
    usage_chunk = json.loads(chunks[-2][len(b"data: ") :])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] >= 1


def test_streamed_events_are_paced_by_the_delay() -> None:
    with FakeProvider([TextTurn("a b c d e f")], delay=0.05) as fp:
        body = {"model": "m", "messages": [], "stream": True}
        arrivals = []
        with httpx.stream("POST", fp.url + "/v1/chat/completions", json=body) as response:
            start = time.monotonic()
            for _ in response.iter_raw():
                arrivals.append(time.monotonic() - start)
    # 9 events (role, 6 words, finish, [DONE]) are 8 pauses of 50 ms apart
    assert arrivals[-1] >= 0.35
    assert len(arrivals) >= 5  # arrived piecewise, not as one buffered body


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/chat/completions", "/api/v1/chat/completions/"]
)
def test_routes_accept_any_prefix(path: str) -> None:
    with FakeProvider([TextTurn("ok")]) as fp:
        response = httpx.post(fp.url + path, json={"model": "m", "messages": []})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "ok"


def test_unknown_path_is_404_in_openai_shape() -> None:
    with FakeProvider([TextTurn("unused")]) as fp:
        response = httpx.get(fp.url + "/v1/models")
        assert fp.remaining == 1
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "no route for GET /v1/models" in response.json()["error"]["message"]


def test_identical_runs_give_identical_bytes() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    replies = []
    for _ in range(2):
        with FakeProvider([ToolCallTurn([WEATHER]), TextTurn("done")]) as fp:
            replies.append([raw_exchange(fp.url, "/v1/chat/completions", body) for _ in range(2)])
    assert replies[0] == replies[1]


# --- embeddings --------------------------------------------------------------------------


@scripted(TextTurn("still here"))
def test_embeddings_are_deterministic_unit_vectors(provider: FakeProvider) -> None:
    client = openai_client(provider)
    default = client.embeddings.create(model="text-embedding-3-small", input=["apple", "pear"])
    floats = client.embeddings.create(
        model="text-embedding-3-small", input="apple", encoding_format="float"
    )
    wide = client.embeddings.create(model="text-embedding-3-small", input="apple", dimensions=16)

    apple, pear = (d.embedding for d in default.data)
    assert len(apple) == 8
    assert len(wide.data[0].embedding) == 16
    assert apple == floats.data[0].embedding
    assert apple != pear
    assert math.isclose(math.fsum(x * x for x in apple), 1.0, rel_tol=1e-5)
    assert default.usage.prompt_tokens >= 1
    assert provider.remaining == 1  # embeddings consume no turn


def test_embeddings_base64_is_little_endian_float32() -> None:
    with FakeProvider() as fp:
        body = {"model": "e", "input": "apple"}
        as_floats = httpx.post(fp.url + "/v1/embeddings", json=body).json()
        as_b64 = httpx.post(
            fp.url + "/v1/embeddings", json={**body, "encoding_format": "base64"}
        ).json()
    raw = base64.b64decode(as_b64["data"][0]["embedding"])
    assert list(struct.unpack("<8f", raw)) == as_floats["data"][0]["embedding"]


# --- OpenAI Responses --------------------------------------------------------------------


@scripted(TextTurn("Paris is sunny today."), ToolCallTurn([WEATHER]))
def test_responses_stream_text_then_function_call(provider: FakeProvider) -> None:
    client = openai_client(provider)
    with client.responses.stream(model="gpt-4.1", input="weather in Paris?") as stream:
        kinds = [event.type for event in stream]
        text = stream.get_final_response()
    with client.responses.stream(model="gpt-4.1", input="and as a tool?") as stream:
        arg_deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        tool = stream.get_final_response()

    assert text.output_text == "Paris is sunny today."
    assert text.id == "resp_fake_0001"
    assert text.status == "completed"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") == 4
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    (call,) = tool.output
    assert call.type == "function_call"
    assert (call.name, call.call_id) == ("get_weather", "call_fake_2_0")
    assert json.loads(call.arguments) == {"city": "Paris", "unit": "celsius"}
    assert len(arg_deltas) >= 3
    assert "".join(arg_deltas) == call.arguments


@scripted(TextTurn("Not streamed."))
def test_responses_stream_sequence_numbers_and_json_form(provider: FakeProvider) -> None:
    with FakeProvider([TextTurn("a b")]) as streaming:
        _, chunks = raw_exchange(
            streaming.url, "/v1/responses", {"model": "m", "input": "x", "stream": True}
        )
    events = [c.split(b"\n") for c in chunks]
    names = [e[0].removeprefix(b"event: ").decode() for e in events]
    payloads = [json.loads(e[1].removeprefix(b"data: ")) for e in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(chunks)))
    assert names == [p["type"] for p in payloads]

    response = openai_client(provider).responses.create(model="gpt-4.1", input="x")
    assert response.output_text == "Not streamed."
    assert response.created_at == CREATED


# --- Anthropic messages ------------------------------------------------------------------


@scripted(ToolCallTurn([ADD]), TextTurn("The sum is 42.", expect="42"))
def test_anthropic_stream_tool_use_then_text(provider: FakeProvider) -> None:
    client = anthropic_client(provider)
    question: list[Any] = [{"role": "user", "content": "what is 17 + 25?"}]
    tools: list[Any] = [{"name": "add", "input_schema": {"type": "object"}}]
    with client.messages.stream(
        model="claude-x", max_tokens=100, messages=question, tools=tools
    ) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()
    (block,) = first.content
    assert first.stop_reason == "tool_use"
    assert block.type == "tool_use"
    assert (block.id, block.name, block.input) == ("toolu_fake_1_0", "add", {"a": 17, "b": 25})
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"

    followup = [
        *question,
        {"role": "assistant", "content": [block.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "42"}],
        },
    ]
    with client.messages.stream(model="claude-x", max_tokens=100, messages=followup) as stream:
        text = "".join(stream.text_stream)
        second = stream.get_final_message()
    assert text == "The sum is 42."
    assert second.stop_reason == "end_turn"
    assert second.id == "msg_fake_0002"


def test_anthropic_stream_event_order_on_the_wire() -> None:
    with FakeProvider([TextTurn("hi there")]) as fp:
        body = {"model": "c", "max_tokens": 5, "messages": [], "stream": True}
        _, chunks = raw_exchange(fp.url, "/v1/messages", body)
    names = [c.split(b"\n")[0].decode() for c in chunks]
    assert names == [
        "event: message_start",
        "event: content_block_start",
        "event: ping",
        "event: content_block_delta",
        "event: content_block_delta",
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]


@scripted(TextTurn("Bonjour."))
def test_anthropic_non_streaming(provider: FakeProvider) -> None:
    message = anthropic_client(provider).messages.create(
        model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Bonjour."
    assert (message.stop_reason, message.model, message.id) == (
        "end_turn",
        "claude-x",
        "msg_fake_0001",
    )


# --- errors --------------------------------------------------------------------------------


def test_exhausted_script_is_an_error_each_sdk_raises_without_retrying() -> None:
    with FakeProvider([]) as fp:
        with pytest.raises(openai.InternalServerError, match="fake provider: script exhausted"):
            openai_client(fp).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
        with pytest.raises(
            anthropic.InternalServerError, match="fake provider: script exhausted"
        ) as caught:
            anthropic_client(fp).messages.create(model="c", max_tokens=5, messages=[])
        assert len(fp.requests) == 2  # x-should-retry: false kept both SDKs from retrying
    body: Any = caught.value.body
    assert (body["type"], body["error"]["type"]) == ("error", "api_error")


def test_unmet_expectation_is_a_400_naming_the_turn() -> None:
    with FakeProvider([TextTurn("x", expect="the magic word")]) as fp:
        with pytest.raises(openai.BadRequestError, match=r"turn 1 expects .*'the magic word'"):
            openai_client(fp).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "nope"}]
            )
        assert fp.requests[0].turn == 1
        assert fp.remaining == 0


def test_port_in_use_is_reported() -> None:
    with FakeProvider() as first, pytest.raises(PortInUse, match=str(first.port)):
        FakeProvider(port=first.port).start()


def test_requests_are_recorded_with_raw_headers_and_distinct_turns_under_concurrency() -> None:
    turns: list[Turn] = [TextTurn(f"answer {i}") for i in range(8)]
    with FakeProvider(turns) as fp:
        client = openai_client(fp)
        threads = [
            threading.Thread(
                target=client.chat.completions.create, kwargs={"model": "m", "messages": []}
            )
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    requests = fp.requests
    assert sorted(r.turn or 0 for r in requests) == list(range(1, 9))
    assert [r.number for r in requests] == list(range(1, 9))
    first = requests[0]
    assert (first.method, first.target) == ("POST", "/v1/chat/completions")
    assert first.json() == {"model": "m", "messages": []}
    assert first.header("Authorization") == "Bearer sk-test"
    assert all(isinstance(n, bytes) and isinstance(v, bytes) for n, v in first.headers)


# --- the script ----------------------------------------------------------------------------


def test_script_json_round_trips() -> None:
    script: list[Turn] = [ToolCallTurn([WEATHER, ADD], expect="go"), TextTurn("done")]
    as_json = script_to_json(script)
    assert as_json == [
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
                {"name": "add", "arguments": {"a": 17, "b": 25}},
            ],
            "expect": "go",
        },
        {"text": "done"},
    ]
    assert script_from_json(json.loads(json.dumps(as_json))) == script


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"text": "x"}, "a JSON list"),
        ([{"text": "x", "tool_calls": []}], "turn 1: needs exactly one"),
        ([{"text": "ok"}, {}], "turn 2: needs exactly one"),
        ([{"tool_calls": []}], "turn 1: 'tool_calls' must be a non-empty list"),
        ([{"tool_calls": [{"arguments": {}}]}], "turn 1: each tool call needs a 'name'"),
        ([{"tool_calls": [{"name": "f", "arguments": "{}"}]}], "must be a JSON object"),
        ([{"text": 3}], "turn 1: 'text' must be a string"),
        ([{"text": "x", "expect": 1}], "turn 1: 'expect' must be a string"),
    ],
)
def test_bad_scripts_are_named(value: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        script_from_json(value)


def test_load_script_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(ScriptError, match=r"cannot read script .*broken\.json"):
        load_script(broken)
    (tmp_path / "ok.json").write_text(json.dumps(script_to_json(demo_script())))
    assert load_script(tmp_path / "ok.json") == demo_script()


# --- as processes ----------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and not k.startswith("OPENAI_")
    }
    return {**env, **extra}


def test_cli_prints_its_url_serves_the_script_and_stops_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from a file"}]))
    child = subprocess.Popen(
        [sys.executable, "-m", "wiretape.testing", "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line.startswith("listening http://127.0.0.1:")
        url = line.removeprefix("listening ")
        reply = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": []}).json()
        assert reply["choices"][0]["message"]["content"] == "from a file"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_cli_reports_a_bad_script_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"nothing": 1}]))
    done = subprocess.run(
        [sys.executable, "-m", "wiretape.testing", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        env=child_env(),
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "turn 1: needs exactly one" in done.stderr


def test_example_agent_answers_the_demo_script() -> None:
    with FakeProvider(demo_script()) as fp:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "wiretape.examples.tool_agent",
                "How many pieces of fruit are there?",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(OPENAI_BASE_URL=fp.url + "/v1"),
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "There are 42 pieces of fruit: 17 apples and 25 pears.\n"
    assert done.stderr.splitlines() == [
        'tool read_file {"path": "inventory.txt"}',
        'tool add {"a": 17, "b": 25}',
    ]
    requests = fp.requests
    assert len(requests) == 3
    assert [r.turn for r in requests] == [1, 2, 3]
    assert requests[0].header("authorization") == "Bearer sk-wiretape-example"
    last = requests[-1].json()
    assert last["stream"] is True
    tool_messages = [m for m in last["messages"] if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": "call_fake_1_0", "content": "apples: 17\npears: 25\n"},
        {"role": "tool", "tool_call_id": "call_fake_2_0", "content": "42"},
    ]


@pytest.mark.parametrize(
    ("name", "arguments", "result"),
    [
        ("read_file", '{"path": "inventory.txt"}', "apples: 17\npears: 25\n"),
        ("read_file", '{"path": "./notes.txt"}', None),
        (
            "read_file",
            '{"path": "../tool_agent.py"}',
            "error: '../tool_agent.py' is outside the workspace",
        ),
        (
            "read_file",
            '{"path": "/etc/hostname"}',
            "error: '/etc/hostname' is outside the workspace",
        ),
        ("read_file", '{"path": "missing.txt"}', "error: no file 'missing.txt' in the workspace"),
        ("add", '{"a": 17, "b": 25}', "42"),
        ("add", '{"a": 1.5, "b": 2}', "3.5"),
        ("add", '{"a": true, "b": 2}', "error: add needs two numbers 'a' and 'b'"),
        ("add", '{"a": 1', "error: the arguments of add are not valid JSON"),
        ("delete", "{}", "error: there is no tool named 'delete'"),
    ],
)
def test_example_agent_tool_results_are_deterministic(
    name: str, arguments: str, result: str | None
) -> None:
    got = run_tool(name, arguments, WORKSPACE)
    assert got == (result if result is not None else (WORKSPACE / "notes.txt").read_text())
    assert str(WORKSPACE) not in got
