"""A scripted turn as a Gemini ``GenerateContentResponse``, JSON or SSE (pure: values in,
bytes out), and the token count that consumes no turn.

Format: https://ai.google.dev/api/generate-content. This module owns the
response object (one candidate whose ``content`` holds one text part, or one
``functionCall`` part per call), how ``:streamGenerateContent?alt=sse``
streams it (one ``data:`` event per chunk, each a whole response object, the
text cut into pieces and each call whole, ``finishReason`` and the full
``usageMetadata`` on the last), and the answer to ``:countTokens``. The model
is named by the request's path (``/v1beta/models/{model}:method``), not its
body. It must not know about sockets, routing, or which turn comes next.

As the Gemini Developer API does, a ``functionCall`` carries no ``id``: the
client makes up its own call id. The ``responseId`` is derived from the turn
number (``fake-gemini-0003``), so two runs of the same script answer alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from wiretape.testing.script import JSON, TextTurn
from wiretape.testing.wire import Answer, Reply, json_bytes, json_reply, pieces, turn_calls


def generate_content(answer: Answer) -> Reply:
    """The reply to ``POST .../models/{model}:generateContent`` for the answered turn."""
    return json_reply(_response(answer, _parts(answer), done=True))


def stream_generate_content(answer: Answer) -> Reply:
    """The reply to ``POST .../models/{model}:streamGenerateContent?alt=sse``."""
    if isinstance(answer.turn, TextTurn):
        texts = pieces(answer.text)
        chunks = [[{"text": piece}] for piece in texts]
    else:
        chunks = [_parts(answer)]  # a call is never split: each event holds whole calls
    events = [
        _response(answer, parts, done=index == len(chunks) - 1)
        for index, parts in enumerate(chunks)
    ]
    return Reply(
        200,
        b"text/event-stream",
        tuple(b"data: " + json_bytes(event) + b"\r\n\r\n" for event in events),
        streamed=True,
    )


def count_tokens(request: Mapping[str, JSON], request_size: int) -> Reply:
    """The reply to ``POST .../models/{model}:countTokens``: a count derived from the size."""
    return json_reply({"totalTokens": max(1, request_size // 4)})


def model_of(target: str) -> str:
    """The model a Gemini path names: ``/v1beta/models/gemini-2.5-flash:generateContent``
    -> ``gemini-2.5-flash``; ``fake-model`` when the path names none."""
    path = target.split("?", 1)[0]
    _, found, rest = path.rpartition("/models/")
    return rest.split(":", 1)[0] if found and rest.split(":", 1)[0] else "fake-model"


def _parts(answer: Answer) -> list[JSON]:
    if isinstance(answer.turn, TextTurn):
        return [{"text": answer.text}]
    return [
        {"functionCall": {"name": call.name, "args": dict(call.arguments)}}
        for call in turn_calls(answer.turn)
    ]


def _response(answer: Answer, parts: list[JSON], *, done: bool) -> JSON:
    candidate: dict[str, JSON] = {"content": {"parts": parts, "role": "model"}}
    if done:
        candidate["finishReason"] = "STOP"
    candidate["index"] = 0
    prompt = answer.input_tokens
    usage: dict[str, JSON] = {"promptTokenCount": prompt, "totalTokenCount": prompt}
    if done:
        usage = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": answer.output_tokens,
            "totalTokenCount": prompt + answer.output_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": model_of(answer.target),
        "responseId": f"fake-gemini-{answer.number:04d}",
    }
