"""Whether a place in a request body lies inside a tool result that the
agent sends back, and which call it answers.

Owns the table of tool-result shapes in request bodies. Knows nothing of
responses or tool names beyond what the result itself carries
(``toolcalls`` finds names), nor of differences or offsets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from wiretape.matching.jsontree import Path, at, text_at
from wiretape.matching.toolcalls import ANY, nodes_at


@dataclass(frozen=True)
class ResultShape:
    """Tool results at ``pattern`` whose ``where`` member has that value,
    with the call id at ``id_path`` and, if carried, the name at ``name_path``."""

    pattern: Path
    where: tuple[Path, str] | None
    id_path: Path
    name_path: Path | None = None


RESULT_SHAPES: tuple[ResultShape, ...] = (
    # OpenAI Chat Completions: {"role": "tool", "tool_call_id": ...}
    # (platform.openai.com/docs/api-reference/chat/create, tool message).
    ResultShape(("messages", ANY), (("role",), "tool"), ("tool_call_id",)),
    # Anthropic Messages: a user message's content block
    # {"type": "tool_result", "tool_use_id": ...}
    # (docs.anthropic.com/en/docs/build-with-claude/tool-use).
    ResultShape(("messages", ANY, "content", ANY), (("type",), "tool_result"), ("tool_use_id",)),
    # OpenAI Responses: input item {"type": "function_call_output", "call_id": ...}
    # (platform.openai.com/docs/guides/function-calling); custom tools alike.
    ResultShape(("input", ANY), (("type",), "function_call_output"), ("call_id",)),
    ResultShape(("input", ANY), (("type",), "custom_tool_call_output"), ("call_id",)),
    # Gemini: part {"functionResponse": {"name": ..., "id"?: ...}}
    # (ai.google.dev/api/caching#FunctionResponse): it names its own tool.
    ResultShape(
        ("contents", ANY, "parts", ANY),
        None,
        ("functionResponse", "id"),
        ("functionResponse", "name"),
    ),
)


@dataclass(frozen=True)
class ToolResult:
    """The tool result holding a place: its call id ("" when the format has
    none), the name it carries itself, and its own path."""

    call_id: str
    name: str | None
    path: Path


def _matches(pattern: Path, path: Path) -> bool:
    return len(path) >= len(pattern) and all(
        token.isdigit() if want == ANY else token == want
        for want, token in zip(pattern, path, strict=False)
    )


def tool_result_at(tree: object, path: Path) -> ToolResult | None:
    """The tool result that ``path`` lies in (or is), else None."""
    for shape in RESULT_SHAPES:
        if not _matches(shape.pattern, path):
            continue
        own = path[: len(shape.pattern)]
        node = at(tree, own)
        if shape.where is not None and text_at(node, shape.where[0]) != shape.where[1]:
            continue
        call_id = text_at(node, shape.id_path)
        name = text_at(node, shape.name_path) if shape.name_path is not None else None
        if call_id or name:
            return ToolResult(call_id or "", name, own)
    return None


def results_in(tree: object) -> Iterator[ToolResult]:
    """Every tool result in a request body, latest first within each shape."""
    for shape in RESULT_SHAPES:
        for path, node in nodes_at(tree, shape.pattern):
            if shape.where is not None and text_at(node, shape.where[0]) != shape.where[1]:
                continue
            call_id = text_at(node, shape.id_path)
            name = text_at(node, shape.name_path) if shape.name_path is not None else None
            if call_id or name:
                yield ToolResult(call_id or "", name, path)
