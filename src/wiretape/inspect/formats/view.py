"""What a person reads out of one exchange: the values the wire-format
readers return. Display only: recording and matching never use these.

Owns the frozen dataclasses and their JSON form (``show --json``): each
field under its name, tuples as lists, and what the JSON adds named in its
TypedDict. Knows nothing of bytes, SSE or any provider's shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict


class ToolCallJSON(TypedDict):
    call_id: str
    name: str
    arguments: str
    kind: str


class UsageJSON(TypedDict):
    """Usage, and ``total``: the reported total, else input + output."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    reasoning_tokens: int | None
    total: int | None


class WireErrorJSON(TypedDict):
    message: str
    type: str | None
    in_band: bool


class UnknownEventJSON(TypedDict):
    name: str
    count: int


class ResponseViewJSON(TypedDict):
    format: str
    streamed: bool
    model: str | None
    text: str
    reasoning: str
    tool_calls: list[ToolCallJSON]
    stop_reason: str | None
    usage: UsageJSON | None
    errors: list[WireErrorJSON]
    events: int
    unknown_events: list[UnknownEventJSON]
    vectors: int | None
    dimensions: int | None
    notes: list[str]


class MessageJSON(TypedDict):
    role: str
    text: str
    tool_calls: list[ToolCallJSON]
    result_for: str | None
    result_name: str | None


class RequestViewJSON(TypedDict):
    format: str
    model: str | None
    streamed: bool
    system: str
    messages: list[MessageJSON]
    tools: list[str]
    inputs: int | None
    notes: list[str]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asked for. ``call_id`` is "" when the format
    gives none (Gemini often does not); ``arguments`` is the JSON text as the
    model wrote it (streamed fragments joined); ``kind`` is ``function``,
    ``custom`` or ``server`` (run by the provider itself)."""

    call_id: str
    name: str
    arguments: str
    kind: str = "function"

    def to_json(self) -> ToolCallJSON:
        return {"call_id": self.call_id, "name": self.name, "arguments": self.arguments,
                "kind": self.kind}


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reported them (None: not reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None

    @property
    def total(self) -> int | None:
        if self.total_tokens is not None:
            return self.total_tokens
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def to_json(self) -> UsageJSON:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens, "reasoning_tokens": self.reasoning_tokens,
                "total": self.total}


@dataclass(frozen=True)
class WireError:
    """An error the provider sent: as the whole answer (``in_band`` False),
    or inside a successful stream (an error event or chunk)."""

    message: str
    type: str | None = None
    in_band: bool = False

    def to_json(self) -> WireErrorJSON:
        return {"message": self.message, "type": self.type, "in_band": self.in_band}


@dataclass(frozen=True)
class ResponseView:
    """A response reassembled. ``events`` counts the JSON documents or SSE
    events read; ``unknown_events`` names the ones not understood, with how
    often each came (shown, never fatal); ``notes`` says what could not be
    read at all (an unknown content coding, a body that is not JSON)."""

    format: str
    streamed: bool
    model: str | None = None
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    usage: Usage | None = None
    errors: tuple[WireError, ...] = ()
    events: int = 0
    unknown_events: tuple[tuple[str, int], ...] = ()
    vectors: int | None = None
    dimensions: int | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> ResponseViewJSON:
        return {
            "format": self.format, "streamed": self.streamed, "model": self.model,
            "text": self.text, "reasoning": self.reasoning,
            "tool_calls": [c.to_json() for c in self.tool_calls],
            "stop_reason": self.stop_reason,
            "usage": self.usage.to_json() if self.usage is not None else None,
            "errors": [e.to_json() for e in self.errors], "events": self.events,
            "unknown_events": [{"name": n, "count": c} for n, c in self.unknown_events],
            "vectors": self.vectors, "dimensions": self.dimensions, "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Message:
    """One message of a request's conversation, summarised: its role, its
    readable text, the tool calls an assistant turn repeats, and the call id
    a tool result answers (``result_for``; "" when the format has none)."""

    role: str
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    result_for: str | None = None
    result_name: str | None = None

    def to_json(self) -> MessageJSON:
        return {"role": self.role, "text": self.text,
                "tool_calls": [c.to_json() for c in self.tool_calls],
                "result_for": self.result_for, "result_name": self.result_name}


@dataclass(frozen=True)
class RequestView:
    """A request summarised: the conversation it sends, the tools it offers."""

    format: str
    model: str | None = None
    streamed: bool = False
    system: str = ""
    messages: tuple[Message, ...] = ()
    tools: tuple[str, ...] = ()
    inputs: int | None = None
    notes: tuple[str, ...] = ()

    def to_json(self) -> RequestViewJSON:
        return {"format": self.format, "model": self.model, "streamed": self.streamed,
                "system": self.system, "messages": [m.to_json() for m in self.messages],
                "tools": list(self.tools), "inputs": self.inputs, "notes": list(self.notes)}


@dataclass(frozen=True)
class ExchangeView:
    """One exchange read for a person; ``response`` is None when the origin
    never answered. ``tool_results`` are the (call id, tool name or None)
    of the results the request carried; ``session`` is True for a
    WebSocket session read whole (its client messages as the request, its
    server messages as the response), where a result may answer a call
    made earlier in the same session."""

    request: RequestView
    response: ResponseView | None
    tool_results: tuple[tuple[str, str | None], ...] = field(default=())
    session: bool = False

    @property
    def model(self) -> str | None:
        return (self.response.model if self.response else None) or self.request.model
