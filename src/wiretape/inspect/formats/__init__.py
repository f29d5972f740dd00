"""The wire formats of model providers, read for display only (recording
and matching stay byte-level): per exchange the model, streamed text,
reasoning, tool calls, stop reason, token usage and errors, in-band ones
included. Unknown events are counted and shown, never fatal.

Owns the table that picks a format for an exchange: first by the request
path, then by sniffing the response's documents. Each format is one module:

    events            a body cut into JSON documents / SSE events
    draft             the shared accumulator, errors, complete tool calls
    openai_chat       chat completions (also Groq, Mistral, OpenRouter)
    openai_responses  Responses
    anthropic         messages
    gemini            generateContent / streamGenerateContent
    embeddings        OpenAI and Gemini embeddings
    generic           anything else
    requests          the request side: messages, tools offered
    sessions          WebSocket sessions: Responses' WebSocket mode, Realtime
    view              the values returned

Knows nothing of run files, the CLI or HTML.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from wiretape.inspect.formats import (
    anthropic,
    embeddings,
    gemini,
    generic,
    openai_chat,
    openai_responses,
)
from wiretape.inspect.formats.draft import Draft
from wiretape.inspect.formats.events import Body, Event, read_body
from wiretape.inspect.formats.requests import decoded, read_request
from wiretape.inspect.formats.sessions import read_session, session_format
from wiretape.inspect.formats.view import (
    ExchangeView,
    Message,
    RequestView,
    ResponseView,
    ToolCall,
    Usage,
    WireError,
)
from wiretape.matching.toolresults import results_in
from wiretape.model import Exchange, Request

__all__ = [
    "FORMATS",
    "ExchangeView",
    "Message",
    "RequestView",
    "ResponseView",
    "ToolCall",
    "Usage",
    "WireError",
    "format_of",
    "read_exchange",
]


@dataclass(frozen=True)
class WireFormat:
    """A format: the request paths it serves, how to recognise one of its
    response documents, and its reader."""

    name: str
    path_says: Callable[[bytes], bool]
    document_says: Callable[[object], bool]
    read: Callable[[Draft, tuple[Event, ...]], None]


def _type_starts(*prefixes: str) -> Callable[[object], bool]:
    def check(doc: object) -> bool:
        kind = doc.get("type") if isinstance(doc, dict) else None
        return isinstance(kind, str) and kind.startswith(prefixes)

    return check


#: Anthropic's message and stream event types (docs.anthropic.com/en/api/messages-streaming).
_ANTHROPIC_TYPES = frozenset({"message", "message_start", "message_delta", "message_stop",
                              "content_block_start", "content_block_delta",
                              "content_block_stop"})


FORMATS: tuple[WireFormat, ...] = (
    WireFormat(
        "openai-chat",
        lambda p: p.endswith(b"/chat/completions"),
        lambda d: isinstance(d, dict) and str(d.get("object", "")).startswith("chat.completion"),
        openai_chat.read,
    ),
    WireFormat(
        "openai-responses",
        lambda p: p.endswith(b"/responses"),
        lambda d: (
            _type_starts("response.")(d) or (isinstance(d, dict) and d.get("object") == "response")
        ),
        openai_responses.read,
    ),
    WireFormat(
        "anthropic-messages",
        lambda p: p.endswith(b"/messages") and b"/threads/" not in p,
        lambda d: isinstance(d, dict) and d.get("type") in _ANTHROPIC_TYPES,
        anthropic.read,
    ),
    WireFormat(
        "gemini",
        lambda p: b":generateContent" in p or b":streamGenerateContent" in p,
        lambda d: isinstance(d, dict) and "candidates" in d,
        gemini.read,
    ),
    WireFormat(
        "embeddings",
        lambda p: p.endswith((b"/embeddings", b":embedContent", b":batchEmbedContents")),
        lambda d: (
            isinstance(d, dict)
            and ("embeddings" in d or "embedding" in d or d.get("object") == "list")
        ),
        embeddings.read,
    ),
)
_GENERIC = WireFormat("unknown", lambda p: False, lambda d: False, generic.read)


def format_of(request: Request, body: Body) -> WireFormat:
    """The request path decides; else the first document that a format
    recognises; else the generic reader."""
    for fmt in FORMATS:
        if fmt.path_says(request.path):
            return fmt
    for event in body.events[:5]:
        for fmt in FORMATS:
            if fmt.document_says(event.data):
                return fmt
    return _GENERIC


def read_exchange(exchange: Exchange) -> ExchangeView:
    """One exchange read for a person; a WebSocket session of a known flow
    (``sessions``) read from its messages. Never raises on bad input."""
    if exchange.response is not None and exchange.response.status == 101:
        flow = session_format(exchange)
        if flow is not None:
            return read_session(exchange, flow)
    response_view: ResponseView | None = None
    if exchange.response is not None:
        body = read_body(exchange.response)
        fmt = format_of(exchange.request, body)
        draft = Draft(fmt.name, streamed=body.streamed, in_band=exchange.response.status < 400)
        fmt.read(draft, body.events)
        if body.note:
            draft.notes.append(body.note)
        if body.comments:
            draft.notes.append(f"{body.comments} SSE comment line(s) (keep-alives)")
        response_view = draft.freeze()
        format_name = fmt.name
    else:
        fmt = format_of(exchange.request, Body("empty", ()))
        format_name = fmt.name
    request_view = read_request(format_name, exchange.request)
    results: tuple[tuple[str, str | None], ...] = ()
    try:
        raw, _ = decoded(exchange.request)
        tree = json.loads(raw) if raw.strip() else None
        found = sorted(
            results_in(tree), key=lambda r: [int(t) if t.isdigit() else -1 for t in r.path]
        )
        results = tuple((r.call_id, r.name) for r in found)
    except (ValueError, RecursionError):
        pass
    return ExchangeView(request_view, response_view, results)
