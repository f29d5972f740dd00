"""A response body cut into the events it carries, for display.

Owns: recognising the body's framing (one JSON document, a JSON array sent
piece by piece as Gemini streams without ``alt=sse``, Server-Sent Events
with their ``event:`` names and comment lines, or none of these) and
parsing each piece's JSON. Bad input yields fewer events and a note, never
an error: a run file is untrusted. Knows nothing of providers' shapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from wiretape.matching.documents import decoded_body
from wiretape.model import Response, header_value


@dataclass(frozen=True)
class Event:
    """One piece of a body: its SSE ``event:`` name (None when not SSE or
    unnamed), its JSON value (None when not JSON) and its raw text."""

    name: str | None
    data: object
    text: str


@dataclass(frozen=True)
class Body:
    """``framing`` is ``json``, ``json-array``, ``sse``, ``text``, ``empty``
    or ``undecodable`` (a content coding that cannot be undone)."""

    framing: str
    events: tuple[Event, ...]
    comments: int = 0
    note: str | None = None

    @property
    def streamed(self) -> bool:
        return self.framing in ("sse", "json-array")


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def sse_events(text: str) -> tuple[list[Event], int]:
    """The events of an SSE stream and its number of comment lines (WHATWG
    HTML §9.2.6: ``data:`` lines joined by newlines, one leading space
    dropped, an event dispatched at a blank line; ``:`` starts a comment)."""
    events: list[Event] = []
    comments = 0
    name: str | None = None
    data: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                joined = "\n".join(data)
                events.append(Event(name, _json(joined), joined))
            name, data = None, []
            continue
        if line.startswith(":"):
            comments += 1
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if data:  # a stream cut off before its last blank line
        joined = "\n".join(data)
        events.append(Event(name, _json(joined), joined))
    return events, comments


def array_elements(text: str) -> Iterator[object]:
    """The elements of a JSON array read one by one, so that an array cut
    off mid-stream still yields the elements that arrived whole."""
    decoder = json.JSONDecoder()
    pos = text.find("[") + 1
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return
        yield value


def _looks_like_sse(text: str, content_type: bytes) -> bool:
    if b"event-stream" in content_type.lower():
        return True
    head = text.lstrip()[:6]
    return head.startswith(("data:", "event:", ":"))


def read_body(response: Response) -> Body:
    body = decoded_body(response)
    if body is None:
        coding = header_value(response.headers, b"content-encoding") or b"?"
        return Body("undecodable", (), note=f"content-encoding {coding.decode('latin-1')} "
                                              "cannot be undone for display")
    if not body.strip():
        return Body("empty", ())
    text = body.decode("utf-8", "replace")
    content_type = header_value(response.headers, b"content-type") or b""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        value = _json(text)
        if value is not None:
            return Body("json", (Event(None, value, text),))
    if stripped.startswith("["):
        elements = list(array_elements(stripped))
        if elements:
            return Body("json-array", tuple(Event(None, v, "") for v in elements))
    if _looks_like_sse(text, content_type):
        events, comments = sse_events(text)
        return Body("sse", tuple(events), comments)
    return Body("text", (Event(None, None, text),), note="the body is not JSON")
