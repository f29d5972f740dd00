"""The shared part of every response reader: a draft that collects text,
reasoning, tool calls, the stop reason, usage, errors and unknown events
while a reader walks a body's events, then freezes into a ResponseView.

Also owns the helpers every format needs: reading an error object (OpenAI,
Anthropic, Gemini and Groq all nest it under ``error``), typed member
access on untrusted JSON, and the complete tool calls of a document found
through ``matching.toolcalls.CALL_SHAPES`` (one table of where providers
write a tool call, shared with divergence reports). Knows no event names.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from wiretape.inspect.formats.view import ResponseView, ToolCall, Usage, WireError
from wiretape.matching.jsontree import MISSING, at, text_at
from wiretape.matching.toolcalls import call_nodes

#: Roots of the CALL_SHAPES rows that describe requests, not responses.
_REQUEST_ROOTS = frozenset({"messages", "input", "contents"})


def get(value: object, *path: str) -> Any:
    """The value at ``path`` in untrusted JSON, or None. Any: a provider's
    document has any shape; every reader checks the type of what it uses
    (``text``, ``integer``, isinstance) before it relies on it."""
    found = at(value, path)
    return None if found is MISSING else found


def text(value: object, *path: str) -> str | None:
    return text_at(value, path)


def integer(value: object, *path: str) -> int | None:
    found = get(value, *path)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def arguments_text(value: object) -> str:
    """Arguments as JSON text: a string as sent, anything else serialised."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def error_of(document: object, *, in_band: bool) -> WireError | None:
    """The error a document carries under ``error`` (an object with
    ``message`` and ``type``/``status``/``code``, or a string), else None."""
    err = get(document, "error")
    if isinstance(err, str) and err:
        return WireError(err, None, in_band)
    if not isinstance(err, dict):
        return None
    message = err.get("message")
    kind = err.get("type") or err.get("status") or err.get("code")
    return WireError(str(message) if message is not None else json.dumps(err)[:300],
                     str(kind) if kind is not None else None, in_band)


def _path_key(path: tuple[str, ...]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in path)


def complete_calls(document: object) -> list[ToolCall]:
    """Tool calls written whole in one response document, in document order."""
    found = []
    for shape, path, node in call_nodes(document):
        if shape.pattern[0] in _REQUEST_ROOTS:
            continue
        name = text_at(node, shape.name_path)
        if not name:
            continue
        call = ToolCall(text_at(node, shape.id_path) or "", name,
                        arguments_text(get(node, *shape.arguments_path)),
                        "custom" if shape.type == "custom_tool_call" else "function")
        found.append((_path_key(path), call))
    return [call for _, call in sorted(found, key=lambda item: item[0])]


@dataclass
class CallDraft:
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    kind: str = "function"
    whole: str | None = None  # arguments given whole, which win over fragments
    fallback: str = ""  # what stands when neither came (a call's announced input)

    def freeze(self) -> ToolCall:
        args = self.whole if self.whole is not None else "".join(self.arguments)
        return ToolCall(self.call_id, self.name, args or self.fallback, self.kind)


class Draft:
    """A response being read. Readers append; ``freeze`` makes the view."""

    def __init__(self, format_name: str, *, streamed: bool, in_band: bool) -> None:
        self.format = format_name
        self.streamed = streamed
        self.in_band = in_band  # errors met here arrive inside a successful response
        self.model: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[object, CallDraft] = {}
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        self.errors: list[WireError] = []
        self.unknown: Counter[str] = Counter()
        self.events = 0
        self.vectors: int | None = None
        self.dimensions: int | None = None
        self.notes: list[str] = []

    def call(
        self, key: object, call_id: str = "", name: str = "", kind: str = "function"
    ) -> CallDraft:
        """The draft of the call known by ``key``, made on first sight."""
        draft = self.calls.get(key)
        if draft is None:
            draft = self.calls[key] = CallDraft(call_id, name, kind=kind)
        if call_id and not draft.call_id:
            draft.call_id = call_id
        if name and not draft.name:
            draft.name = name
        return draft

    def add_whole_calls(self, calls: list[ToolCall]) -> None:
        """Complete calls: a call seen before (same id) gets its arguments."""
        for n, call in enumerate(calls):
            key = call.call_id or ("whole", self.events, n)
            draft = self.call(key, call.call_id, call.name, call.kind)
            draft.whole = call.arguments

    def error(self, document: object) -> bool:
        err = error_of(document, in_band=self.in_band)
        if err is not None:
            self.errors.append(err)
        return err is not None

    def set_model(self, value: object) -> None:
        if isinstance(value, str) and value and self.model is None:
            self.model = value

    def freeze(self) -> ResponseView:
        return ResponseView(
            format=self.format, streamed=self.streamed, model=self.model,
            text="".join(self.text), reasoning="".join(self.reasoning),
            tool_calls=tuple(c.freeze() for c in self.calls.values() if c.name),
            stop_reason=self.stop_reason, usage=self.usage, errors=tuple(self.errors),
            events=self.events, unknown_events=tuple(self.unknown.items()),
            vectors=self.vectors, dimensions=self.dimensions, notes=tuple(self.notes),
        )
