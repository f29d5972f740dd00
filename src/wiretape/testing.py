"""A scripted fake model provider for tests, on real sockets on 127.0.0.1.

This module owns the *script* (an ordered list of turns the fake model plays),
the providers' wire formats for those turns, and a small asyncio + h11 server
that serves them. It speaks:

    endpoint (path suffix)          wire format                           turn
    POST .../chat/completions       OpenAI chat completions, JSON or SSE  consumed
    POST .../responses              OpenAI Responses, JSON or SSE         consumed
    POST .../messages               Anthropic messages, JSON or SSE       consumed
    POST .../embeddings             OpenAI embeddings, vectors derived    none
                                    from the input alone

Any prefix before the suffix is accepted (``/v1/messages``, ``/messages``,
``/api/v1/chat/completions``); anything else gets a 404 in OpenAI's error
shape. Streams are written one SSE event per HTTP chunk, with ``delay``
seconds between events, so a proxy that buffers can be caught.

Every id and timestamp is derived from the 1-based turn number (turn 3:
``chatcmpl-fake-0003``, ``resp_fake_0003``, ``msg_fake_0003``; its first
call ``call_fake_3_0``, ``fc_fake_3_0``, ``toolu_fake_3_0``), ``created`` is
always :data:`CREATED` and responses carry no ``date`` header, so two runs of
the same script with the same requests produce byte-identical responses.

It must not know about recording, run files, matching or replay: it plays the
part of an origin, and nothing in wiretape depends on it.

Use it in a test::

    script = [
        ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]),
        TextTurn("The sum is 5.", expect="5"),
    ]
    with FakeProvider(script) as fp:
        client = openai.OpenAI(base_url=fp.url + "/v1", api_key="test")
        ...
    assert len(fp.requests) == 2

or as a process (``--script`` defaults to :func:`demo_script`)::

    python -m wiretape.testing --port 8765 --script script.json
    listening http://127.0.0.1:8765
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import errno
import hashlib
import json
import math
import re
import signal
import struct
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any, TypeAlias

import h11

from wiretape.errors import PortInUse, UsageError, WiretapeError

__all__ = [
    "CREATED",
    "DEFAULT_DELAY",
    "EMBEDDING_DIMENSIONS",
    "AsyncFakeProvider",
    "FakeProvider",
    "ReceivedRequest",
    "ScriptError",
    "TextTurn",
    "ToolCall",
    "ToolCallTurn",
    "Turn",
    "demo_script",
    "load_script",
    "main",
    "script_from_json",
    "script_to_json",
]

JSON: TypeAlias = Any
"""A value as :func:`json.loads` returns it."""

HOST = "127.0.0.1"
DEFAULT_DELAY = 0.005
"""Seconds between two events of a streamed response."""

CREATED = 1_700_000_000
"""The fixed ``created`` / ``created_at`` timestamp (Unix seconds) of every answer."""

EMBEDDING_DIMENSIONS = 8
"""Length of an embedding vector when the request does not ask for ``dimensions``."""

_FRAGMENT_SIZE = 7  # characters of tool-call arguments per streamed delta
_READ_SIZE = 65_536
_STOP_TIMEOUT = 10.0
_SERVER_NAME = b"wiretape-fake-provider"
_FINGERPRINT = "fp_wiretape_fake"


# --- the script --------------------------------------------------------------------------


class ScriptError(UsageError):
    """A script (dataclasses or JSON) that cannot be played; names the turn and the problem."""


@dataclass(frozen=True)
class ToolCall:
    """One function call the fake model asks for.

    ``arguments`` is a JSON object; OpenAI formats receive it as a JSON string
    (``json.dumps(arguments)``), Anthropic as the ``input`` object.
    """

    name: str
    arguments: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class TextTurn:
    """The model answers with ``text`` and stops (``stop`` / ``end_turn``).

    ``expect``, when set, is a substring the last message of the request must
    contain; otherwise the request gets a 400 naming the turn.
    """

    text: str
    expect: str | None = None


@dataclass(frozen=True)
class ToolCallTurn:
    """The model asks for ``calls`` (at least one, in order) and stops for
    their results (``tool_calls`` / ``tool_use``). ``expect`` as in :class:`TextTurn`."""

    calls: Sequence[ToolCall]
    expect: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(self.calls))
        if not self.calls:
            raise ScriptError("a tool-call turn needs at least one call")


Turn: TypeAlias = TextTurn | ToolCallTurn


def script_from_json(value: JSON) -> list[Turn]:
    """Turns from the JSON form of a script: a list of objects, each either
    ``{"text": STR}`` or ``{"tool_calls": [{"name": STR, "arguments": {...}}, ...]}``,
    with an optional ``"expect": STR``. Raises :class:`ScriptError`."""
    if not isinstance(value, list):
        raise ScriptError("a script is a JSON list of turns")
    return [_turn_from_json(number, item) for number, item in enumerate(value, start=1)]


def _turn_from_json(number: int, item: JSON) -> Turn:
    if not isinstance(item, dict) or ("text" in item) == ("tool_calls" in item):
        raise ScriptError(f"turn {number}: needs exactly one of 'text' or 'tool_calls'")
    expect = item.get("expect")
    if expect is not None and not isinstance(expect, str):
        raise ScriptError(f"turn {number}: 'expect' must be a string")
    if "text" in item:
        if not isinstance(item["text"], str):
            raise ScriptError(f"turn {number}: 'text' must be a string")
        return TextTurn(item["text"], expect)
    calls = item["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise ScriptError(f"turn {number}: 'tool_calls' must be a non-empty list")
    return ToolCallTurn([_call_from_json(number, call) for call in calls], expect)


def _call_from_json(number: int, call: JSON) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ScriptError(f"turn {number}: each tool call needs a 'name' string")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ScriptError(f"turn {number}: arguments of {call['name']!r} must be a JSON object")
    return ToolCall(call["name"], arguments)


def script_to_json(turns: Sequence[Turn]) -> list[dict[str, JSON]]:
    """The JSON form of ``turns``; ``script_from_json`` reads it back."""
    return [_turn_to_json(turn) for turn in turns]


def _turn_to_json(turn: Turn) -> dict[str, JSON]:
    body: dict[str, JSON]
    if isinstance(turn, TextTurn):
        body = {"text": turn.text}
    else:
        body = {
            "tool_calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in turn.calls]
        }
    if turn.expect is not None:
        body["expect"] = turn.expect
    return body


def load_script(path: Path) -> list[Turn]:
    """Turns from the JSON script file at ``path``. Raises :class:`ScriptError`."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScriptError(f"cannot read script {path}: {exc}; give a JSON list of turns") from exc
    try:
        return script_from_json(value)
    except ScriptError as exc:
        raise ScriptError(f"script {path}: {exc}") from exc


def demo_script() -> list[Turn]:
    """The script of ``wiretape.examples.tool_agent``: read ``inventory.txt`` from
    its workspace, add the two counts, answer. Three requests, two tool calls."""
    return [
        ToolCallTurn([ToolCall("read_file", {"path": "inventory.txt"})]),
        ToolCallTurn([ToolCall("add", {"a": 17, "b": 25})], expect="apples: 17"),
        TextTurn("There are 42 pieces of fruit: 17 apples and 25 pears.", expect="42"),
    ]


# --- what was received -------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the fake provider read it off the socket.

    ``number`` is its 1-based arrival order; ``headers`` are raw (name, value)
    pairs in wire order and case; ``turn`` is the 1-based number of the script
    turn it consumed, or ``None`` (embeddings, errors, exhausted script).
    """

    number: int
    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    turn: int | None = None

    def json(self) -> JSON:
        """The body parsed as JSON."""
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), decoded as latin-1."""
        wanted = name.lower().encode("latin-1")
        return next((v.decode("latin-1") for n, v in self.headers if n.lower() == wanted), None)


# --- wire formats (pure: values in, bytes out) -------------------------------------------


@dataclass(frozen=True)
class _Reply:
    """A response before it is framed: body ``chunks`` (one SSE event each when streamed)."""

    status: int
    content_type: bytes
    chunks: tuple[bytes, ...]
    streamed: bool = False


@dataclass(frozen=True)
class _Answer:
    """What a renderer needs: the turn, its 1-based number, and the parsed request."""

    number: int
    turn: Turn
    request: Mapping[str, JSON]
    request_size: int

    @property
    def model(self) -> str:
        return str(self.request.get("model") or "fake-model")

    @property
    def streamed(self) -> bool:
        return self.request.get("stream") is True

    @property
    def text(self) -> str:
        return self.turn.text if isinstance(self.turn, TextTurn) else ""

    @property
    def input_tokens(self) -> int:
        return max(1, self.request_size // 4)

    @property
    def output_tokens(self) -> int:
        produced = self.text + "".join(_arguments(c) for c in _calls(self.turn))
        return max(1, len(produced) // 4)


def _calls(turn: Turn) -> Sequence[ToolCall]:
    return turn.calls if isinstance(turn, ToolCallTurn) else ()


def _arguments(call: ToolCall) -> str:
    return json.dumps(dict(call.arguments))


def _pieces(text: str) -> list[str]:
    """``text`` cut after each run of whitespace: the deltas of a streamed text."""
    return [piece for piece in re.findall(r"\S*\s*", text) if piece] or [""]


def _fragments(text: str) -> list[str]:
    return [text[i : i + _FRAGMENT_SIZE] for i in range(0, len(text), _FRAGMENT_SIZE)] or [""]


def _json_bytes(value: JSON) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _json_reply(value: JSON, status: int = 200) -> _Reply:
    return _Reply(status, b"application/json", (_json_bytes(value),))


def _sse_reply(events: Sequence[bytes]) -> _Reply:
    return _Reply(200, b"text/event-stream; charset=utf-8", tuple(events), streamed=True)


def _data_event(value: JSON) -> bytes:
    return b"data: " + _json_bytes(value) + b"\n\n"


def _named_event(name: str, value: JSON) -> bytes:
    return b"event: " + name.encode("ascii") + b"\n" + _data_event(value)


# OpenAI chat completions: https://platform.openai.com/docs/api-reference/chat/object


def _chat(answer: _Answer) -> _Reply:
    return _chat_stream(answer) if answer.streamed else _json_reply(_chat_object(answer))


def _chat_id(answer: _Answer) -> str:
    return f"chatcmpl-fake-{answer.number:04d}"


def _chat_finish(answer: _Answer) -> str:
    return "tool_calls" if _calls(answer.turn) else "stop"


def _chat_usage(answer: _Answer) -> dict[str, int]:
    inp, out = answer.input_tokens, answer.output_tokens
    return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}


def _call_id(answer: _Answer, index: int) -> str:
    return f"call_fake_{answer.number}_{index}"


def _chat_object(answer: _Answer) -> JSON:
    message: dict[str, JSON] = {
        "role": "assistant",
        "content": answer.text if isinstance(answer.turn, TextTurn) else None,
        "refusal": None,
        "annotations": [],
    }
    if calls := _calls(answer.turn):
        message["tool_calls"] = [
            {
                "id": _call_id(answer, i),
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c)},
            }
            for i, c in enumerate(calls)
        ]
    return {
        "id": _chat_id(answer),
        "object": "chat.completion",
        "created": CREATED,
        "model": answer.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _chat_finish(answer),
            }
        ],
        "usage": _chat_usage(answer),
        "system_fingerprint": _FINGERPRINT,
    }


def _chat_deltas(answer: _Answer) -> list[JSON]:
    """The ``delta`` objects after the first (role) chunk, tool-call arguments in fragments."""
    if isinstance(answer.turn, TextTurn):
        return [{"content": piece} for piece in _pieces(answer.text)]
    deltas: list[JSON] = []
    for i, call in enumerate(_calls(answer.turn)):
        opening = {"name": call.name, "arguments": ""}
        deltas.append(
            {
                "tool_calls": [
                    {"index": i, "id": _call_id(answer, i), "type": "function", "function": opening}
                ]
            }
        )
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}
            for fragment in _fragments(_arguments(call))
        ]
    return deltas


def _chat_stream(answer: _Answer) -> _Reply:
    options = answer.request.get("stream_options")
    with_usage = isinstance(options, dict) and options.get("include_usage") is True

    def chunk(choices: list[JSON], usage: JSON = None) -> bytes:
        value = {
            "id": _chat_id(answer),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": answer.model,
            "system_fingerprint": _FINGERPRINT,
            "choices": choices,
        }
        if with_usage:
            value["usage"] = usage
        return _data_event(value)

    def choice(delta: JSON, finish: str | None = None) -> list[JSON]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]

    text_turn = isinstance(answer.turn, TextTurn)
    first = {"role": "assistant", "content": "" if text_turn else None, "refusal": None}
    events = [chunk(choice(first))]
    events += [chunk(choice(delta)) for delta in _chat_deltas(answer)]
    events.append(chunk(choice({}, _chat_finish(answer))))
    if with_usage:
        events.append(chunk([], _chat_usage(answer)))
    events.append(b"data: [DONE]\n\n")
    return _sse_reply(events)


# OpenAI Responses: https://platform.openai.com/docs/api-reference/responses-streaming


def _response_items(answer: _Answer) -> list[JSON]:
    """The completed output items of the turn: one message, or one function_call per call."""
    n = answer.number
    if isinstance(answer.turn, TextTurn):
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": answer.text}
        return [
            {
                "id": f"msg_fake_{n:04d}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        ]
    return [
        {
            "id": f"fc_fake_{n}_{i}",
            "type": "function_call",
            "status": "completed",
            "arguments": _arguments(call),
            "call_id": _call_id(answer, i),
            "name": call.name,
        }
        for i, call in enumerate(_calls(answer.turn))
    ]


def _response_object(answer: _Answer, status: str, output: list[JSON]) -> JSON:
    inp, out = answer.input_tokens, answer.output_tokens
    usage = {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }
    return {
        "id": f"resp_fake_{answer.number:04d}",
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": answer.request.get("instructions"),
        "model": answer.model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": answer.request.get("previous_response_id"),
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": answer.request.get("tools", []),
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage if status == "completed" else None,
        "metadata": {},
    }


def _responses(answer: _Answer) -> _Reply:
    if not answer.streamed:
        return _json_reply(_response_object(answer, "completed", _response_items(answer)))
    items = _response_items(answer)
    started = _response_object(answer, "in_progress", [])
    events: list[tuple[str, dict[str, JSON]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
    ]
    for index, item in enumerate(items):
        events += _item_events(index, item)
    events.append(
        ("response.completed", {"response": _response_object(answer, "completed", items)})
    )
    return _sse_reply(
        [
            _named_event(name, {"type": name, "sequence_number": seq, **body})
            for seq, (name, body) in enumerate(events)
        ]
    )


def _item_events(index: int, item: JSON) -> list[tuple[str, dict[str, JSON]]]:
    """The events that stream one output item, from ``output_item.added`` to ``.done``."""
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        args = item["arguments"]
        return [
            (
                "response.output_item.added",
                {"output_index": index, "item": {**item, "status": "in_progress", "arguments": ""}},
            ),
            *[
                ("response.function_call_arguments.delta", {**where, "delta": f})
                for f in _fragments(args)
            ],
            (
                "response.function_call_arguments.done",
                {**where, "name": item["name"], "arguments": args},
            ),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]
    part = item["content"][0]
    text, at = part["text"], {**where, "content_index": 0}
    return [
        (
            "response.output_item.added",
            {"output_index": index, "item": {**item, "status": "in_progress", "content": []}},
        ),
        ("response.content_part.added", {**at, "part": {**part, "text": ""}}),
        *[
            ("response.output_text.delta", {**at, "delta": p, "logprobs": []})
            for p in _pieces(text)
        ],
        ("response.output_text.done", {**at, "text": text, "logprobs": []}),
        ("response.content_part.done", {**at, "part": part}),
        ("response.output_item.done", {"output_index": index, "item": item}),
    ]


# Anthropic messages: https://docs.anthropic.com/en/api/messages-streaming


def _message_blocks(answer: _Answer) -> list[JSON]:
    if isinstance(answer.turn, TextTurn):
        return [{"type": "text", "text": answer.text}]
    return [
        {
            "type": "tool_use",
            "id": f"toolu_fake_{answer.number}_{i}",
            "name": c.name,
            "input": dict(c.arguments),
        }
        for i, c in enumerate(_calls(answer.turn))
    ]


def _message_object(answer: _Answer, content: list[JSON], done: bool) -> JSON:
    stop_reason = ("tool_use" if _calls(answer.turn) else "end_turn") if done else None
    return {
        "id": f"msg_fake_{answer.number:04d}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": answer.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": answer.output_tokens if done else 1,
        },
    }


def _block_events(index: int, block: JSON) -> list[tuple[str, dict[str, JSON]]]:
    """``content_block_start``, its deltas, ``content_block_stop``; a ping after the first start."""
    if block["type"] == "text":
        opening: JSON = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
    else:
        opening = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": f}
            for f in _fragments(json.dumps(block["input"]))
        ]
    ping: list[tuple[str, dict[str, JSON]]] = [("ping", {})] if index == 0 else []
    return [
        ("content_block_start", {"index": index, "content_block": opening}),
        *ping,
        *[("content_block_delta", {"index": index, "delta": delta}) for delta in deltas],
        ("content_block_stop", {"index": index}),
    ]


def _messages(answer: _Answer) -> _Reply:
    blocks = _message_blocks(answer)
    if not answer.streamed:
        return _json_reply(_message_object(answer, blocks, done=True))
    finished = _message_object(answer, blocks, done=True)
    events: list[tuple[str, dict[str, JSON]]] = [
        ("message_start", {"message": _message_object(answer, [], done=False)})
    ]
    for index, block in enumerate(blocks):
        events += _block_events(index, block)
    events += [
        (
            "message_delta",
            {
                "delta": {"stop_reason": finished["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": answer.output_tokens},
            },
        ),
        ("message_stop", {}),
    ]
    return _sse_reply([_named_event(name, {"type": name, **body}) for name, body in events])


# OpenAI embeddings: https://platform.openai.com/docs/api-reference/embeddings


def _embedding(item: JSON, dimensions: int) -> list[float]:
    """A unit vector that is a pure function of ``item``, in float32 precision."""
    seed = _json_bytes(item)
    words = b"".join(
        hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(dimensions // 8 + 1)
    )
    raw = [n / 2**31 - 1.0 for n in struct.unpack(f">{dimensions}I", words[: 4 * dimensions])]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(x / norm for x in raw))
    return list(struct.unpack(f"<{dimensions}f", packed))


def _embeddings(request: Mapping[str, JSON], request_size: int) -> _Reply:
    inputs = request.get("input")
    if isinstance(inputs, str) or (
        isinstance(inputs, list) and inputs and isinstance(inputs[0], int)
    ):
        inputs = [inputs]
    dimensions = request.get("dimensions") or EMBEDDING_DIMENSIONS
    if (
        not isinstance(inputs, list)
        or not inputs
        or not isinstance(dimensions, int)
        or dimensions < 1
    ):
        message = (
            "wiretape fake provider: embeddings need a non-empty 'input' "
            "and a positive integer 'dimensions'"
        )
        return _error(_OPENAI, _BAD_REQUEST, message)
    as_base64 = request.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vector = _embedding(item, dimensions)
        encoded: JSON = (
            base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode("ascii")
            if as_base64
            else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = max(1, request_size // 4)
    return _json_reply(
        {
            "object": "list",
            "data": data,
            "model": str(request.get("model") or "fake-embedding"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


# errors, in each provider's shape


@dataclass(frozen=True)
class _Failure:
    status: int
    openai_type: str
    anthropic_type: str


_NOT_FOUND = _Failure(404, "invalid_request_error", "not_found_error")
_BAD_REQUEST = _Failure(400, "invalid_request_error", "invalid_request_error")
_EXHAUSTED = _Failure(500, "server_error", "api_error")


def _openai_error(failure: _Failure, message: str) -> JSON:
    return {"error": {"message": message, "type": failure.openai_type, "param": None, "code": None}}


def _anthropic_error(failure: _Failure, message: str) -> JSON:
    return {"type": "error", "error": {"type": failure.anthropic_type, "message": message}}


_ErrorShape: TypeAlias = Callable[[_Failure, str], JSON]
_OPENAI: _ErrorShape = _openai_error
_ANTHROPIC: _ErrorShape = _anthropic_error


def _error(shape: _ErrorShape, failure: _Failure, message: str) -> _Reply:
    return _json_reply(shape(failure, message), failure.status)


# routes


def _last_of(key: str) -> Callable[[Mapping[str, JSON]], JSON]:
    """The last element of list ``request[key]``, or the value itself when it is not a list."""

    def last(request: Mapping[str, JSON]) -> JSON:
        value = request.get(key)
        return value[-1] if isinstance(value, list) and value else value

    return last


@dataclass(frozen=True)
class _ScriptedRoute:
    suffix: str
    errors: _ErrorShape
    last_message: Callable[[Mapping[str, JSON]], JSON]
    render: Callable[[_Answer], _Reply]


@dataclass(frozen=True)
class _ComputedRoute:
    suffix: str
    errors: _ErrorShape
    render: Callable[[Mapping[str, JSON], int], _Reply]


_ROUTES: tuple[_ScriptedRoute | _ComputedRoute, ...] = (
    _ScriptedRoute("/chat/completions", _OPENAI, _last_of("messages"), _chat),
    _ScriptedRoute("/responses", _OPENAI, _last_of("input"), _responses),
    _ScriptedRoute("/messages", _ANTHROPIC, _last_of("messages"), _messages),
    _ComputedRoute("/embeddings", _OPENAI, _embeddings),
)


def _route_for(method: str, target: str) -> _ScriptedRoute | _ComputedRoute | None:
    path = target.split("?", 1)[0].rstrip("/")
    if method != "POST":
        return None
    return next((route for route in _ROUTES if path.endswith(route.suffix)), None)


_TEXT_KEYS = ("content", "text", "output")  # where chat, Responses and Anthropic messages keep text


def _text_of(value: JSON) -> str:
    """The text of a message: strings under ``content``/``text``/``output``, at any depth."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_text_of(item) for item in value)
    if isinstance(value, dict):
        return "\n".join(_text_of(value[key]) for key in _TEXT_KEYS if key in value)
    return ""


# --- the script being played (thread-safe) -----------------------------------------------


class _Playbook:
    """The turns left to play and the requests received, behind one lock."""

    def __init__(self, script: Sequence[Turn]) -> None:
        self._turns = tuple(script)
        self._played = 0
        self._requests: list[ReceivedRequest] = []
        self._lock = threading.Lock()

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns) - self._played

    def answer(
        self, method: str, target: str, headers: tuple[tuple[bytes, bytes], ...], body: bytes
    ) -> tuple[ReceivedRequest, _Reply]:
        with self._lock:
            number = len(self._requests) + 1
            reply, turn = self._decide(method, target, body)
            request = ReceivedRequest(number, method, target, headers, body, turn)
            self._requests.append(request)
            return request, reply

    def _decide(self, method: str, target: str, body: bytes) -> tuple[_Reply, int | None]:
        route = _route_for(method, target)
        if route is None:
            path = target.split("?", 1)[0]
            message = f"wiretape fake provider: no route for {method} {path}"
            return _error(_OPENAI, _NOT_FOUND, message), None
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            message = "wiretape fake provider: the request body is not a JSON object"
            return _error(route.errors, _BAD_REQUEST, message), None
        if isinstance(route, _ComputedRoute):
            return route.render(request, len(body)), None
        if self._played >= len(self._turns):
            message = (
                f"wiretape fake provider: script exhausted: all {len(self._turns)} turns were "
                f"played before this request to {target}"
            )
            return _error(route.errors, _EXHAUSTED, message), None
        turn = self._turns[self._played]
        self._played += 1
        said = _text_of(route.last_message(request))
        if turn.expect is not None and turn.expect not in said:
            message = (
                f"wiretape fake provider: turn {self._played} expects the last message to contain "
                f"{turn.expect!r}, but it was {said[:200]!r}"
            )
            return _error(route.errors, _BAD_REQUEST, message), self._played
        return route.render(_Answer(self._played, turn, request, len(body))), self._played


def _response_head(reply: _Reply, request_number: int) -> list[tuple[bytes, bytes]]:
    head = [
        (b"content-type", reply.content_type),
        (b"server", _SERVER_NAME),
        (b"x-request-id", f"req_fake_{request_number:04d}".encode("ascii")),
    ]
    if reply.status >= 400:
        # Both SDKs honour this header: a scripted error is final, retrying cannot help.
        head.append((b"x-should-retry", b"false"))
    if reply.streamed:
        return [*head, (b"cache-control", b"no-cache"), (b"transfer-encoding", b"chunked")]
    return [*head, (b"content-length", str(sum(map(len, reply.chunks))).encode("ascii"))]


# --- the server (asyncio + h11) ----------------------------------------------------------


@dataclass(frozen=True)
class _Incoming:
    method: str
    target: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> _Incoming | None:
    """The next complete request on the connection, or ``None`` once the client closed it."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(_READ_SIZE))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            return _Incoming(
                head.method.decode("latin-1"),
                head.target.decode("latin-1"),
                tuple((bytes(n), bytes(v)) for n, v in head.headers.raw_items()),
                bytes(body),
            )
        else:  # ConnectionClosed, or PAUSED after a protocol switch we never agree to
            return None


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        writer.write(data)
        await writer.drain()


class AsyncFakeProvider:
    """The fake provider inside a running event loop.

    ``script`` is played in request arrival order; ``port`` 0 picks a free port;
    ``delay`` is the pause in seconds between two events of a streamed response.
    Use ``async with AsyncFakeProvider(script) as fp:`` or ``start()`` / ``close()``.
    """

    def __init__(
        self, script: Sequence[Turn] = (), *, port: int = 0, delay: float = DEFAULT_DELAY
    ) -> None:
        self._playbook = _Playbook(script)
        self._wanted_port = port
        self._delay = delay
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._accepted = 0

    @property
    def port(self) -> int:
        """The listening TCP port; raises ``RuntimeError`` before ``start()``."""
        if self._port is None:
            raise RuntimeError("the fake provider is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a base path; add ``/v1`` for OpenAI clients."""
        return f"http://{HOST}:{self.port}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        return self._playbook.requests

    @property
    def remaining(self) -> int:
        """How many script turns are still to be played."""
        return self._playbook.remaining

    async def start(self) -> None:
        """Listen on 127.0.0.1; raises :class:`wiretape.errors.PortInUse` when the port is taken."""
        try:
            self._server = await asyncio.start_server(self._accept, HOST, self._wanted_port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(HOST, self._wanted_port) from exc
            raise
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and cut every open connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> AsyncFakeProvider:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        task = asyncio.get_running_loop().create_task(
            self._converse(reader, writer),
            name=f"wiretape-fake-provider-connection-{self._accepted}",
        )
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until either side closes it."""
        conn = h11.Connection(h11.SERVER)
        try:
            while (incoming := await _read_request(conn, reader)) is not None:
                request, reply = self._playbook.answer(
                    incoming.method, incoming.target, incoming.headers, incoming.body
                )
                await self._respond(conn, writer, reply, request.number)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError):
            return  # the client hung up or spoke something other than HTTP/1.1
        finally:
            writer.close()

    async def _respond(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, reply: _Reply, number: int
    ) -> None:
        head = _response_head(reply, number)
        reason = HTTPStatus(reply.status).phrase.encode("ascii")
        await _send(
            conn, writer, h11.Response(status_code=reply.status, headers=head, reason=reason)
        )
        for index, chunk in enumerate(reply.chunks):
            if index and reply.streamed:
                await asyncio.sleep(self._delay)
            await _send(conn, writer, h11.Data(data=chunk))  # one chunk, flushed, per SSE event
        await _send(conn, writer, h11.EndOfMessage())


class FakeProvider:
    """The fake provider on a background thread, for synchronous tests.

    ``with FakeProvider(script, port=0) as fp:`` starts it and stops it;
    ``fp.url`` is ``http://127.0.0.1:PORT`` and ``fp.requests`` the requests
    received (still readable after the block). Arguments as :class:`AsyncFakeProvider`.
    """

    def __init__(
        self, script: Sequence[Turn] = (), *, port: int = 0, delay: float = DEFAULT_DELAY
    ) -> None:
        self._core = AsyncFakeProvider(script, port=port, delay=delay)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def port(self) -> int:
        """The listening TCP port; raises ``RuntimeError`` before ``start()``."""
        return self._core.port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a base path; add ``/v1`` for OpenAI clients."""
        return self._core.url

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of the requests received so far, in arrival order."""
        return self._core.requests

    @property
    def remaining(self) -> int:
        """How many script turns are still to be played."""
        return self._core.remaining

    def start(self) -> None:
        """Start serving; returns once the port is bound, or raises what binding raised."""
        if self._thread is not None:
            raise RuntimeError("the fake provider is already started")
        self._thread = threading.Thread(
            target=self._thread_main, name="wiretape-fake-provider", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error

    def stop(self) -> None:
        """Stop serving and wait for the thread to end (at most 10 s)."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        thread.join(_STOP_TIMEOUT)
        self._thread = None

    def __enter__(self) -> FakeProvider:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _thread_main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            await self._core.start()
        except BaseException as exc:  # handed over to the thread that called start()
            self._startup_error = exc
            return
        finally:
            self._started.set()
        try:
            await self._stopping.wait()
        finally:
            await self._core.close()


# --- as a process ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m wiretape.testing",
        description="Serve a scripted fake model provider on 127.0.0.1 until SIGTERM or SIGINT.",
        epilog="example: python -m wiretape.testing --port 8765 --script script.json",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port; 0 picks a free one (default)"
    )
    parser.add_argument(
        "--script", type=Path, help="JSON script file (default: the demo agent's script)"
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=DEFAULT_DELAY * 1000,
        help="pause between streamed events, in ms",
    )
    return parser


async def _serve_until_signalled(script: Sequence[Turn], port: int, delay: float) -> int:
    provider = AsyncFakeProvider(script, port=port, delay=delay)
    await provider.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(f"listening {provider.url}", flush=True)
    try:
        await stopping.wait()
    finally:
        await provider.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wiretape.testing``: print ``listening URL`` and serve until signalled."""
    args = _parser().parse_args(argv)
    try:
        script = load_script(args.script) if args.script else demo_script()
        return asyncio.run(_serve_until_signalled(script, args.port, args.delay_ms / 1000))
    except WiretapeError as exc:
        print(f"wiretape fake provider: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
