"""OpenAI embeddings derived from the input alone (pure: values in, bytes out).

Format: https://platform.openai.com/docs/api-reference/embeddings. This module
owns the vectors (a unit vector per input, a pure function of that input, in
float32 precision), their float or base64 encoding, and the list object that
carries them. It consumes no turn: it must not know about the script, sockets
or routing.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Mapping

from wiretape.testing.script import JSON
from wiretape.testing.wire import (
    BAD_REQUEST,
    OPENAI,
    Reply,
    error_reply,
    json_bytes,
    json_reply,
)

EMBEDDING_DIMENSIONS = 8
"""Length of an embedding vector when the request does not ask for ``dimensions``."""


def embeddings(request: Mapping[str, JSON], request_size: int) -> Reply:
    """The reply to ``POST .../embeddings`` for the parsed ``request`` of ``request_size`` bytes."""
    inputs = request.get("input")
    if isinstance(inputs, str) or (
        isinstance(inputs, list) and inputs and isinstance(inputs[0], int)
    ):
        inputs = [inputs]
    dimensions = request.get("dimensions") or EMBEDDING_DIMENSIONS
    if (
        not isinstance(inputs, list)
        or not inputs
        or not isinstance(dimensions, int)
        or dimensions < 1
    ):
        message = (
            "wiretape fake provider: embeddings need a non-empty 'input' "
            "and a positive integer 'dimensions'"
        )
        return error_reply(OPENAI, BAD_REQUEST, message)
    as_base64 = request.get("encoding_format") == "base64"
    data = []
    for index, item in enumerate(inputs):
        vector = _embedding(item, dimensions)
        encoded: JSON = (
            base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode("ascii")
            if as_base64
            else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    tokens = max(1, request_size // 4)
    return json_reply(
        {
            "object": "list",
            "data": data,
            "model": str(request.get("model") or "fake-embedding"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


def _embedding(item: JSON, dimensions: int) -> list[float]:
    """A unit vector that is a pure function of ``item``, in float32 precision."""
    seed = json_bytes(item)
    words = b"".join(
        hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(dimensions // 8 + 1)
    )
    raw = [n / 2**31 - 1.0 for n in struct.unpack(f">{dimensions}I", words[: 4 * dimensions])]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(x / norm for x in raw))
    return list(struct.unpack(f"<{dimensions}f", packed))
