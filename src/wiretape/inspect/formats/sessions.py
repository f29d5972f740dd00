"""WebSocket sessions read as one exchange: the client's messages as the
request, the server's as the response, streamed. Two flows are known:

- the OpenAI Responses API's WebSocket mode (``GET .../responses``): each
  client ``response.create`` event carries the fields of a ``POST
  .../responses`` body (at the top level or under ``response``), and is
  answered by the events its SSE stream would carry, ``response.created``
  ... ``response.completed`` (platform.openai.com/docs/guides/websocket-mode);
- the Realtime API (``GET .../realtime?model=M``,
  platform.openai.com/docs/api-reference/realtime-client-events): the
  client's ``session.update`` (model, instructions, tools),
  ``conversation.item.create`` (a user message, a ``function_call_output``)
  and ``response.create``; the server's ``session.created``/``updated``
  (the model) and ``response.*`` events ending in ``response.done``.

The conversation is every item the client sent, in order (an input that
repeats the previous one's items adds only the new ones); the response is
each answered turn read by the Responses reader (Realtime events renamed to
theirs: ``response.done`` is ``response.completed``, a text or transcript
delta is ``response.output_text.delta``), then joined: text and calls in
order, the last stop reason, usage summed over the turns. A tool result is
any ``function_call_output`` item the client sent. Events that carry
nothing shown (conversation and audio-buffer bookkeeping, rate limits) are
counted, not listed as unknown. Display only; never raises on bad input.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence

from wiretape.inspect.formats import openai_responses
from wiretape.inspect.formats.draft import Draft, get, text
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.requests import input_messages, tool_names
from wiretape.inspect.formats.view import (
    ExchangeView,
    RequestView,
    ResponseView,
    Usage,
)
from wiretape.model import Exchange, Opcode

RESPONSES = "openai-responses"
REALTIME = "openai-realtime"

#: Events that end a turn (Realtime's ``response.done`` already renamed).
_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed", "error"})
#: Realtime events renamed to the Responses stream's.
_RENAMED = {"response.done": "response.completed",
            "response.text.delta": "response.output_text.delta",
            "response.output_audio_transcript.delta": "response.output_text.delta",
            "response.audio_transcript.delta": "response.output_text.delta"}
#: Realtime events with nothing to show (counted only).
_QUIET = ("session.", "conversation.", "input_audio_buffer.", "output_audio_buffer.",
          "rate_limits.", "transcription_session.", "response.output_audio.",
          "response.audio.", "response.text.done", "response.output_audio_transcript.done",
          "response.audio_transcript.done")


def _documents(exchange: Exchange, direction: str) -> Iterator[tuple[object, str]]:
    """(JSON value or None, text) of each text message from one end."""
    for m in exchange.messages:
        if m.direction == direction and m.opcode is Opcode.TEXT:
            raw = m.payload.decode("utf-8", "replace")
            try:
                yield json.loads(raw), raw
            except (ValueError, RecursionError):
                yield None, raw


def session_format(exchange: Exchange) -> str | None:
    """``openai-responses`` or ``openai-realtime`` for a session of either
    flow (by the handshake's path, else by the client's event types), else
    None."""
    if not exchange.messages:
        return None
    path = exchange.request.path.rstrip(b"/")
    if path.endswith(b"/realtime"):
        return REALTIME
    if path.endswith(b"/responses"):
        return RESPONSES
    kinds = {text(doc, "type") for doc, _ in _documents(exchange, "client")}
    if kinds & {"session.update", "conversation.item.create"}:
        return REALTIME
    if "response.create" in kinds:
        return RESPONSES
    return None


def _create_body(doc: object) -> dict[str, object] | None:
    """A ``response.create`` event's request fields (under ``response``
    when the event nests them, else its own members but ``type``)."""
    if text(doc, "type") != "response.create" or not isinstance(doc, dict):
        return None
    inner = doc.get("response")
    if isinstance(inner, dict):
        return inner
    return {k: v for k, v in doc.items() if k != "type"}


def _read_request(exchange: Exchange, fmt: str) -> RequestView:
    items: list[object] = []
    previous: list[object] = []
    model: str | None = None
    system = ""
    tools: list[str] = []
    bad = 0

    def add_tools(given: object) -> None:
        tools.extend(n for n in tool_names(given) if n not in tools)

    if fmt == REALTIME:
        query = exchange.request.target.partition(b"?")[2].decode("latin-1")
        model = next((v for k, _, v in (p.partition("=") for p in query.split("&"))
                      if k == "model" and v), None)
    for doc, _ in _documents(exchange, "client"):
        if doc is None:
            bad += 1
            continue
        kind = text(doc, "type")
        body = _create_body(doc)
        settings = get(doc, "session") if kind == "session.update" else body
        if isinstance(settings, dict):
            model = model or text(settings, "model")
            system = text(settings, "instructions") or system
            add_tools(settings.get("tools"))
        if kind == "conversation.item.create" and isinstance(get(doc, "item"), dict):
            items.append(get(doc, "item"))
        elif body is not None and fmt == RESPONSES:
            sent = body.get("input")
            given: list[object] = ([{"role": "user", "content": sent}] if isinstance(sent, str)
                                   else list(sent) if isinstance(sent, list) else [])
            if previous and given[: len(previous)] == previous:
                items.extend(given[len(previous):])
            else:
                items.extend(given)
            previous = given
    messages = tuple(input_messages(items))
    notes = (f"{bad} client message(s) not JSON",) if bad else ()
    return RequestView(fmt, model, True, system, messages, tuple(tools), notes=notes)


def _renamed(doc: object) -> object:
    kind = text(doc, "type")
    if isinstance(doc, dict) and kind in _RENAMED:
        return {**doc, "type": _RENAMED[kind]}
    return doc


def _turns(exchange: Exchange, fmt: str) -> tuple[list[list[Event]], int, str | None]:
    """The server's events cut into turns (each ending at a final or error
    event), the number of quiet events, and the model a Realtime session
    named."""
    turns: list[list[Event]] = [[]]
    quiet = 0
    model: str | None = None
    for doc, raw in _documents(exchange, "server"):
        kind = text(doc, "type") or ""
        if fmt == REALTIME:
            if kind.startswith("session."):
                model = model or text(doc, "session", "model")
            if kind.startswith(_QUIET):
                quiet += 1
                continue
            doc = _renamed(doc)
            kind = text(doc, "type") or ""
        turns[-1].append(Event(None, doc, raw))
        if kind in _ENDS:
            turns.append([])
    return [t for t in turns if t], quiet, model


def _sum(values: Sequence[int | None]) -> int | None:
    given = [v for v in values if v is not None]
    return sum(given) if given else None


def _joined(fmt: str, views: Sequence[ResponseView], quiet: int,
            model: str | None) -> ResponseView:
    usages = [v.usage for v in views if v.usage is not None]
    usage = Usage(_sum([u.input_tokens for u in usages]), _sum([u.output_tokens for u in usages]),
                  _sum([u.total_tokens for u in usages]),
                  _sum([u.reasoning_tokens for u in usages])) if usages else None
    unknown: Counter[str] = Counter()
    for v in views:
        unknown.update(dict(v.unknown_events))
    stops = [v.stop_reason for v in views if v.stop_reason]
    return ResponseView(
        format=fmt, streamed=True,
        model=next((v.model for v in views if v.model), None) or model,
        text="\n".join(v.text for v in views if v.text),
        reasoning="\n".join(v.reasoning for v in views if v.reasoning),
        tool_calls=tuple(c for v in views for c in v.tool_calls),
        stop_reason=stops[-1] if stops else None, usage=usage,
        errors=tuple(e for v in views for e in v.errors),
        events=sum(v.events for v in views) + quiet,
        unknown_events=tuple(unknown.items()),
        notes=tuple(n for v in views for n in v.notes))


def read_session(exchange: Exchange, fmt: str) -> ExchangeView:
    """A session of ``fmt`` (``session_format``) read as one exchange:
    ``tool_results`` are the results its client sent, as (call id, None)."""
    request = _read_request(exchange, fmt)
    turns, quiet, model = _turns(exchange, fmt)
    views = []
    for events in turns:
        draft = Draft(fmt, streamed=True, in_band=True)
        openai_responses.read(draft, tuple(events))
        views.append(draft.freeze())
    response = _joined(fmt, views, quiet, model)
    results = tuple((m.result_for or "", m.result_name) for m in request.messages
                    if m.result_for is not None)
    return ExchangeView(request, response, results, session=True)

