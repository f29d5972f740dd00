"""Any other response: errors under ``error``, a ``model`` member, and every
event named by its SSE name or its ``type``/``object`` member, listed as
unknown (shown, never fatal). Knows no provider.
"""

from __future__ import annotations

from wiretape.inspect.formats.draft import Draft, get, text
from wiretape.inspect.formats.events import Event


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    for event in events:
        draft.events += 1
        doc = event.data
        if isinstance(doc, dict) and "error" in doc and draft.error(doc):
            continue
        if event.text.strip() == "[DONE]":
            continue
        draft.set_model(get(doc, "model"))
        name = event.name or text(doc, "type") or text(doc, "object")
        draft.unknown[name or ("JSON document" if doc is not None else "text")] += 1
