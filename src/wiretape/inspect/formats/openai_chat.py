"""OpenAI chat completions, whole (``chat.completion``) or streamed
(``chat.completion.chunk`` SSE ending in ``data: [DONE]``), as spoken also
by Groq, Mistral, OpenRouter and LiteLLM
(platform.openai.com/docs/api-reference/chat/object, .../chat-streaming).

Reasoning is read from the fields OpenAI-compatible providers put it in
(``reasoning_content``: DeepSeek, vLLM; ``reasoning``: OpenRouter, Groq). An
``error`` in a chunk (OpenRouter) or an ``event: error`` (Groq) is an
in-band error. Knows nothing of other formats.
"""

from __future__ import annotations

from wiretape.inspect.formats.draft import Draft, complete_calls, get, integer, text
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.view import Usage
from wiretape.matching.toolcalls import CHAT_DELTAS, nodes_at

_REASONING_FIELDS = ("reasoning_content", "reasoning")


def usage_of(document: object) -> Usage | None:
    # Groq puts the last chunk's usage under x_groq (console.groq.com/docs/api-reference).
    usage = get(document, "usage") or get(document, "x_groq", "usage")
    if not isinstance(usage, dict):
        return None
    return Usage(integer(usage, "prompt_tokens"), integer(usage, "completion_tokens"),
                 integer(usage, "total_tokens"),
                 integer(usage, "completion_tokens_details", "reasoning_tokens"))


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _whole(draft: Draft, document: object) -> None:
    draft.set_model(get(document, "model"))
    message = get(document, "choices", "0", "message")
    draft.text.append(_content_text(get(message, "content")))
    for name in _REASONING_FIELDS:
        value = text(message, name)
        if value:
            draft.reasoning.append(value)
            break
    draft.add_whole_calls(complete_calls(document))
    draft.stop_reason = text(document, "choices", "0", "finish_reason") or draft.stop_reason
    draft.usage = usage_of(document) or draft.usage


def _chunk(draft: Draft, document: object) -> None:
    draft.set_model(get(document, "model"))
    choices = get(document, "choices")
    for choice in choices if isinstance(choices, list) else ():
        delta = get(choice, "delta")
        if get(choice, "index") in (0, None):
            draft.text.append(_content_text(get(delta, "content")))
            for name in _REASONING_FIELDS:
                value = text(delta, name)
                if value:
                    draft.reasoning.append(value)
                    break
        reason = text(choice, "finish_reason")
        if reason:
            draft.stop_reason = reason
    # Tool-call deltas: the id and name come first, the arguments in pieces.
    for path, node in sorted(nodes_at(document, CHAT_DELTAS), key=lambda pn: pn[0]):
        index = get(node, "index")
        call = draft.call((path[1], index if index is not None else path[-1]),
                          text(node, "id") or "", text(node, "function", "name") or "")
        piece = text(node, "function", "arguments")
        if piece:
            call.arguments.append(piece)
    draft.usage = usage_of(document) or draft.usage


def _is_chunk(document: dict[str, object]) -> bool:
    choices = document.get("choices")
    return document.get("object") == "chat.completion.chunk" or (
        isinstance(choices, list) and any(isinstance(c, dict) and "delta" in c for c in choices))


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    for event in events:
        draft.events += 1
        doc = event.data
        if event.text.strip() == "[DONE]":
            continue
        if event.name == "error" or (isinstance(doc, dict) and "error" in doc):
            if not draft.error(doc):
                draft.unknown["error event without an error object"] += 1
            if not (isinstance(doc, dict) and "choices" in doc):
                continue
        if not isinstance(doc, dict):
            draft.unknown[event.name or "not JSON"] += 1
        elif _is_chunk(doc):
            _chunk(draft, doc)
        elif "choices" in doc:
            _whole(draft, doc)
        elif "usage" in doc or "x_groq" in doc:
            draft.usage = usage_of(doc) or draft.usage
        else:
            draft.unknown[str(doc.get("object") or event.name or "object without choices")] += 1
