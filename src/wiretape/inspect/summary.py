"""One-line summaries of requests, for lists of unused or unmatched
exchanges: the model, the last message's role and its first words; and of
a WebSocket message, as ``show`` and the report list it.

Display only: matching never uses this. Knows the request shapes of OpenAI
chat (``messages``), OpenAI Responses (``input``), Anthropic (``messages``
with content blocks) and Gemini (``contents`` with ``parts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from wiretape.model import JSONValue, Message, Request

_WORDS = 8


def _text_of(content: object) -> str:
    """The readable text of a message's content, whatever its shape."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text_of(part) for part in content if _text_of(part))
    if isinstance(content, dict):
        for key in ("text", "content", "output", "input_text"):
            if key in content:
                return _text_of(content[key])
        if "functionResponse" in content:
            return "functionResponse " + str(content["functionResponse"].get("name", ""))
        if "type" in content:
            return f"[{content['type']}]"
    return ""


def _last_message(body: dict[str, JSONValue]) -> tuple[str, str] | None:
    for key in ("messages", "input", "contents"):
        items = body.get(key)
        if isinstance(items, str):
            return "user", items
        if isinstance(items, list) and items:
            last = items[-1]
            if isinstance(last, dict):
                role = last.get("role") or last.get("type") or "?"
                text = _text_of(last.get("content", last.get("parts", last.get("output", ""))))
                return str(role), text
    return None


def first_words(text: str, n: int = _WORDS) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def request_summary(request: Request) -> str:
    """E.g. ``model gpt-4o-mini, last message tool: "apples: 17 pears: 25"``."""
    from wiretape.inspect.formats.requests import decoded

    raw, undecoded = decoded(request)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return undecoded or (f"{len(raw)} bytes, not JSON" if raw else "no body")
    if not isinstance(body, dict):
        return "JSON body"
    parts = []
    if "model" in body:
        parts.append(f"model {body['model']}")
    last = _last_message(body)
    if last is not None:
        role, text = last
        parts.append(f'last message {role}: "{first_words(text)}"')
    return ", ".join(parts) or "JSON body"


@dataclass(frozen=True)
class MessageSummary:
    """A WebSocket message in a few words: ``direction`` with its arrow
    (``→ client``: agent to origin, ``← server``), ``opcode`` with a close's
    code (``close 1000``), ``size`` of the payload in bytes, and ``head`` its
    first bytes as text (bytes that are not UTF-8 as backslash escapes, an
    ellipsis when cut; empty for an empty payload). Not escaped for display."""

    direction: str
    opcode: str
    size: int
    head: str


def message_summary(message: Message, head_bytes: int) -> MessageSummary:
    """``message`` summarised, its head at most ``head_bytes`` bytes of payload."""
    code = "" if message.close_code is None else f" {message.close_code}"
    head = message.payload[:head_bytes].decode("utf-8", "backslashreplace")
    more = "…" if len(message.payload) > head_bytes else ""
    return MessageSummary("→ client" if message.direction == "client" else "← server",
                          f"{message.opcode.value}{code}", len(message.payload), head + more)
