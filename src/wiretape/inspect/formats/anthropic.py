"""Anthropic messages, whole (``"type": "message"``) or streamed as named
SSE events (docs.anthropic.com/en/api/messages,
.../build-with-claude/streaming): ``message_start``, ``content_block_start``
/ ``_delta`` / ``_stop``, ``message_delta``, ``message_stop``, ``ping`` and
``error``, the last one an in-band error.

Content blocks: ``text``, ``thinking`` and ``redacted_thinking`` (reasoning),
``tool_use`` (a call the agent runs), ``server_tool_use`` (a call the
provider runs itself) and ``*_tool_result`` (its result). Tool arguments
stream as ``input_json_delta`` fragments. Knows nothing of other formats.
"""

from __future__ import annotations

from wiretape.inspect.formats.draft import Draft, arguments_text, complete_calls, get, integer, text
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.view import Usage

#: Block and delta types read, or known and deliberately skipped.
_CALL_BLOCKS = {"tool_use": "function", "server_tool_use": "server", "mcp_tool_use": "server"}
_QUIET_DELTAS = frozenset({"signature_delta", "citations_delta"})
_QUIET_EVENTS = frozenset({"ping", "content_block_stop", "message_stop"})


def _usage(usage: object, before: Usage | None) -> Usage | None:
    """``message_delta`` usage is cumulative; input tokens may come only at the start."""
    if not isinstance(usage, dict):
        return before
    input_tokens = integer(usage, "input_tokens")
    if input_tokens is None and before is not None:
        input_tokens = before.input_tokens
    output_tokens = integer(usage, "output_tokens")
    return Usage(input_tokens, output_tokens if output_tokens is not None else
                 (before.output_tokens if before else None))


def _block(draft: Draft, index: object, block: object, *, whole: bool = False) -> None:
    kind = text(block, "type") or "?"
    if kind == "text":
        draft.text.append(text(block, "text") or "")
    elif kind == "thinking":
        draft.reasoning.append(text(block, "thinking") or "")
    elif kind == "redacted_thinking":
        draft.reasoning.append("[redacted thinking]")
    elif kind == "tool_use" and whole:
        pass  # read with the table of call shapes, in _message
    elif kind in _CALL_BLOCKS:
        call = draft.call(("block", index), text(block, "id") or "", text(block, "name") or "",
                          _CALL_BLOCKS[kind])
        # A stream starts a call with "input": {} and sends the arguments as
        # fragments; the start's input stands when no fragment has any text.
        call.fallback = arguments_text(get(block, "input"))
        if whole:
            call.whole = call.fallback
    elif not kind.endswith("_tool_result"):
        draft.unknown[f"content block {kind}"] += 1


def _delta(draft: Draft, index: object, delta: object) -> None:
    kind = text(delta, "type") or "?"
    if kind == "text_delta":
        draft.text.append(text(delta, "text") or "")
    elif kind == "thinking_delta":
        draft.reasoning.append(text(delta, "thinking") or "")
    elif kind == "input_json_delta":
        draft.call(("block", index)).arguments.append(text(delta, "partial_json") or "")
    elif kind not in _QUIET_DELTAS:
        draft.unknown[f"delta {kind}"] += 1


def _message(draft: Draft, message: object) -> None:
    draft.set_model(get(message, "model"))
    draft.usage = _usage(get(message, "usage"), draft.usage)
    draft.stop_reason = text(message, "stop_reason") or draft.stop_reason
    content = get(message, "content")
    for n, block in enumerate(content if isinstance(content, list) else ()):
        _block(draft, ("whole", n), block, whole=True)
    draft.add_whole_calls(complete_calls(message))


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    for event in events:
        draft.events += 1
        doc = event.data
        kind = text(doc, "type") or event.name or "not JSON"
        if kind == "error" or (isinstance(doc, dict) and "error" in doc):
            if not draft.error(doc):
                draft.unknown["error event without an error object"] += 1
        elif kind == "message":
            _message(draft, doc)
        elif kind == "message_start":
            _message(draft, get(doc, "message"))
        elif kind == "content_block_start":
            _block(draft, get(doc, "index"), get(doc, "content_block"))
        elif kind == "content_block_delta":
            _delta(draft, get(doc, "index"), get(doc, "delta"))
        elif kind == "message_delta":
            draft.stop_reason = text(doc, "delta", "stop_reason") or draft.stop_reason
            draft.usage = _usage(get(doc, "usage"), draft.usage)
        elif kind not in _QUIET_EVENTS:
            draft.unknown[kind] += 1
