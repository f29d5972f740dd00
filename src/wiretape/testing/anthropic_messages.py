"""A scripted turn as an Anthropic message, JSON or SSE (pure: values in, bytes out).

Format: https://docs.anthropic.com/en/api/messages-streaming. This module owns
the message object, its content blocks (one text block, or one ``tool_use``
block per call) and the named event sequence that streams them, with the
``ping`` after the first block starts. It must not know about sockets,
routing, or which turn comes next.
"""

from __future__ import annotations

import json

from wiretape.testing.script import JSON, TextTurn
from wiretape.testing.wire import (
    Answer,
    Reply,
    fragments,
    json_reply,
    named_event,
    pieces,
    sse_reply,
    turn_calls,
)


def messages(answer: Answer) -> Reply:
    """The reply to ``POST .../messages`` for the answered turn."""
    blocks = _message_blocks(answer)
    if not answer.streamed:
        return json_reply(_message_object(answer, blocks, done=True))
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
    return sse_reply([named_event(name, {"type": name, **body}) for name, body in events])


def _message_blocks(answer: Answer) -> list[JSON]:
    if isinstance(answer.turn, TextTurn):
        return [{"type": "text", "text": answer.text}]
    return [
        {
            "type": "tool_use",
            "id": f"toolu_fake_{answer.number}_{i}",
            "name": c.name,
            "input": dict(c.arguments),
        }
        for i, c in enumerate(turn_calls(answer.turn))
    ]


def _message_object(answer: Answer, content: list[JSON], done: bool) -> JSON:
    stop_reason = ("tool_use" if turn_calls(answer.turn) else "end_turn") if done else None
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
        deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    else:
        opening = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": f}
            for f in fragments(json.dumps(block["input"]))
        ]
    ping: list[tuple[str, dict[str, JSON]]] = [("ping", {})] if index == 0 else []
    return [
        ("content_block_start", {"index": index, "content_block": opening}),
        *ping,
        *[("content_block_delta", {"index": index, "delta": delta}) for delta in deltas],
        ("content_block_stop", {"index": index}),
    ]
