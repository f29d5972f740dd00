"""The calls an agent made to its stdio MCP servers (``wiretape mcp``),
read from the sessions' JSON-RPC messages, each paired with the model's
tool call that caused it (DESIGN.md, "MCP servers").

A call is a client request (a JSON-RPC message with a ``method`` and an
``id``, JSON-RPC 2.0 §4) other than the session's bookkeeping
(``initialize``, ``ping``); its result is the server's response with the
same id. A ``tools/call`` is paired with the first tool call of the
ledger, in order, that it can answer: the same tool (an MCP client may
name it with a prefix, as nanobot's ``mcp_<server>_<tool>``), issued by an
exchange that began before the call, with the same arguments when any
such call has them, else the first of that tool.

Pure over exchanges and the ledger. Knows nothing of the CLI or HTML.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypedDict

from wiretape.inspect.ledger import Ledger, LedgerEntry
from wiretape.model import MCP_ORIGIN_PREFIX, Exchange, JSONValue

_EXCERPT = 160
#: Requests that are the session's bookkeeping, not the agent's calls.
_BOOKKEEPING = frozenset({"initialize", "ping"})


class McpCallJSON(TypedDict):
    """An McpCall in ``show --json``."""

    seq: int
    server: str
    message: int
    method: str
    tool: str | None
    arguments: str
    result: str | None
    error: str | None
    caused_by: str | None


@dataclass(frozen=True)
class McpCall:
    """One request to an MCP server: the session's exchange ``seq``, the
    server's name, the request's index among the session's messages, its
    method (and tool, for ``tools/call``), its arguments as JSON text, the
    result's text or the error's message (None: no response recorded), and
    the id of the model's tool call that caused it (None: not paired)."""

    seq: int
    server: str
    message: int
    method: str
    tool: str | None
    arguments: str
    at_ns: int
    result: str | None = None
    error: str | None = None
    caused_by: str | None = None
    #: the arguments as sent (``arguments`` is clipped for display): what
    #: a tool call's arguments are compared with
    sent_arguments: JSONValue = field(default=None, repr=False, compare=False)

    @property
    def answer(self) -> str:
        """The result's text, ``error: MESSAGE``, or ``(no response)``."""
        if self.result is not None:
            return self.result
        return f"error: {self.error}" if self.error is not None else "(no response)"

    def to_json(self) -> McpCallJSON:
        return {"seq": self.seq, "server": self.server, "message": self.message,
                "method": self.method, "tool": self.tool, "arguments": self.arguments,
                "result": self.result, "error": self.error, "caused_by": self.caused_by}


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."


def _load(payload: bytes) -> dict[str, JSONValue] | None:
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _result_text(result: JSONValue) -> str:
    """A response's result in words: the text of a tool result's content,
    else the result as JSON."""
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        content = result["content"]
        assert isinstance(content, list)
        texts = [str(c.get("text")) for c in content
                 if isinstance(c, dict) and c.get("type") == "text"]
        if texts:
            return _clip(" ".join(texts))
    return _clip(json.dumps(result, ensure_ascii=False))


def session_calls(exchange: Exchange) -> list[McpCall]:
    """The calls of one MCP session, in the order they were sent."""
    server = exchange.origin.removeprefix(MCP_ORIGIN_PREFIX)
    calls: list[McpCall] = []
    answers: dict[str, dict[str, JSONValue]] = {}
    for m in exchange.messages:
        obj = _load(m.payload) if m.direction == "server" else None
        if obj is not None and "id" in obj and "method" not in obj:
            answers.setdefault(json.dumps(obj["id"]), obj)
    for index, m in enumerate(exchange.messages):
        obj = _load(m.payload) if m.direction == "client" else None
        if obj is None or "id" not in obj or not isinstance(obj.get("method"), str):
            continue
        method = str(obj["method"])
        if method in _BOOKKEEPING:
            continue
        params = obj.get("params")
        tool = None
        arguments: JSONValue = params
        if isinstance(params, dict) and isinstance(params.get("name"), str):
            tool = str(params["name"])
            arguments = params.get("arguments", {})
        answer = answers.get(json.dumps(obj["id"]))
        result = error = None
        if answer is not None and "result" in answer:
            result = _result_text(answer["result"])
        elif answer is not None:
            err = answer.get("error")
            error = _clip(str(err.get("message") if isinstance(err, dict) else err))
        calls.append(McpCall(exchange.seq, server, index, method, tool,
                             _clip(json.dumps(arguments, ensure_ascii=False)),
                             exchange.started_at_ns + m.offset_ns, result, error,
                             sent_arguments=arguments))
    return calls


def _same_tool(call_name: str, tool: str) -> bool:
    return call_name == tool or call_name.endswith("_" + tool) or call_name.endswith("." + tool)


def _same_arguments(entry: LedgerEntry, call: McpCall) -> bool:
    try:
        return bool(json.loads(entry.arguments) == call.sent_arguments)
    except ValueError:
        return False


def mcp_calls(exchanges: Sequence[Exchange], ledger: Ledger) -> list[McpCall]:
    """Every MCP call of the run's sessions, in the order they were made,
    each paired with the ledger's tool call that caused it."""
    started = {e.seq: e.started_at_ns for e in exchanges}
    calls = sorted((c for e in exchanges if e.kind == "mcp" for c in session_calls(e)),
                   key=lambda c: c.at_ns)
    paired: dict[int, str] = {}  # index in calls -> call id
    for entry in ledger.entries:
        issued_at = started.get(entry.issued_in, 0)
        candidates = [i for i, c in enumerate(calls)
                      if i not in paired and c.method == "tools/call" and c.tool is not None
                      and _same_tool(entry.name, c.tool) and c.at_ns >= issued_at]
        exact = [i for i in candidates if _same_arguments(entry, calls[i])]
        chosen = (exact or candidates)[:1]
        for i in chosen:
            paired[i] = entry.call_id
    return [replace(c, caused_by=paired.get(i)) for i, c in enumerate(calls)]


def served_by(calls: Sequence[McpCall]) -> dict[str, McpCall]:
    """The model's tool call id to the MCP call that served it."""
    return {c.caused_by: c for c in calls if c.caused_by is not None}
