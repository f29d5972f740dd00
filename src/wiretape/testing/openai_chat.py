"""A scripted turn as an OpenAI chat completion, JSON or SSE (pure: values in, bytes out).

Format: https://platform.openai.com/docs/api-reference/chat/object and
https://platform.openai.com/docs/api-reference/chat-streaming. This module owns
the completion object, its chunks (text in whitespace-cut deltas, tool-call
arguments in fragments) and the optional usage chunk. It must not know about
sockets, routing, or which turn comes next.
"""

from __future__ import annotations

from wiretape.testing.script import JSON, TextTurn
from wiretape.testing.wire import (
    CREATED,
    Answer,
    Reply,
    call_arguments,
    call_id,
    data_event,
    fragments,
    json_reply,
    pieces,
    sse_reply,
    turn_calls,
)

_FINGERPRINT = "fp_wiretape_fake"


def chat(answer: Answer) -> Reply:
    """The reply to ``POST .../chat/completions`` for the answered turn."""
    return _chat_stream(answer) if answer.streamed else json_reply(_chat_object(answer))


def _chat_id(answer: Answer) -> str:
    return f"chatcmpl-fake-{answer.number:04d}"


def _chat_finish(answer: Answer) -> str:
    return "tool_calls" if turn_calls(answer.turn) else "stop"


def _chat_usage(answer: Answer) -> dict[str, int]:
    inp, out = answer.input_tokens, answer.output_tokens
    return {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}


def _chat_object(answer: Answer) -> JSON:
    message: dict[str, JSON] = {
        "role": "assistant",
        "content": answer.text if isinstance(answer.turn, TextTurn) else None,
        "refusal": None,
        "annotations": [],
    }
    if calls := turn_calls(answer.turn):
        message["tool_calls"] = [
            {
                "id": call_id(answer, i),
                "type": "function",
                "function": {"name": c.name, "arguments": call_arguments(c)},
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


def _chat_deltas(answer: Answer) -> list[JSON]:
    """The ``delta`` objects after the first (role) chunk, tool-call arguments in fragments."""
    if isinstance(answer.turn, TextTurn):
        return [{"content": piece} for piece in pieces(answer.text)]
    deltas: list[JSON] = []
    for i, call in enumerate(turn_calls(answer.turn)):
        opening = {"name": call.name, "arguments": ""}
        deltas.append(
            {
                "tool_calls": [
                    {"index": i, "id": call_id(answer, i), "type": "function", "function": opening}
                ]
            }
        )
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}
            for fragment in fragments(call_arguments(call))
        ]
    return deltas


def _chat_stream(answer: Answer) -> Reply:
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
        return data_event(value)

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
    return sse_reply(events)
