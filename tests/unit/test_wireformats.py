"""The wire-format readers on every exchange of the corpus of real
provider traffic (model, text, reasoning, tool calls, stop reason, usage,
errors, unknown events), and on damaged or unknown input, which must be
shown and never raise."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from support.raw_upstream import corpus_dir
from wiretape.inspect.formats import read_exchange
from wiretape.model import Ending, Exchange, Frame, Request, Response


def corpus_exchange(name: str) -> Exchange:
    fx = corpus_dir() / name
    req = json.loads((fx / "request.json").read_text())
    head = json.loads((fx / "response_headers.json").read_text())
    target = "/" + req["url"].split("://", 1)[1].split("/", 1)[1].split("#", 1)[0]
    return Exchange(
        0, 0, "x", 0,
        Request(req["method"].encode(), target.encode("latin-1"),
                tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in req["headers"]),
                (req.get("body") or "").encode("utf-8")),
        Response(head["status"], str(head.get("reason", "")).encode("latin-1"),
                 tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"]),
                 (Frame(0, (fx / "response_body.bin").read_bytes()),)),
        Ending.COMPLETE, 0, 0)


def fixtures() -> list[str]:
    d = corpus_dir()
    return (
        sorted(p.name for p in d.iterdir() if (p / "response_body.bin").exists())
        if d.is_dir()
        else []
    )


# name: format, model, stop reason, text start, reasoning start, tool calls
# (id, name, arguments, kind), (input, output) tokens, errors (in_band, message
# start), unknown event names. "" for text/reasoning means none at all.
EXPECTED: dict[str, dict[str, Any]] = {
    "anthropic-error-400-invalid-request": dict(
        format="anthropic-messages", model="claude-opus-4-6", stop=None,
        errors=[(False, "This model does not support effort level 'xhigh'")]),
    "anthropic-error-404-model-not-found": dict(
        format="anthropic-messages", model="claude-sonet-4-5", stop=None,
        errors=[(False, "model: claude-sonet-4-5")]),
    "anthropic-stream-rawhttp-ping": dict(
        format="anthropic-messages", model="claude-3-opus-20240229", stop="end_turn",
        text="1\n2\n3\n4\n5", tokens=(15, 13)),
    "anthropic-stream-thinking-signature": dict(
        format="anthropic-messages", model="claude-sonnet-4-20250514", stop="end_turn",
        text="Here are the basic steps for safely crossing the street",
        reasoning="This is a straightforward question about pedestrian safety.", tokens=(43, 282)),
    "anthropic-stream-thinking-tool-use": dict(
        format="anthropic-messages", model="claude-haiku-4-5-20251001", stop="tool_use",
        reasoning="The user wants me to:\n1. Use the fixed_version tool", tokens=(598, 92),
        calls=[("toolu_01825dXWLSoJwCst1qTsiWdb", "fixed_version", "{}", "function")]),
    "anthropic-stream-tool-use-gzip": dict(
        format="anthropic-messages", model="claude-haiku-4-5-20251001", stop="tool_use",
        tokens=(542, 62),
        calls=[("toolu_01LtHJmixrs9NcWQkK8hu8hj", "pelican_name_generator", "{}", "function"),
               ("toolu_01N8a4jWyf116qKTMqKKmjyt", "pelican_name_generator", "{}", "function")]),
    "anthropic-stream-web-search-server-tool": dict(
        format="anthropic-messages", model="claude-opus-4-1-20250805", stop="end_turn",
        text="Based on the search results, here's the current weather in San Francisco",
        tokens=(10423, 341),
        calls=[("srvtoolu_01SPfvT38PDPAFnkcrMNGUrM", "web_search",
                '{"query": "San Francisco weather today"}', "server")]),
    "gemini-embeddings-gzip": dict(format="embeddings", model="gemini-embedding-001", stop=None,
                                   vectors=(1, 768)),
    "gemini-error-403-rawhttp": dict(
        format="gemini", model="gemini-2.0-flash", stop=None,
        errors=[(False, "Method doesn't allow unregistered callers")]),
    "gemini-error-404-model-not-found": dict(
        format="gemini", model="gemini-3.6-flahs", stop=None,
        errors=[(False, "models/gemini-3.6-flahs is not found")]),
    "gemini-generate-functioncall-rawhttp": dict(
        format="gemini", model="gemini-2.0-flash", stop="STOP", tokens=(27, 5),
        calls=[("", "getWeather", '{"location":"New York"}', "function")]),
    "gemini-sse-thinking": dict(
        format="gemini", model="gemini-2.5-pro", stop="STOP", tokens=(34, 469),
        text="This is a great question! Safely crossing the street",
        reasoning="**Clarifying User Goals**"),
    "gemini-stream-jsonarray-rawhttp": dict(
        format="gemini", model="gemini-2.0-flash", stop="STOP", tokens=(8, 578),
        text="Clementine, a calico with a perpetually grumpy face"),
    "groq-error-400-tool-use-failed": dict(
        format="openai-chat", model="openai/gpt-oss-120b", stop=None,
        errors=[(False, "Tool call validation failed")]),
    "groq-stream-chat-rubyvcr": dict(
        format="openai-chat", model="llama3-8b-8192", stop="stop", tokens=(12, 24),
        text="Hello! It's nice to meet you."),
    "groq-stream-error-event-tool-use-failed": dict(
        format="openai-chat", model="openai/gpt-oss-120b", stop=None,
        reasoning="We need to call the tool with invalid parameters first",
        errors=[(True, "Tool call validation failed")]),
    "mistral-tool-call": dict(
        format="openai-chat", model="mistral-large-latest", stop="tool_calls", tokens=(70, 12),
        calls=[("pcZFHqej8", "get_weather", '{"city": "Paris"}', "function")]),
    "openai-assistants-run-stream": dict(
        format="unknown", model="gpt-4", stop=None,
        unknown={"thread.run.created", "thread.message.delta", "thread.run.completed"}),
    "openai-chat-gzip-tool-calls": dict(
        format="openai-chat", model="gpt-4o-mini-2024-07-18", stop="tool_calls", tokens=(92, 17),
        calls=[("call_TTY8UFNo7rNCaOBUNtlRSvMG", "lookup_population", '{"country":"Crumpet"}',
                "function")]),
    "openai-chat-stream-tool-call-deltas": dict(
        format="openai-chat", model="gpt-4o-mini-2024-07-18", stop="tool_calls", tokens=(54, 20),
        calls=[("call_1EYWDzueHEp8OsB8jJSEp7WB", "multiply", '{"a":1231,"b":2331}', "function")]),
    "openai-error-400-assistants-run": dict(
        format="unknown", model=None, stop=None,
        errors=[(False, "Run creation requires a Thread with a user message")]),
    "openai-error-400-responses": dict(
        format="openai-responses", model="gpt-4o", stop=None,
        errors=[(False, "Invalid 'temperature': decimal below minimum value.")]),
    "openai-error-404-model-not-found": dict(
        format="openai-chat", model="gpt-5.2-proo", stop=None,
        errors=[(False, "The model `gpt-5.2-proo` does not exist")]),
    "openai-responses-gzip-encrypted-reasoning": dict(
        format="openai-responses", model="gpt-5.5-2026-04-23", stop="completed", tokens=(94, 85),
        calls=[("call_uy7tfNVokIN7NjFF6k7OtLyl", "lookup_population", '{"country":"Pundora"}',
                "function")]),
    "openai-responses-stream-function-call": dict(
        format="openai-responses", model="gpt-5.5-2026-04-23", stop="completed", tokens=(58, 23),
        calls=[("call_sVidsfFJ6zlzRpelrPkTPlpd", "multiply", '{"a":1231,"b":2331}', "function")]),
    "openai-responses-stream-text-rubyvcr": dict(
        format="openai-responses", model="gpt-4o-2024-08-06", stop="completed", tokens=(27, 11),
        text="Hi there! How can I assist you today?"),
    "openrouter-stream-processing-comment": dict(
        format="openai-chat", model="meta-llama/llama-3.2-3b-instruct:free", stop="stop",
        tokens=(586, 3), text="test response", notes=["1 SSE comment line(s) (keep-alives)"]),
    "openrouter-stream-reasoning": dict(
        format="openai-chat", model="anthropic/claude-sonnet-4.5", stop="stop", tokens=(43, 36),
        text="2 + 2 = 4", reasoning="This is a simple arithmetic question. 2+2 equals 4.",
        notes=["4 SSE comment line(s) (keep-alives)"]),
}


def test_every_corpus_fixture_has_an_expectation() -> None:
    assert fixtures(), f"no corpus under {corpus_dir()}"
    assert sorted(EXPECTED) == fixtures()


@pytest.mark.parametrize("name", fixtures())
def test_corpus_exchange(name: str) -> None:
    want = EXPECTED[name]
    view = read_exchange(corpus_exchange(name))
    resp = view.response
    assert resp is not None
    assert resp.format == want["format"]
    assert view.model == want["model"]
    assert resp.stop_reason == want["stop"]
    text, reasoning = want.get("text", ""), want.get("reasoning", "")
    assert resp.text.startswith(text) and bool(resp.text) == bool(text), resp.text[:120]
    assert resp.reasoning.startswith(reasoning) and bool(resp.reasoning) == bool(reasoning)
    assert [(c.call_id, c.name, c.arguments, c.kind) for c in resp.tool_calls] == want.get(
        "calls", []
    )
    tokens = (resp.usage.input_tokens, resp.usage.output_tokens) if resp.usage else None
    assert tokens == want.get("tokens", tokens if want["format"] == "embeddings" else None)
    assert [(e.in_band, e.message[: len(m)]) for e, (_, m) in
            zip(resp.errors, want.get("errors", []), strict=False)] == want.get("errors", [])
    assert len(resp.errors) == len(want.get("errors", []))
    assert {n for n, _ in resp.unknown_events} >= want.get("unknown", set())
    if "unknown" not in want:
        assert resp.unknown_events == ()
    if "vectors" in want:
        assert (resp.vectors, resp.dimensions) == want["vectors"]
    assert list(resp.notes) == want.get("notes", [])


def test_streamed_and_whole_agree_on_the_same_answer() -> None:
    """A chat stream's text and calls equal the whole answer's in the corpus."""
    view = read_exchange(corpus_exchange("openai-chat-stream-tool-call-deltas"))
    assert view.response is not None and view.response.streamed
    assert view.request.streamed and view.request.tools == ("multiply",)
    assert [(m.role, m.text) for m in view.request.messages] == [("user", "What is 1231 * 2331?")]


def _exchange(path: bytes, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = (),
              request_body: bytes = b"{}", status: int = 200) -> Exchange:
    return Exchange(0, 0, "x", 0, Request(b"POST", path, (), request_body),
                    Response(status, b"OK", headers, (Frame(0, body),)), Ending.COMPLETE, 0, 0)


def test_gemini_array_cut_off_mid_stream_keeps_the_whole_elements() -> None:
    whole = corpus_exchange("gemini-stream-jsonarray-rawhttp")
    assert whole.response is not None
    body = whole.response.body
    cut = body[: body.index(b'"text": " Creek.')]  # inside the third element
    view = read_exchange(_exchange(whole.request.target, cut))
    assert view.response is not None
    assert view.response.text == ("Clementine, a calico with a perpetually grumpy face, "
                                  "considered herself the queen of Willow")
    assert view.response.events == 2


def test_unknown_events_are_counted_and_the_rest_still_read() -> None:
    body = (b'event: message_start\ndata: {"type":"message_start","message":{"model":"m"}}\n\n'
            b'event: brand_new\ndata: {"type":"brand_new"}\n\n'
            b'event: brand_new\ndata: {"type":"brand_new"}\n\n'
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"quantum_delta"}}\n\n'
            b"data: not json at all\n\n")
    view = read_exchange(
        _exchange(b"/v1/messages", body, ((b"content-type", b"text/event-stream"),))
    )
    resp = view.response
    assert resp is not None
    assert (resp.model, resp.text) == ("m", "hi")
    assert dict(resp.unknown_events) == {"brand_new": 2, "delta quantum_delta": 1, "not JSON": 1}


@pytest.mark.parametrize("body, headers, note", [
    (b"\x00\xff\xfe garbage", (), "the body is not JSON"),
    (b"compressed?", ((b"content-encoding", b"br"),), "content-encoding br cannot be undone"),
    (gzip.compress(b"{}", mtime=0)[:-9], ((b"content-encoding", b"gzip"),), None),
], ids=["garbage", "unknown-coding", "truncated-gzip"])
def test_damaged_bodies_are_described_not_raised(
    body: bytes, headers: Any, note: str | None
) -> None:
    view = read_exchange(_exchange(b"/v1/chat/completions", body, headers))
    assert view.response is not None
    if note:
        assert any(n.startswith(note) for n in view.response.notes), view.response.notes


def test_openai_embeddings_and_in_band_openrouter_error() -> None:
    body = json.dumps({"object": "list", "model": "text-embedding-3-small",
                       "data": [{"embedding": [0.1, 0.2, 0.3]}, {"embedding": "AAAAAAAAAAA="}],
                       "usage": {"prompt_tokens": 5, "total_tokens": 5}}).encode()
    view = read_exchange(_exchange(b"/v1/embeddings", body, request_body=b'{"input":["a","b"]}'))
    assert view.response is not None
    assert (view.response.vectors, view.response.dimensions, view.request.inputs) == (2, 3, 2)
    assert view.response.usage is not None and view.response.usage.total == 5
    chunk = (
        b'data: {"object":"chat.completion.chunk",'
        b'"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b'data: {"object":"chat.completion.chunk","error":{"message":"upstream died","code":502},'
        b'"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    view = read_exchange(_exchange(b"/api/v1/chat/completions", chunk))
    assert view.response is not None
    assert [(e.in_band, e.message, e.type) for e in view.response.errors] == [
        (True, "upstream died", "502")
    ]
    assert (view.response.text, view.response.stop_reason) == ("a", "error")


def test_request_conversations_of_each_format() -> None:
    anthropic = json.dumps(
        {
            "model": "claude",
            "system": "be brief",
            "messages": [
                {"role": "user", "content": "add 2 and 3"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "ok"},
                        {
                            "type": "tool_use",
                            "id": "tu_1",
                            "name": "add",
                            "input": {"a": 2, "b": 3},
                        },
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "5"}],
                },
            ],
            "tools": [{"name": "add"}],
        }
    ).encode()
    view = read_exchange(_exchange(b"/v1/messages", b"", request_body=anthropic))
    req = view.request
    assert (req.model, req.system, req.tools) == ("claude", "be brief", ("add",))
    assert [(m.role, m.text, m.result_for) for m in req.messages] == [
        ("user", "add 2 and 3", None), ("assistant", "ok", None), ("tool", "5", "tu_1")]
    assert [(c.call_id, c.name, c.arguments) for c in req.messages[1].tool_calls] == [
        ("tu_1", "add", '{"a":2,"b":3}')]
    assert view.tool_results == (("tu_1", None),)

    responses = json.dumps({"model": "gpt", "instructions": "sys", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}]}).encode()
    view = read_exchange(_exchange(b"/v1/responses", b"", request_body=responses))
    assert [(m.role, m.text, m.result_for) for m in view.request.messages] == [
        ("user", "hi", None), ("assistant", "", None), ("tool", "done", "c1")]
    assert view.request.system == "sys" and view.tool_results == (("c1", None),)

    gemini = json.dumps({"contents": [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "getWeather", "args": {"c": "NY"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "getWeather",
                                                        "response": {"t": 20}}}]}]}).encode()
    view = read_exchange(_exchange(b"/v1beta/models/gemini-2.0-flash:generateContent", b"",
                                   request_body=gemini))
    assert view.request.model == "gemini-2.0-flash"
    assert [(m.role, m.text, m.result_name) for m in view.request.messages] == [
        ("user", "weather?", None), ("model", "", None), ("tool", '{"t":20}', "getWeather")]
    assert view.tool_results == (("", "getWeather"),)
