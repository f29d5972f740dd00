"""Embeddings: OpenAI ``/embeddings`` (``data[].embedding``, a list of
numbers or base64 float32; platform.openai.com/docs/api-reference/embeddings)
and Gemini ``embedContent`` / ``batchEmbedContents`` (``embedding.values``,
``embeddings[].values``). Shown as how many vectors of what size, and usage.
Knows nothing of other formats.
"""

from __future__ import annotations

import base64
import binascii

from wiretape.inspect.formats.draft import Draft, get, integer
from wiretape.inspect.formats.events import Event
from wiretape.inspect.formats.view import Usage


def _size(vector: object) -> int | None:
    if isinstance(vector, list):
        return len(vector)
    if isinstance(vector, str):  # encoding_format=base64: packed float32
        try:
            return len(base64.b64decode(vector, validate=True)) // 4
        except (binascii.Error, ValueError):
            return None
    return None


def read(draft: Draft, events: tuple[Event, ...]) -> None:
    for event in events:
        draft.events += 1
        doc = event.data
        if isinstance(doc, dict) and "error" in doc:
            draft.error(doc)
            continue
        vectors: list[object] = []
        data, many, one = get(doc, "data"), get(doc, "embeddings"), get(doc, "embedding", "values")
        if isinstance(data, list):
            vectors = [get(item, "embedding") for item in data]
        elif isinstance(many, list):
            vectors = [get(item, "values") for item in many]
        elif one is not None:
            vectors = [one]
        else:
            draft.unknown["document without embeddings"] += 1
            continue
        draft.set_model(get(doc, "model"))
        draft.vectors = (draft.vectors or 0) + len(vectors)
        draft.dimensions = _size(vectors[0]) if vectors else None
        usage = get(doc, "usage")
        if isinstance(usage, dict):
            draft.usage = Usage(
                integer(usage, "prompt_tokens"), None, integer(usage, "total_tokens")
            )
