"""A scripted turn as an OpenAI Responses object, JSON or SSE (pure: values in, bytes out).

Format: https://platform.openai.com/docs/api-reference/responses-streaming. This
module owns the response object, its output items (one message, or one
``function_call`` per call) and the numbered event sequence that streams them.
It must not know about sockets, routing, or which turn comes next.
"""

from __future__ import annotations

from wiretape.testing.script import JSON, TextTurn
from wiretape.testing.wire import (
    CREATED,
    Answer,
    Reply,
    call_arguments,
    call_id,
    fragments,
    json_reply,
    named_event,
    pieces,
    sse_reply,
    turn_calls,
)


def responses(answer: Answer) -> Reply:
    """The reply to ``POST .../responses`` for the answered turn."""
    if not answer.streamed:
        return json_reply(_response_object(answer, "completed", _response_items(answer)))
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
    return sse_reply(
        [
            named_event(name, {"type": name, "sequence_number": seq, **body})
            for seq, (name, body) in enumerate(events)
        ]
    )


def _response_items(answer: Answer) -> list[JSON]:
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
            "arguments": call_arguments(call),
            "call_id": call_id(answer, i),
            "name": call.name,
        }
        for i, call in enumerate(turn_calls(answer.turn))
    ]


def _response_object(answer: Answer, status: str, output: list[JSON]) -> JSON:
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
                for f in fragments(args)
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
        *[("response.output_text.delta", {**at, "delta": p, "logprobs": []}) for p in pieces(text)],
        ("response.output_text.done", {**at, "text": text, "logprobs": []}),
        ("response.content_part.done", {**at, "part": part}),
        ("response.output_item.done", {"output_index": index, "item": item}),
    ]
