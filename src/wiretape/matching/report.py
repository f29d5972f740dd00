"""The explanation of a divergence as a value: spans, header differences,
the one-line summary, and its JSON form (DESIGN.md, "Divergence report").

Owns the shape of the explanation and how its first line is worded. Knows
nothing of how differences are found, and does not print.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from wiretape.matching.kinds import SpanKind
from wiretape.model import ExplanationJSON, HeaderDiffJSON, SpanJSON, ToolRefJSON


@dataclass(frozen=True)
class ToolRef:
    """The tool call whose result a span lies in: the call id ("" when the
    format has none, as Gemini may), the tool's name when known, and the
    pointer of the tool result itself."""

    call_id: str
    name: str | None
    pointer: str

    def to_json(self) -> ToolRefJSON:
        return {"call_id": self.call_id, "name": self.name, "pointer": self.pointer}


@dataclass(frozen=True)
class Span:
    """One differing place in the body.

    ``pointer`` is an RFC 6901 JSON pointer when both bodies are JSON, else
    None; ``offset`` is a byte offset in the live body (for JSON, where the
    differing value starts; else the first differing byte). ``recorded`` and
    ``live`` are the differing text, grown to its token and trimmed;
    ``change`` is ``changed``, or ``added``/``removed`` when a JSON value is
    on one side only (the other side's text is then empty); ``element``
    names an added or removed array element in a few words (a message's
    role, the tools it calls or answers, its first words).
    """

    pointer: str | None
    offset: int
    recorded: str
    live: str
    recorded_context: str
    live_context: str
    kind: str
    bytes_differ: int
    tool: ToolRef | None = None
    change: Literal["changed", "added", "removed"] = "changed"
    element: str | None = None

    def to_json(self) -> SpanJSON:
        return {"pointer": self.pointer, "offset": self.offset, "recorded": self.recorded,
                "live": self.live, "recorded_context": self.recorded_context,
                "live_context": self.live_context, "kind": str(self.kind),
                "bytes_differ": self.bytes_differ,
                "tool": self.tool.to_json() if self.tool is not None else None,
                "change": self.change, "element": self.element}


@dataclass(frozen=True)
class HeaderDiff:
    """A header whose values differ (name lower-case, values in wire order,
    secrets redacted). Semantic headers decide a match; others are listed."""

    name: str
    recorded: tuple[str, ...]
    live: tuple[str, ...]
    semantic: bool

    def to_json(self) -> HeaderDiffJSON:
        return {"name": self.name, "recorded": list(self.recorded), "live": list(self.live),
                "semantic": self.semantic}


@dataclass(frozen=True)
class Explanation:
    """How a live request differs from a recorded one.

    ``bytes_differ`` counts the body bytes between the common prefix and
    suffix; ``edit_distance`` is the Levenshtein distance of the bodies, or
    the cap with ``edit_distance_capped``, or None when too large to
    compute; ``spans_omitted`` counts the spans beyond those listed.
    """

    bytes_differ: int
    edit_distance: int | None
    edit_distance_capped: bool
    spans: tuple[Span, ...]
    spans_omitted: int
    kind_summary: tuple[str, ...]
    target_differs: tuple[str, str] | None
    method_differs: tuple[str, str] | None
    header_differences: tuple[HeaderDiff, ...]
    first_line: str

    @property
    def semantic_header_differences(self) -> tuple[HeaderDiff, ...]:
        return tuple(h for h in self.header_differences if h.semantic)

    @property
    def informational_header_differences(self) -> tuple[HeaderDiff, ...]:
        return tuple(h for h in self.header_differences if not h.semantic)

    @property
    def equal(self) -> bool:
        """Nothing that decides a match differs (informational headers may)."""
        return not (
            self.bytes_differ
            or self.target_differs
            or self.method_differs
            or self.semantic_header_differences
        )

    def to_json(self) -> ExplanationJSON:
        """A JSON-safe dict: str, int, bool, None, list and dict only, its
        members in field order."""
        target, method = self.target_differs, self.method_differs
        return {
            "bytes_differ": self.bytes_differ,
            "edit_distance": self.edit_distance,
            "edit_distance_capped": self.edit_distance_capped,
            "spans": [s.to_json() for s in self.spans],
            "spans_omitted": self.spans_omitted,
            "kind_summary": [str(k) for k in self.kind_summary],
            "target_differs": list(target) if target is not None else None,
            "method_differs": list(method) if method is not None else None,
            "header_differences": [h.to_json() for h in self.header_differences],
            "first_line": self.first_line,
        }


#: How each kind is named in a sentence.
KIND_LABELS: dict[str, str] = {
    SpanKind.TIMESTAMP: "timestamp",
    SpanKind.UUID: "UUID",
    SpanKind.PATH: "absolute path",
    SpanKind.HEX_ID: "hex id",
    SpanKind.BASE64_ID: "base64 id",
    SpanKind.NUMBER: "number",
    SpanKind.WHITESPACE: "whitespace",
    SpanKind.KEY_ORDER: "member order",
    SpanKind.OTHER: "text",
}


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _where(span: Span) -> str:
    if span.pointer is None:
        return f"byte {span.offset}"
    return span.pointer or "the top level"


def _tool_sentence(span: Span, tool: ToolRef) -> str:
    if tool.name and tool.call_id:
        who = f"{tool.name} ({tool.call_id})"
    elif tool.name:
        who = tool.name
    else:
        who = f"tool call {tool.call_id}"
    return f"the result of {who} differs at {_where(span)}"


def _span_sentence(span: Span) -> str:
    label = KIND_LABELS.get(span.kind, span.kind)
    if span.change == "added":
        return f"{label} added at {_where(span)}: {_quoted(span.live)}"
    if span.change == "removed":
        return f"{label} removed at {_where(span)}: {_quoted(span.recorded)}"
    return f"{label} differs at {_where(span)}: {_quoted(span.recorded)} -> {_quoted(span.live)}"


#: What the elements of an array are called, by the array's member name.
_ELEMENT_NAMES = {"messages": "message", "contents": "message", "input": "item"}


def _parent_and_index(span: Span) -> tuple[str, int] | None:
    if not span.pointer:
        return None
    parent, _, last = span.pointer.rpartition("/")
    return (parent, int(last)) if last.isdigit() else None


def _elements_sentence(spans: tuple[Span, ...]) -> str:
    """``8 messages added at /messages/10-/messages/17: user "Hi", ...``:
    the run of consecutive elements added (or removed) from the first span."""
    first = spans[0]
    place = _parent_and_index(first)
    run = [first]
    for span in spans[1:]:
        here = _parent_and_index(span)
        last = _parent_and_index(run[-1])
        if (span.element is None or span.change != first.change or here is None or last is None
                or here != (last[0], last[1] + 1)):
            break
        run.append(span)
    parent = place[0].rpartition("/")[2] if place else ""
    noun = _ELEMENT_NAMES.get(parent, "element")
    count = f"{len(run)} {noun}{'s' if len(run) != 1 else ''}"
    where = run[0].pointer if len(run) == 1 else f"{run[0].pointer}-{run[-1].pointer}"
    names = "; ".join(span.element or "" for span in run[:6])
    more = f"; and {len(run) - 6} more" if len(run) > 6 else ""
    return f"{count} {first.change} at {where}: {names}{more}"


def _values(values: tuple[str, ...]) -> str:
    return _quoted(", ".join(values)) if values else "(absent)"


def first_line(
    spans: tuple[Span, ...],
    target: tuple[str, str] | None,
    method: tuple[str, str] | None,
    headers: tuple[HeaderDiff, ...],
) -> str:
    """The most useful single sentence, by precedence: method, target, a
    span in a tool result (the live tool answered differently), the first
    span, a semantic header, then informational headers."""
    if method is not None:
        return f"method differs: {method[0]} -> {method[1]}"
    if target is not None:
        return f"target differs: {target[0]} -> {target[1]}"
    for index, span in enumerate(spans):
        if span.element is not None:
            return _elements_sentence(spans[index:])
        if span.tool is not None:
            return _tool_sentence(span, span.tool)
    if spans:
        return _span_sentence(spans[0])
    for header in headers:
        if header.semantic:
            before, after = _values(header.recorded), _values(header.live)
            return f"header {header.name} differs: {before} -> {after}"
    if headers:
        return "only informational headers differ: " + ", ".join(h.name for h in headers)
    return "no difference"


def kind_summary(spans: tuple[Span, ...]) -> tuple[str, ...]:
    """The kinds of the spans, in order of first appearance."""
    return tuple(dict.fromkeys(span.kind for span in spans))
