"""OpenAI Responses, whole (``"object": "response"``) or streamed as typed
SSE events (platform.openai.com/docs/api-reference/responses-streaming):
text from ``response.output_text.delta``, reasoning from
``response.reasoning_summary_text.delta`` and ``response.reasoning_text.delta``,
tool calls from output items (``function_call``, ``custom_tool_call``) and
their argument deltas, the final state from ``response.completed`` /
``.incomplete`` / ``.failed``; ``error`` events are in-band errors.
Knows nothing of other formats.
"""

from __future__ import annotations

from wiretape.inspect.formats.draft import Draft, complete_calls, get, integer, text
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.view import Usage

_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_START = frozenset({"response.created", "response.in_progress", "response.queued"})
_QUIET_PREFIXES = (
    "response.content_part.",
    "response.output_text.done",
    "response.output_text.annotation",
    "response.reasoning_summary_part.",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.done",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.done",
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call",
    "response.image_generation_call.",
    "response.mcp_",
    "response.refusal.",
)
_TEXT_DELTAS = {"response.output_text.delta": "text", "response.refusal.delta": "text",
                "response.reasoning_summary_text.delta": "reasoning",
                "response.reasoning_text.delta": "reasoning"}
_ARG_DELTAS = frozenset({"response.function_call_arguments.delta",
                         "response.custom_tool_call_input.delta"})


def _usage(response: object) -> Usage | None:
    usage = get(response, "usage")
    if not isinstance(usage, dict):
        return None
    return Usage(integer(usage, "input_tokens"), integer(usage, "output_tokens"),
                 integer(usage, "total_tokens"),
                 integer(usage, "output_tokens_details", "reasoning_tokens"))


def _output_text(response: object) -> tuple[str, str]:
    """(text, reasoning) of a whole response's output items."""
    out: list[str] = []
    thought: list[str] = []
    items = get(response, "output")
    for item in items if isinstance(items, list) else ():
        kind = text(item, "type")
        parts = get(item, "content") if kind == "message" else get(item, "summary")
        for part in parts if isinstance(parts, list) else ():
            value = text(part, "text") or text(part, "refusal") or ""
            (out if kind == "message" else thought).append(value)
    return "".join(out), "".join(thought)


def _final(draft: Draft, response: object, *, streamed_text: bool) -> None:
    draft.set_model(get(response, "model"))
    status = text(response, "status")
    reason = text(response, "incomplete_details", "reason")
    draft.stop_reason = reason or status or draft.stop_reason
    draft.usage = _usage(response) or draft.usage
    if isinstance(get(response, "error"), dict):
        draft.error(response)
    if not streamed_text:
        body_text, reasoning = _output_text(response)
        draft.text.append(body_text)
        draft.reasoning.append(reasoning)
    draft.add_whole_calls(complete_calls(response))


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    item_calls: dict[str, str] = {}  # output item id -> call id
    streamed_text = False
    for event in events:
        draft.events += 1
        doc = event.data
        kind = text(doc, "type") or text(doc, "object") or event.name or "not JSON"
        if kind == "response":
            _final(draft, doc, streamed_text=False)
        elif kind == "error" or (kind not in _FINAL and isinstance(get(doc, "error"), dict)):
            if not draft.error(doc if get(doc, "error") else {"error": doc}):
                draft.unknown["error event without an error object"] += 1
        elif kind in _START:
            draft.set_model(get(doc, "response", "model"))
        elif kind in _TEXT_DELTAS:
            streamed_text = True
            target = draft.text if _TEXT_DELTAS[kind] == "text" else draft.reasoning
            target.append(text(doc, "delta") or "")
        elif kind in ("response.output_item.added", "response.output_item.done"):
            for call in complete_calls(doc):
                item_id = text(doc, "item", "id")
                if item_id:
                    item_calls[item_id] = call.call_id
                known = draft.call(call.call_id, call.call_id, call.name, call.kind)
                if kind.endswith(".done") or call.arguments:
                    known.whole = call.arguments or None
        elif kind in _ARG_DELTAS:
            call_id = item_calls.get(text(doc, "item_id") or "", text(doc, "item_id") or "")
            draft.call(call_id).arguments.append(text(doc, "delta") or "")
        elif kind in _FINAL:
            _final(draft, get(doc, "response"), streamed_text=streamed_text)
        elif not kind.startswith(_QUIET_PREFIXES):
            draft.unknown[kind] += 1
