"""Divergence explanations (DESIGN.md, "Divergence report"), by table: one
base request, and per kind a copy with one field changed; then tool
attribution per provider format, headers, the request line, bodies that
are not JSON, and large bodies."""

from __future__ import annotations

import copy
import dataclasses
import enum
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from support.raw_upstream import cases_dir
from wiretape.matching import DEFAULT_SEMANTIC_HEADERS, Explanation, SpanKind, ToolRef, explain
from wiretape.matching.regions import EDIT_DISTANCE_CAP
from wiretape.matching.spans import MAX_SPANS
from wiretape.model import Frame, Request, Response
from wiretape.playback import decide

JSON = ((b"Content-Type", b"application/json"),)

BASE: dict[str, object] = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are a careful agent. Now: 2026-11-29T10:00:00Z."},
        {"role": "user", "content": "Summarise /home/alice/project/notes.txt please"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": '{"path": "/home/alice/project/notes.txt"}',
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_abc",
            "content": "size 1024\nrequest 3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b\n"
            "commit 9f86d081884c7d659a2feaa0c55ad015\ntoken dGhpcyBpcyBhIHRva2VuIDEy\n",
        },
    ],
    "temperature": 0.2,
    "max_tokens": 512,
    "created": 1764410400,
}


def body(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def request(
    value: object = BASE,
    *,
    target: bytes = b"/v1/chat/completions",
    method: bytes = b"POST",
    headers: tuple[tuple[bytes, bytes], ...] = JSON,
) -> Request:
    return Request(method, target, headers, value if isinstance(value, bytes) else body(value))


def edit(path: tuple[str | int, ...], change: Callable[[object], object]) -> bytes:
    """The base body with the value at ``path`` replaced by ``change(value)``."""
    value = copy.deepcopy(BASE)
    node: object = value
    for token in path[:-1]:
        node = node[token]  # type: ignore[index]
    node[path[-1]] = change(node[path[-1]])  # type: ignore[index]
    return body(value)


def sub(old: str, new: str) -> Callable[[object], object]:
    def change(value: object) -> object:
        assert isinstance(value, str) and old in value
        return value.replace(old, new)

    return change


def reorder(value: object) -> object:
    assert isinstance(value, dict)
    return dict(reversed(list(value.items())))


FUNCTION_RAW = body(BASE["messages"][2]["tool_calls"][0]["function"])  # type: ignore[index]

SYSTEM, USER, TOOL = (
    ("messages", 0, "content"),
    ("messages", 1, "content"),
    ("messages", 3, "content"),
)
FUNCTION = ("messages", 2, "tool_calls", 0, "function")

# name, changed body, kind, pointer, bytes that differ
# fmt: off
TABLE = [
    ("timestamp", edit(SYSTEM, sub("10:00:00", "10:05:13")), "timestamp", "/messages/0/content", 4),
    ("uuid", edit(TOOL, sub("5a6b", "5a7c")), "uuid", "/messages/3/content", 2),
    ("path", edit(USER, sub("alice", "bob")), "path", "/messages/1/content", 5),
    ("hex id", edit(TOOL, sub("ad015", "ad0ff")), "hex_id", "/messages/3/content", 2),
    ("base64 id", edit(TOOL, sub("IDEy", "IDQ5")), "base64_id", "/messages/3/content", 2),
    ("number", edit(("max_tokens",), lambda _: 1024), "number", "/max_tokens", 4),
    ("number, fraction", edit(("temperature",), lambda _: 0.7), "number", "/temperature", 1),
    ("epoch seconds", edit(("created",), lambda _: 1764410713), "timestamp", "/created", 3),
    ("whitespace", edit(USER, sub("se /", "se  /")), "whitespace", "/messages/1/content", 1),
    # The object's raw text minus the '{"' and '"}' the two orders share.
    ("key order", edit(FUNCTION, reorder), "key_order", "/messages/2/tool_calls/0/function",
     len(FUNCTION_RAW) - 4),
    ("other", edit(USER, sub("please", "thanks")), "other", "/messages/1/content", 6),
]
# fmt: on


@pytest.mark.parametrize(
    ("name", "changed", "kind", "pointer", "differ"), TABLE, ids=[c[0] for c in TABLE]
)
def test_one_changed_field(name: str, changed: bytes, kind: str, pointer: str, differ: int) -> None:
    result = explain(request(), request(changed))
    assert [(s.kind, s.pointer, s.bytes_differ) for s in result.spans] == [(kind, pointer, differ)]
    assert result.bytes_differ == differ
    assert result.kind_summary == (kind,)
    assert result.spans_omitted == 0
    span = result.spans[0]
    assert changed[span.offset :].startswith(_raw_value(changed, pointer)), (
        "offset is the value's start"
    )
    assert not result.equal


def _raw_value(raw: bytes, pointer: str) -> bytes:
    """The first bytes of the value at ``pointer`` as json.dumps writes it."""
    value: object = json.loads(raw)
    for token in pointer.split("/")[1:]:
        index: int | str = int(token) if isinstance(value, list) else token
        value = value[index]  # type: ignore[index]
    return json.dumps(value, separators=(",", ":")).encode()[:10]


def test_tokens_shown_whole_and_first_line() -> None:
    result = explain(request(), request(TABLE[0][1]))
    span = result.spans[0]
    assert (span.recorded, span.live) == ("2026-11-29T10:00:00Z", "2026-11-29T10:05:13Z")
    assert "Now: 2026-11-29T10:00:00Z." in span.recorded_context
    assert "Now: 2026-11-29T10:05:13Z." in span.live_context
    assert result.first_line == (
        'timestamp differs at /messages/0/content: "2026-11-29T10:00:00Z" -> "2026-11-29T10:05:13Z"'
    )


def _system(text: str) -> bytes:
    return edit(("messages", 0, "content"), lambda _: text)


# recorded text, live text, kind: recognisers beyond the base table
KINDS = [
    (
        "Sent Sun, 29 Nov 2026 10:00:00 +0000 ok",
        "Sent Sun, 29 Nov 2026 10:05:13 +0000 ok",
        "timestamp",
    ),
    ("at 1764410400 s", "at 1764410713 s", "timestamp"),
    ("at 1764410400000 ms", "at 1764410713123 ms", "timestamp"),
    (
        '1.2.3.4 - - [29/Nov/2026:10:00:00 +0000] "GET /"',
        '1.2.3.4 - - [29/Nov/2026:10:05:13 +0000] "GET /"',
        "timestamp",
    ),
    ("2026-11-29 10:00:00,123 INFO go", "2026-11-29 10:00:01,456 INFO go", "timestamp"),
    ("at 2026-11-29T10:00:00+01:00.", "at 2026-11-29T10:00:00+02:00.", "timestamp"),
    ("at 1234 s", "at 1299 s", "number"),
    ("cwd C:\\Users\\alice\\work now", "cwd C:\\Users\\bob\\work now", "path"),
    ("cwd C:/Users/alice/work now", "cwd C:/Users/bob/work now", "path"),
    ("tmp /tmp/pytest-of-u/pytest-12/x now", "tmp /tmp/pytest-of-u/pytest-13/x now", "path"),
    ("see https://example.com/a/b", "see https://example.com/a/c", "other"),
    ("id chatcmpl-AbC9xYz12QwErTy7uIoP done", "id chatcmpl-Zq81mNbV0pLkJh6GfDsA done", "base64_id"),
    ("id req_0123456789abcdef0123 done", "id req_0123456789abcdef9999 done", "hex_id"),
    ("line one\nline two", "line one\n\nline two", "whitespace"),
    ("a\tb", "a b", "whitespace"),
    ("internationalization", "internationalisation", "other"),
    ("at Sun Nov 29 10:00:00 2026.", "at Sun Nov 29 10:05:13 2026.", "timestamp"),
    ("at 20261129T100000Z.", "at 20261129T100513Z.", "timestamp"),
]


@pytest.mark.parametrize(("before", "after", "kind"), KINDS, ids=[k[0][:24] for k in KINDS])
def test_kind_recognisers(before: str, after: str, kind: str) -> None:
    result = explain(request(_system(before)), request(_system(after)))
    assert [s.kind for s in result.spans] == [kind]
    assert result.spans[0].pointer == "/messages/0/content"


def test_json_escaped_windows_path_is_shown_as_on_the_wire() -> None:
    result = explain(request(_system("C:\\Users\\alice\\x")), request(_system("C:\\Users\\bob\\x")))
    assert result.spans[0].kind == "path"
    assert result.spans[0].recorded == "C:\\\\Users\\\\alice\\\\x"


# --- tool attribution, per provider format --------------------------------------------------


def sse(*events: object, named: bool = False) -> bytes:
    out = b""
    for event in events:
        if named:
            assert isinstance(event, dict)
            out += b"event: " + event["type"].encode() + b"\n"
        out += b"data: " + json.dumps(event).encode() + b"\n\n"
    return out


def response(data: bytes, *headers: tuple[bytes, bytes]) -> Response:
    # Split into frames at arbitrary points, as bytes come off a socket.
    frames = tuple(Frame(i, data[i : i + 7]) for i in range(0, len(data), 7))
    return Response(200, b"OK", headers, frames)


def test_openai_chat_tool_named_from_streamed_response() -> None:
    chunks = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_abc",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": ""},
                            }
                        ],
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"pa'}}]},
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'th"}'}}]},
                }
            ]
        },
    ]
    recorded_response = response(
        sse(*chunks) + b"data: [DONE]\n\n", (b"Content-Type", b"text/event-stream")
    )
    # The assistant turn is left out of the request: the name must come from the response.
    history = copy.deepcopy(BASE)
    del history["messages"][2]  # type: ignore[attr-defined]
    changed = copy.deepcopy(history)
    changed["messages"][2]["content"] = "size 2048"  # type: ignore[index]
    result = explain(request(history), request(changed), recorded_responses=[recorded_response])
    span = result.spans[0]
    assert span.pointer == "/messages/2/content"
    assert span.tool == ToolRef("call_abc", "read_file", "/messages/2")
    assert result.first_line == "the result of read_file (call_abc) differs at /messages/2/content"


def test_openai_chat_tool_named_from_request_history() -> None:
    result = explain(request(), request(TABLE[1][1]))
    tool = result.spans[0].tool
    assert tool == ToolRef("call_abc", "read_file", "/messages/3")


def test_anthropic_tool_result_named_from_streamed_response() -> None:
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "list_dir",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "."}'},
        },
        {"type": "message_stop"},
    ]
    recorded_response = response(sse(*events, named=True), (b"content-type", b"text/event-stream"))

    def messages(listing: str) -> dict[str, object]:
        return {
            "model": "m-1",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "What is here?"},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01A", "content": listing}
                    ],
                },
            ],
        }

    result = explain(
        request(messages("a.txt b.txt")),
        request(messages("a.txt c.txt")),
        recorded_responses=[recorded_response],
    )
    span = result.spans[0]
    assert span.pointer == "/messages/1/content/0/content"
    assert span.tool == ToolRef("toolu_01A", "list_dir", "/messages/1/content/0")


RESPONSES_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_r1",
    "name": "run_tests",
    "arguments": "{}",
}
RESPONSES_JSON = {
    "id": "resp_1",
    "object": "response",
    "output": [{"type": "reasoning", "id": "rs_1", "summary": []}, RESPONSES_CALL],
}
RESPONSES_ANSWERS = [
    (
        "gzip json",
        response(
            gzip.compress(json.dumps(RESPONSES_JSON).encode()),
            (b"Content-Type", b"application/json"),
            (b"Content-Encoding", b"gzip"),
        ),
    ),
    (
        "sse",
        response(
            sse(
                {"type": "response.created", "response": {"id": "resp_1", "output": []}},
                {"type": "response.output_item.added", "output_index": 1, "item": RESPONSES_CALL},
                named=True,
            ).replace(b"\n", b"\r\n"),
            (b"Content-Type", b"text/event-stream"),
        ),
    ),
]


@pytest.mark.parametrize(
    "answer", [a[1] for a in RESPONSES_ANSWERS], ids=[a[0] for a in RESPONSES_ANSWERS]
)
def test_responses_function_call_output_named_from_response(answer: Response) -> None:
    def turn(output: str) -> dict[str, object]:
        return {
            "model": "gpt-5",
            "input": [
                {"role": "user", "content": "run the tests"},
                {"type": "function_call_output", "call_id": "call_r1", "output": output},
            ],
        }

    result = explain(
        request(turn("4 passed")), request(turn("3 passed, 1 failed")), recorded_responses=[answer]
    )
    span = result.spans[0]
    assert span.pointer == "/input/1/output"
    assert span.tool == ToolRef("call_r1", "run_tests", "/input/1")


def test_gemini_function_response_names_itself() -> None:
    def turn(temperature: int) -> dict[str, object]:
        return {
            "contents": [
                {"role": "user", "parts": [{"text": "weather?"}]},
                {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}],
                },
                {
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "name": "get_weather",
                                "response": {"temperature": temperature},
                            }
                        }
                    ],
                },
            ]
        }

    result = explain(request(turn(3)), request(turn(5)))
    span = result.spans[0]
    assert span.pointer == "/contents/2/parts/0/functionResponse/response/temperature"
    assert span.kind == "number"
    assert span.tool == ToolRef("", "get_weather", "/contents/2/parts/0")
    assert result.first_line.startswith("the result of get_weather differs at /contents/2/parts/0/")


def test_span_outside_tool_results_names_no_tool() -> None:
    result = explain(request(), request(TABLE[0][1]))
    assert result.spans[0].tool is None


# --- request line and headers ---------------------------------------------------------------


def test_headers_listed_apart_and_secrets_never_shown() -> None:
    recorded = request(
        headers=(
            *JSON,
            (b"User-Agent", b"sdk/1"),
            (b"Authorization", b"Bearer sk-old-secret"),
            (b"anthropic-beta", b"tools-1"),
        )
    )
    live = request(
        headers=(
            (b"content-type", b"application/json; charset=utf-8"),
            (b"User-Agent", b"sdk/2"),
            (b"Authorization", b"Bearer sk-new-secret"),
            (b"X-Stainless-Retry-Count", b"1"),
        )
    )
    result = explain(recorded, live)
    found = {h.name: (h.recorded, h.live, h.semantic) for h in result.header_differences}
    assert found == {
        "content-type": (("application/json",), ("application/json; charset=utf-8",), True),
        "anthropic-beta": (("tools-1",), (), True),
        "user-agent": (("sdk/1",), ("sdk/2",), False),
        "x-stainless-retry-count": ((), ("1",), False),
    }
    assert [h.name for h in result.semantic_header_differences] == [
        "content-type",
        "anthropic-beta",
    ]
    assert [h.name for h in result.informational_header_differences] == [
        "user-agent",
        "x-stainless-retry-count",
    ]
    assert "secret" not in json.dumps(result.to_json())
    assert result.spans == () and result.bytes_differ == 0
    assert not result.equal
    assert result.first_line.startswith("header content-type differs")


def test_informational_headers_only_is_equal() -> None:
    result = explain(
        request(headers=(*JSON, (b"User-Agent", b"a"))),
        request(headers=(*JSON, (b"User-Agent", b"b"))),
    )
    assert result.equal
    assert result.first_line == "only informational headers differ: user-agent"


def test_target_and_method_differences() -> None:
    result = explain(request(), request(target=b"/v1/chat/completions?stream=true"))
    assert result.target_differs == ("/v1/chat/completions", "/v1/chat/completions?stream=true")
    assert result.method_differs is None
    assert result.first_line.startswith("target differs")
    result = explain(
        request(method=b"GET"), request(method=b"POST", target=b"/v1/models?key=AIzaSECRET")
    )
    assert result.method_differs == ("GET", "POST")
    assert result.target_differs is not None and "AIzaSECRET" not in result.target_differs[1]
    assert result.first_line == "method differs: GET -> POST"


def test_equal_requests() -> None:
    result = explain(request(), request())
    assert result.equal and result.spans == () and result.edit_distance == 0
    assert result.first_line == "no difference"


# --- bodies that are not JSON, or differ only in their bytes --------------------------------


def test_invalid_json_falls_back_to_exact_byte_offsets() -> None:
    recorded = b'{"messages": [{"role": "user", "content": "hello at 10:00"}], "trunc'
    live = b'{"messages": [{"role": "user", "content": "hello at 10:42"}], "trunc'
    result = explain(request(recorded), request(live))
    assert [(s.pointer, s.offset, s.bytes_differ) for s in result.spans] == [
        (None, recorded.index(b'00"}'), 2)
    ]
    assert result.spans[0].kind == "number"
    assert result.first_line.startswith("number differs at byte ")


def test_compact_against_pretty_with_a_changed_value() -> None:
    changed = copy.deepcopy(BASE)
    changed["temperature"] = 0.7
    pretty = json.dumps(changed, indent=2).encode()
    result = explain(request(), request(pretty))
    assert [(s.pointer, s.kind) for s in result.spans] == [("/temperature", "number")]
    assert pretty[result.spans[0].offset :].startswith(b"0.7,")


def test_reordered_object_with_a_changed_member() -> None:
    changed = reorder(copy.deepcopy(BASE))
    assert isinstance(changed, dict)
    changed["max_tokens"] = 100
    result = explain(request(), request(changed))
    assert [(s.pointer, s.kind) for s in result.spans] == [
        ("", "key_order"),
        ("/max_tokens", "number"),
    ]


def test_long_text_body_split_into_spans_at_exact_offsets() -> None:
    lines = [
        f"2026-11-29 10:{i // 60 % 60:02d}:{i % 60:02d},123 INFO get /home/u/f{i}.txt\n".encode()
        for i in range(20_000)
    ]
    changed = list(lines)
    changed[500] = changed[500].replace(b" 10:", b" 11:")
    changed[15_000] = changed[15_000].replace(b"/home/u/", b"/home/v/")
    recorded, live = b"".join(lines), b"".join(changed)
    result = explain(request(recorded), request(live))
    assert [(s.kind, s.pointer) for s in result.spans] == [("timestamp", None), ("path", None)]
    line_500, line_15000 = sum(map(len, lines[:500])), sum(map(len, lines[:15_000]))
    assert result.spans[0].offset == line_500 + len("2026-11-29 1")
    assert result.spans[1].offset == line_15000 + lines[15_000].index(b"/u/") + 1
    assert (result.spans[1].recorded, result.spans[1].live) == (
        "/home/u/f15000.txt",
        "/home/v/f15000.txt",
    )
    assert result.edit_distance == 2


def test_random_binary_bodies_one_span_capped_distance() -> None:
    rng = random.Random(5)
    a, b = rng.randbytes(1 << 20), rng.randbytes(1 << 20)
    result = explain(request(a), request(b))
    assert len(result.spans) == 1 and result.spans[0].kind == "other"
    assert result.spans[0].offset == next(i for i in range(len(a)) if a[i] != b[i])
    assert result.edit_distance_capped


def test_binary_body_offset_of_first_differing_byte() -> None:
    recorded = b"RIFF" + bytes(range(256)) * 8
    live = bytearray(recorded)
    live[1500] ^= 0xFF
    result = explain(request(recorded), request(bytes(live)))
    assert result.spans[0].offset == 1500
    assert result.bytes_differ == 1 and result.edit_distance == 1


def test_key_order_only() -> None:
    result = explain(request(), request(body(reorder(copy.deepcopy(BASE)))))
    assert [(s.kind, s.pointer) for s in result.spans] == [("key_order", "")]
    assert result.spans[0].recorded.startswith("model, messages")
    assert result.spans[0].live.startswith("created, max_tokens")
    assert result.first_line.startswith("member order differs at the top level")


def test_whitespace_only() -> None:
    pretty = json.dumps(BASE, indent=2).encode()
    result = explain(request(), request(pretty))
    assert result.kind_summary == ("whitespace",)
    assert all(s.pointer is None for s in result.spans)
    assert len(result.spans) == MAX_SPANS and result.spans_omitted > 0
    assert result.spans[0].offset == 1  # the newline after "{"
    assert result.bytes_differ == len(pretty) - 2  # all but the braces


def test_edit_distance_small_case() -> None:
    result = explain(request(b"kitten sat"), request(b"sitting sat"))
    assert (result.edit_distance, result.edit_distance_capped) == (3, False)
    assert result.bytes_differ == 7  # "sitting" against "kitten", nothing in common at their ends


def test_edit_distance_capped() -> None:
    rng = random.Random(7)
    a = bytes(rng.randrange(256) for _ in range(20_000))
    b = bytes(rng.randrange(256) for _ in range(20_000))
    result = explain(request(a), request(b))
    assert (result.edit_distance, result.edit_distance_capped) == (EDIT_DISTANCE_CAP, True)


def test_rfc6901_escaping_and_added_and_removed_values() -> None:
    recorded = {"a/b~c": 1, "gone": "x", "list": [1, 2]}
    live = {"a/b~c": 2, "list": [1, 2, {"role": "user"}]}
    result = explain(request(recorded), request(live))
    assert [(s.pointer, s.change) for s in result.spans] == [
        ("/a~1b~0c", "changed"),
        ("/list/2", "added"),
        ("/gone", "removed"),
    ]
    added = result.spans[1]
    assert added.live == '{"role":"user"}' and added.recorded == ""
    assert body(live)[added.offset :].startswith(b'{"role"')


def test_many_changes_are_capped_and_counted() -> None:
    recorded = {"items": list(range(100))}
    live = {"items": [i + 1000 for i in range(100)]}
    result = explain(request(recorded), request(live))
    assert len(result.spans) == MAX_SPANS
    assert result.spans_omitted == 100 - MAX_SPANS
    assert result.spans[3].pointer == "/items/3"


def test_to_json_is_json_safe() -> None:
    result = explain(request(), request(TABLE[1][1]), recorded_responses=[])
    data = result.to_json()
    assert json.loads(json.dumps(data)) == data

    def walk(value: object) -> None:
        assert value is None or type(value) in (str, int, bool, list, dict), type(value)
        if isinstance(value, list):
            for v in value:
                walk(v)
        if isinstance(value, dict):
            assert all(type(k) is str for k in value)
            for v in value.values():
                walk(v)

    walk(data)
    spans = data["spans"]
    assert isinstance(spans, list) and spans[0]["tool"] == {
        "call_id": "call_abc",
        "name": "read_file",
        "pointer": "/messages/3",
    }


def _fields_in_order(value: object) -> object:
    """Every dataclass field in declaration order, tuples as lists and enums
    as their values: what the stored JSON of an explanation holds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _fields_in_order(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_fields_in_order(v) for v in value]
    return value


@pytest.mark.parametrize("live", [
    request(TABLE[1][1]),
    request(headers=(*JSON, (b"User-Agent", b"b"), (b"anthropic-version", b"2024"))),
    request(method=b"POST", target=b"/v1/chat/completions?stream=true"),
    request({**BASE, "messages": [*BASE["messages"], {"role": "user", "content": "more"}]}),
])
def test_to_json_holds_every_field_in_order(live: Request) -> None:
    result = explain(request(), live)
    expected = _fields_in_order(result)
    assert json.dumps(result.to_json()) == json.dumps(expected)


def test_default_semantic_headers_agree_with_the_decision() -> None:
    assert DEFAULT_SEMANTIC_HEADERS == decide.DEFAULT_SEMANTIC_HEADERS


def test_public_names() -> None:
    from wiretape import matching

    assert sorted(matching.__all__) == [
        "DEFAULT_SEMANTIC_HEADERS",
        "Explanation",
        "HeaderDiff",
        "Span",
        "SpanKind",
        "ToolRef",
        "explain",
    ]
    assert all(hasattr(matching, name) for name in matching.__all__)
    assert isinstance(explain(request(), request()), Explanation)
    assert str(SpanKind.KEY_ORDER) == "key_order"


# --- large bodies ---------------------------------------------------------------------------


def conversation(
    size: int, seed: int = 3, indent: int | None = None
) -> tuple[dict[str, object], bytes]:
    rng = random.Random(seed)
    messages: list[dict[str, object]] = [{"role": "system", "content": "You are an agent."}]
    i = grown = 0
    while grown < size:
        call = f"call_{i:04d}"
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "délta", "ε"]) for _ in range(60))
        turn: list[dict[str, object]] = [
            {"role": "user", "content": f"step {i}: {words}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call,
                "content": f"at 2026-11-29T10:{i % 60:02d}:00Z {words}",
            },
        ]
        messages += turn
        grown += len(json.dumps(turn, ensure_ascii=False).encode())
        i += 1
    value: dict[str, object] = {"model": "m", "messages": messages}
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return value, text.encode()


@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
def test_one_megabyte_bodies_differing_in_a_few_places(indent: int | None) -> None:
    value, recorded = conversation(1_000_000, indent=indent)
    changed = copy.deepcopy(value)
    messages = changed["messages"]
    assert isinstance(messages, list)
    messages[100]["content"] = messages[100]["content"].replace("step 33:", "step 34:")
    messages[2001]["content"] = messages[2001]["content"].replace("T10:", "T11:")
    messages[-1]["content"] += " tail"
    live = json.dumps(changed, indent=indent, ensure_ascii=False).encode()
    assert len(live) > 1_000_000
    result = explain(request(recorded), request(live))
    assert [(s.pointer, s.kind) for s in result.spans] == [
        ("/messages/100/content", "number"),
        ("/messages/2001/content", "timestamp"),
        (f"/messages/{len(messages) - 1}/content", "other"),
    ]
    assert [s.bytes_differ for s in result.spans] == [1, 1, 5]
    for span, message in zip(
        result.spans, (messages[100], messages[2001], messages[-1]), strict=True
    ):
        assert live[span.offset :].startswith(
            json.dumps(message["content"], ensure_ascii=False).encode()
        )
    assert [s.tool.name if s.tool else None for s in result.spans] == [
        None,
        "read_file",
        "read_file",
    ]
    assert result.edit_distance == 7 and not result.edit_distance_capped


# --- the multipart upload of case B05 -------------------------------------------------------


def http_request(path: Path) -> Request:
    head, _, payload = path.read_bytes().partition(b"\r\n\r\n")
    line, *fields = head.split(b"\r\n")
    method, target, _ = line.split(b" ", 2)
    headers = tuple((k.strip(), v.strip()) for k, v in (f.split(b":", 1) for f in fields))
    return Request(method, target, headers, payload)


def test_multipart_boundary_only_difference() -> None:
    case = cases_dir() / "B05"
    recorded, live = http_request(case / "request.http"), http_request(case / "request.rerun.http")
    old = recorded.body[2 : recorded.body.index(b"\r\n")].decode()
    new = live.body[2 : live.body.index(b"\r\n")].decode()
    result = explain(recorded, live)
    assert len(result.spans) == 4 and result.spans_omitted == 0
    for span in result.spans:
        assert (span.recorded, span.live) == (old, new)
        assert span.kind in ("hex_id", "other") and span.pointer is None
    assert result.spans[0].offset == 2
    assert live.body[result.spans[-1].offset - 2 :].startswith(b"--" + new.encode() + b"--")
    assert [h.name for h in result.semantic_header_differences] == ["content-type"]
