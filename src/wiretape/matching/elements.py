"""A conversation element in a few words: who speaks, which tools it calls
or answers, and its first words.

Used to name the messages a live request has more (or fewer) than the
recorded one, e.g. ``assistant -> read_file`` or ``user "Read notes.txt,
then..."``. Knows the message shapes of OpenAI Chat Completions
(``role``, ``content``, ``tool_calls[].function.name``, ``name``),
Anthropic Messages (``content[]`` blocks ``text``, ``tool_use``,
``tool_result``), OpenAI Responses input items (``type`` ``message``,
``function_call``, ``function_call_output``) and Gemini contents
(``parts[]`` with ``text``, ``functionCall``, ``functionResponse``); any
other value is shown as trimmed JSON. Pure.
"""

from __future__ import annotations

import json

from wiretape.matching.jsontree import at, members

#: Characters of text shown per element.
WORDS = 32


def _first_words(text: str) -> str:
    flat = " ".join(text.split())
    return json.dumps(flat if len(flat) <= WORDS else flat[: WORDS - 1] + "\u2026",
                      ensure_ascii=False)


def _strings(*values: object) -> list[str]:
    return [v for v in values if isinstance(v, str) and v]


def _blocks(value: object) -> list[dict[str, object]]:
    if not isinstance(value, list):
        return []
    return [m for m in (members(item) for item in value) if m is not None]


def describe(value: object) -> str:
    """``value`` (a parsed JSON element of a conversation) in a few words."""
    found = members(value)
    if found is None:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= WORDS else text[: WORDS - 1] + "\u2026"
    who = _strings(found.get("role"), found.get("type"))
    calls: list[str] = []
    answers: list[str] = []
    texts = _strings(found.get("content"), found.get("text"), found.get("output"))
    for call in _blocks(found.get("tool_calls")):
        calls += _strings(at(call, ("function", "name")))
    if found.get("type") == "function_call":
        calls += _strings(found.get("name"))
    if found.get("role") == "tool":
        answers += _strings(found.get("name")) or _strings(found.get("tool_call_id"))
    for block in _blocks(found.get("content")) + _blocks(found.get("parts")):
        texts += _strings(block.get("text"))
        if block.get("type") == "tool_use":
            calls += _strings(block.get("name"))
        if block.get("type") == "tool_result":
            answers += _strings(block.get("tool_use_id"))
        calls += _strings(at(block, ("functionCall", "name")))
        answers += _strings(at(block, ("functionResponse", "name")))
    head = who[0] if who else "element"
    if calls:
        head += " -> " + ", ".join(calls)
    if answers:
        head += " " + ", ".join(answers)
    if texts:
        head += " " + _first_words(texts[0])
    return head
