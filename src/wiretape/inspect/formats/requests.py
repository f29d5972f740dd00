"""Requests summarised: the conversation an agent sends, message by
message, and the tools it offers, for OpenAI chat (``messages``), OpenAI
Responses (``instructions``, ``input``), Anthropic (``system``, ``messages``
with content blocks), Gemini (``systemInstruction``, ``contents`` with
``parts``) and embeddings (``input``, ``requests``).

Display only. Knows nothing of responses; tool results are also found by
``matching.toolresults`` for the ledger, this module gives their text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

from wiretape import codings
from wiretape.inspect.formats.draft import arguments_text, get, text
from wiretape.inspect.formats.view import Message, RequestView, ToolCall
from wiretape.model import Request, header_values

_GEMINI_MODEL = re.compile(rb"/models/([^/:?]+)")


def content_text(content: object) -> str:
    """Readable text of any content shape: a string, parts with ``text``,
    ``input_text``/``output_text`` parts, nested tool-result content; other
    parts as ``[type]``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (content_text(p) for p in content) if t)
    if isinstance(content, dict):
        for key in ("text", "content", "output"):
            if key in content:
                return content_text(content[key])
        kind = content.get("type")
        return f"[{kind}]" if isinstance(kind, str) else ""
    return ""


def _chat(body: dict[str, object]) -> Iterator[Message]:
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        calls = get(m, "tool_calls")
        yield Message(
            text(m, "role") or "?", content_text(get(m, "content")),
            tuple(ToolCall(text(c, "id") or "", text(c, "function", "name") or "?",
                           arguments_text(get(c, "function", "arguments")))
                  for c in (calls if isinstance(calls, list) else ())),
            result_for=text(m, "tool_call_id"), result_name=text(m, "name"))


def _responses(body: dict[str, object]) -> Iterator[Message]:
    return input_messages(body.get("input"))


def input_messages(items: object) -> Iterator[Message]:
    """The messages of a Responses ``input``: a string (one user message)
    or a list of items (messages, calls, call outputs, reasoning)."""
    if isinstance(items, str):
        yield Message("user", items)
        return
    for item in items if isinstance(items, list) else ():
        kind = text(item, "type") or "message"
        if kind == "message" or "role" in (item if isinstance(item, dict) else {}):
            yield Message(text(item, "role") or "?", content_text(get(item, "content")))
        elif kind in ("function_call", "custom_tool_call"):
            yield Message("assistant", "", (ToolCall(
                text(item, "call_id") or "", text(item, "name") or "?",
                arguments_text(get(item, "arguments" if kind == "function_call" else "input"))),))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            yield Message("tool", content_text(get(item, "output")),
                          result_for=text(item, "call_id") or "")
        elif kind == "reasoning":
            yield Message("reasoning", content_text(get(item, "summary")) or "[reasoning]")
        else:
            yield Message(kind, f"[{kind}]")


def _anthropic(body: dict[str, object]) -> Iterator[Message]:
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        role, content = text(m, "role") or "?", get(m, "content")
        if not isinstance(content, list):
            yield Message(role, content_text(content))
            continue
        texts, calls = [], []
        for block in content:
            kind = text(block, "type")
            if kind == "tool_result":
                yield Message("tool", content_text(get(block, "content")),
                              result_for=text(block, "tool_use_id") or "")
            elif kind in ("tool_use", "server_tool_use"):
                calls.append(ToolCall(text(block, "id") or "", text(block, "name") or "?",
                                      arguments_text(get(block, "input"))))
            elif kind not in ("thinking", "redacted_thinking"):
                texts.append(content_text(block))
        if texts or calls:
            yield Message(role, "\n".join(t for t in texts if t), tuple(calls))


def _gemini(body: dict[str, object]) -> Iterator[Message]:
    contents = body.get("contents")
    for c in contents if isinstance(contents, list) else ():
        role, texts, calls = text(c, "role") or "user", [], []
        parts = get(c, "parts")
        for part in parts if isinstance(parts, list) else ():
            if isinstance(get(part, "functionResponse"), dict):
                yield Message("tool", arguments_text(get(part, "functionResponse", "response")),
                              result_for=text(part, "functionResponse", "id") or "",
                              result_name=text(part, "functionResponse", "name"))
            elif isinstance(get(part, "functionCall"), dict):
                calls.append(ToolCall(text(part, "functionCall", "id") or "",
                                      text(part, "functionCall", "name") or "?",
                                      arguments_text(get(part, "functionCall", "args"))))
            elif get(part, "thought") is not True:
                texts.append(content_text(part))
        if texts or calls:
            yield Message(role, "\n".join(t for t in texts if t), tuple(calls))


def _tool_names(body: dict[str, object]) -> tuple[str, ...]:
    return tool_names(body.get("tools"))


def tool_names(tools: object) -> tuple[str, ...]:
    """The names of the tools a ``tools`` list offers (OpenAI functions,
    Anthropic tools, Gemini ``functionDeclarations``; else a tool's first
    member)."""
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        declared = get(tool, "functionDeclarations")
        if isinstance(declared, list):
            names.extend(text(d, "name") or "?" for d in declared)
            continue
        name = text(tool, "function", "name") or text(tool, "name")
        names.append(name or (next(iter(tool), "?") if isinstance(tool, dict) else "?"))
    return tuple(names)


_SYSTEM: dict[str, Callable[[dict[str, object]], str]] = {
    "openai-responses": lambda b: content_text(b.get("instructions")),
    "anthropic-messages": lambda b: content_text(b.get("system")),
    "gemini": lambda b: content_text(get(b, "systemInstruction", "parts")),
}
_MESSAGES: dict[str, Callable[[dict[str, object]], Iterator[Message]]] = {
    "openai-chat": _chat, "openai-responses": _responses, "anthropic-messages": _anthropic,
    "gemini": _gemini, "unknown": _chat,
}


def decoded(request: Request) -> tuple[bytes, str | None]:
    """The request's body with its content codings undone (gzip, deflate,
    zstd: ``wiretape.codings``), and a note when it is coded in a way that
    could not be undone (``br``, bad data): then the body as it is."""
    applied = codings.parse(header_values(request.headers, b"content-encoding"))
    if not applied or not request.body:
        return request.body, None
    done = codings.decode([request.body], applied)
    named = ", ".join(c.decode("latin-1") for c in applied)
    if done is None:
        return request.body, f"{len(request.body)} bytes coded with {named}, not decoded"
    return b"".join(done.pieces), None


def read_request(format_name: str, request: Request) -> RequestView:
    gemini_model = _GEMINI_MODEL.search(request.path)
    streamed = b":streamGenerateContent" in request.path
    raw, undecoded = decoded(request)
    if not raw.strip():
        return RequestView(format_name, gemini_model.group(1).decode("latin-1") if gemini_model
                           else None, streamed, notes=("no body",))
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return RequestView(format_name, notes=(undecoded or f"{len(raw)} bytes, not JSON",))
    if not isinstance(body, dict):
        return RequestView(format_name, notes=("JSON body that is not an object",))
    model = text(body, "model") or (
        gemini_model.group(1).decode("latin-1") if gemini_model else None
    )
    inputs = None
    if format_name == "embeddings":
        given = body.get("input", body.get("requests", body.get("content")))
        inputs = len(given) if isinstance(given, list) else (1 if given is not None else 0)
    system = _SYSTEM.get(format_name)
    messages = _MESSAGES.get(format_name)
    return RequestView(
        format_name, model.removeprefix("models/") if model else None,
        streamed or body.get("stream") is True, system(body) if system else "",
        tuple(messages(body)) if messages else (), _tool_names(body), inputs)
