"""Which tool a call id names: read from the responses that asked for the
calls, and from a request's own history.

Owns the table of places where providers write a tool call (the id and the
tool's name), in whole responses, in streamed events and in the assistant
turns a request repeats. Knows nothing of differences or of where tool
results sit in a request (``toolresults``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from wiretape.matching.documents import documents
from wiretape.matching.jsontree import MISSING, Path, at, child, members, text_at
from wiretape.model import Response

#: "*" in a pattern stands for every element of an array.
ANY = "*"


@dataclass(frozen=True)
class CallShape:
    """Tool-call objects at ``pattern``, of ``type`` when given, with the
    call id at ``id_path``, the tool's name at ``name_path`` and its
    arguments at ``arguments_path`` (a JSON string or an object)."""

    pattern: Path
    type: str | None
    id_path: Path
    name_path: Path
    arguments_path: Path = ()


CALL_SHAPES: tuple[CallShape, ...] = (
    # OpenAI Chat Completions: choices[].message.tool_calls[] {id, function.name}
    # (platform.openai.com/docs/api-reference/chat/object); the same in a
    # request's assistant messages.
    CallShape(("choices", ANY, "message", "tool_calls", ANY), None, ("id",), ("function", "name"),
              ("function", "arguments")),
    CallShape(("messages", ANY, "tool_calls", ANY), None, ("id",), ("function", "name"),
              ("function", "arguments")),
    # Anthropic Messages: content[] {type: tool_use, id, name}
    # (docs.anthropic.com/en/api/messages); streamed as content_block_start
    # {content_block: {...}} (docs.anthropic.com/en/docs/build-with-claude/streaming).
    CallShape(("content", ANY), "tool_use", ("id",), ("name",), ("input",)),
    CallShape(("content_block",), "tool_use", ("id",), ("name",), ("input",)),
    CallShape(("messages", ANY, "content", ANY), "tool_use", ("id",), ("name",), ("input",)),
    # OpenAI Responses: output[] {type: function_call, call_id, name}
    # (platform.openai.com/docs/api-reference/responses/object); streamed as
    # response.output_item.added/done {item: {...}} and in response.completed;
    # repeated in a request's input[]. Custom tools: custom_tool_call.
    CallShape(("output", ANY), "function_call", ("call_id",), ("name",), ("arguments",)),
    CallShape(("item",), "function_call", ("call_id",), ("name",), ("arguments",)),
    CallShape(("response", "output", ANY), "function_call", ("call_id",), ("name",),
              ("arguments",)),
    CallShape(("input", ANY), "function_call", ("call_id",), ("name",), ("arguments",)),
    CallShape(("output", ANY), "custom_tool_call", ("call_id",), ("name",), ("input",)),
    CallShape(("item",), "custom_tool_call", ("call_id",), ("name",), ("input",)),
    CallShape(("input", ANY), "custom_tool_call", ("call_id",), ("name",), ("input",)),
    # Gemini: candidates[].content.parts[].functionCall {name, id?}
    # (ai.google.dev/api/caching#FunctionCall); contents[] in a request.
    CallShape(
        ("candidates", ANY, "content", "parts", ANY, "functionCall"), None, ("id",), ("name",),
        ("args",)
    ),
    CallShape(("contents", ANY, "parts", ANY, "functionCall"), None, ("id",), ("name",),
              ("args",)),
)

#: OpenAI chat streaming: tool_calls deltas carry ``index``; the id and the
#: name come in the first delta of an index, arguments in later ones
#: (platform.openai.com/docs/api-reference/chat-streaming).
CHAT_DELTAS: Path = ("choices", ANY, "delta", "tool_calls", ANY)


def _at_pattern(value: object, pattern: Path, trail: Path = ()) -> Iterator[tuple[Path, object]]:
    """(path, value) of everything matching ``pattern``."""
    if not pattern:
        yield trail, value
        return
    head, rest = pattern[0], pattern[1:]
    if head == ANY:
        if isinstance(value, list):
            # Latest first: a diverging tool result is most often the newest
            # one, and its call is then found at once in a long history.
            for i in range(len(value) - 1, -1, -1):
                yield from _at_pattern(value[i], rest, (*trail, str(i)))
        return
    found = child(value, head)
    if found is not MISSING:
        yield from _at_pattern(found, rest, (*trail, head))


def nodes_at(value: object, pattern: Path) -> Iterator[tuple[Path, object]]:
    """(path, value) of everything in ``value`` matching ``pattern`` ("*"
    for every element of an array), latest element first."""
    return _at_pattern(value, pattern)


def call_nodes(document: object) -> Iterator[tuple[CallShape, Path, object]]:
    """Each tool-call object in one document, with the shape that found it
    and its path (id and name not checked: a Gemini call may have no id)."""
    for shape in CALL_SHAPES:
        for path, call in _at_pattern(document, shape.pattern):
            if shape.type is None or text_at(call, ("type",)) == shape.type:
                yield shape, path, call


def calls_in(document: object) -> Iterator[tuple[str, str]]:
    """(call id, tool name) of each complete tool call in one document."""
    for shape, _, call in call_nodes(document):
        call_id, name = text_at(call, shape.id_path), text_at(call, shape.name_path)
        if call_id and name:
            yield call_id, name


def _stream_calls(docs: Iterable[object]) -> Iterator[tuple[str, str]]:
    """Calls assembled from chat-completion chunks, per (choice, index)."""
    pending: dict[tuple[str, object], dict[str, str]] = {}
    for document in docs:
        for path, delta in _at_pattern(document, CHAT_DELTAS):
            fields = members(delta) or {}
            parts = pending.setdefault((path[1], fields.get("index")), {})
            for key, found in (
                ("id", at(delta, ("id",))),
                ("name", at(delta, ("function", "name"))),
            ):
                if isinstance(found, str) and found and key not in parts:
                    parts[key] = found
            if "id" in parts and "name" in parts:
                yield parts["id"], parts["name"]


def _response_calls(response: Response) -> Iterator[tuple[str, str]]:
    docs = list(documents(response))
    yield from _stream_calls(docs)
    for document in docs:
        yield from calls_in(document)


class CallNames:
    """Tool names by call id: the recorded responses first, then the
    request histories given, in order; the first name found for an id wins
    (within one document, the latest call).
    Sources are read lazily, and only until the id asked for turns up (a
    long history is searched only as far as needed)."""

    def __init__(self, responses: Sequence[Response], histories: Sequence[object]) -> None:
        self._sources: list[Iterator[tuple[str, str]]] = [
            *(_response_calls(r) for r in responses),
            *(calls_in(h) for h in histories),
        ]
        self._names: dict[str, str] = {}

    def get(self, call_id: str) -> str | None:
        while call_id not in self._names and self._sources:
            for found, name in self._sources[0]:
                self._names.setdefault(found, name)
                if found == call_id:
                    break
            else:
                self._sources.pop(0)
        return self._names.get(call_id)
