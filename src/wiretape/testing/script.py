"""The script: the ordered turns the fake model plays, and their JSON form.

This module owns the turn types (:class:`TextTurn`, :class:`ToolCallTurn` and
the :class:`ToolCall` they carry), reading and writing a script as JSON, the
demo agent's script, and :class:`ScriptError` for a script that cannot be
played. It must not know how a turn is rendered on the wire, which endpoints
exist, or that there is a server at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from wiretape.errors import UsageError

JSON: TypeAlias = Any
"""A value as :func:`json.loads` returns it. Any, not a union: the fake
provider builds and takes apart provider documents of every shape, and its
tests check the bytes it writes."""


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


#: The two scripted "models" :func:`fork_models` plays.
FIXER_MODEL = "fake-fixer"
IDLE_MODEL = "fake-idle"


def fork_models() -> dict[str, list[Turn]]:
    """Two "models" for forks of the demo agent's run after its first turn
    (``read_file inventory.txt``), run with ``--write``: ``fake-fixer``
    adds the counts and writes ``total: 42`` to ``report.txt``;
    ``fake-idle`` answers at once and changes nothing."""
    return {
        FIXER_MODEL: [
            ToolCallTurn([ToolCall("add", {"a": 17, "b": 25})], expect="apples: 17"),
            ToolCallTurn([ToolCall("write_file", {"path": "report.txt",
                                                  "content": "total: 42\n"})], expect="42"),
            TextTurn("report.txt now says total: 42.", expect="wrote report.txt"),
        ],
        IDLE_MODEL: [TextTurn("The report looks right to me.", expect="apples: 17")],
    }
