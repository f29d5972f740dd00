"""What every wire format of the fake provider shares (pure: values in, bytes out).

This module owns a reply before it is framed (:class:`Reply`), what a format
renderer is given (:class:`Answer`), the JSON and SSE encodings, how text and
tool-call arguments are cut into streamed deltas, the ids and timestamp shared
by the OpenAI formats, and errors in each provider's shape (a table of
failures, an OpenAI, an Anthropic and a Google error body). The per-endpoint
renderers live in ``openai_chat``, ``openai_responses``, ``anthropic_messages``,
``gemini_generate`` and ``openai_embeddings``.

It must not know about sockets, HTTP framing or headers, which endpoint a
request reached, or which turn of the script comes next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from wiretape.testing.script import JSON, TextTurn, ToolCall, ToolCallTurn, Turn

CREATED = 1_700_000_000
"""The fixed ``created`` / ``created_at`` timestamp (Unix seconds) of every answer."""

_FRAGMENT_SIZE = 7  # characters of tool-call arguments per streamed delta


@dataclass(frozen=True)
class Reply:
    """A response before it is framed: body ``chunks`` (one SSE event each when streamed)."""

    status: int
    content_type: bytes
    chunks: tuple[bytes, ...]
    streamed: bool = False


@dataclass(frozen=True)
class Answer:
    """What a renderer needs: the turn, its 1-based number, the parsed request, and
    the request's target (Gemini names the model in the path, not the body)."""

    number: int
    turn: Turn
    request: Mapping[str, JSON]
    request_size: int
    target: str = ""

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
        produced = self.text + "".join(call_arguments(c) for c in turn_calls(self.turn))
        return max(1, len(produced) // 4)


def turn_calls(turn: Turn) -> Sequence[ToolCall]:
    """The tool calls of ``turn``; none for a text turn."""
    return turn.calls if isinstance(turn, ToolCallTurn) else ()


def call_arguments(call: ToolCall) -> str:
    """The arguments of ``call`` as the JSON string the OpenAI formats carry."""
    return json.dumps(dict(call.arguments))


def call_id(answer: Answer, index: int) -> str:
    """The OpenAI ``call_id`` of the ``index``-th call of the answered turn."""
    return f"call_fake_{answer.number}_{index}"


def pieces(text: str) -> list[str]:
    """``text`` cut after each run of whitespace: the deltas of a streamed text."""
    return [piece for piece in re.findall(r"\S*\s*", text) if piece] or [""]


def fragments(text: str) -> list[str]:
    """``text`` cut every few characters: the deltas of streamed tool-call arguments."""
    return [text[i : i + _FRAGMENT_SIZE] for i in range(0, len(text), _FRAGMENT_SIZE)] or [""]


def json_bytes(value: JSON) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_reply(value: JSON, status: int = 200) -> Reply:
    return Reply(status, b"application/json", (json_bytes(value),))


def sse_reply(events: Sequence[bytes]) -> Reply:
    return Reply(200, b"text/event-stream; charset=utf-8", tuple(events), streamed=True)


def data_event(value: JSON) -> bytes:
    return b"data: " + json_bytes(value) + b"\n\n"


def named_event(name: str, value: JSON) -> bytes:
    return b"event: " + name.encode("ascii") + b"\n" + data_event(value)


# errors, in each provider's shape


@dataclass(frozen=True)
class Failure:
    status: int
    openai_type: str
    anthropic_type: str
    google_status: str


NOT_FOUND = Failure(404, "invalid_request_error", "not_found_error", "NOT_FOUND")
BAD_REQUEST = Failure(400, "invalid_request_error", "invalid_request_error", "INVALID_ARGUMENT")
EXHAUSTED = Failure(500, "server_error", "api_error", "INTERNAL")


def _openai_error(failure: Failure, message: str) -> JSON:
    return {"error": {"message": message, "type": failure.openai_type, "param": None, "code": None}}


def _anthropic_error(failure: Failure, message: str) -> JSON:
    return {"type": "error", "error": {"type": failure.anthropic_type, "message": message}}


def _google_error(failure: Failure, message: str) -> JSON:
    return {"error": {"code": failure.status, "message": message, "status": failure.google_status}}


ErrorShape: TypeAlias = Callable[[Failure, str], JSON]
OPENAI: ErrorShape = _openai_error
ANTHROPIC: ErrorShape = _anthropic_error
GOOGLE: ErrorShape = _google_error


def error_reply(shape: ErrorShape, failure: Failure, message: str) -> Reply:
    return json_reply(shape(failure, message), failure.status)
