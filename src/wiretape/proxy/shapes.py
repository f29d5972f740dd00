"""Error responses in each provider's own shape, so an SDK surfaces
wiretape's message as an ordinary API error and does not retry.

Shapes: OpenAI (https://platform.openai.com/docs/guides/error-codes),
Anthropic (https://docs.anthropic.com/en/api/errors), Gemini (google.rpc.Status
as JSON, https://ai.google.dev/gemini-api/docs/troubleshooting). Every error
carries ``x-should-retry: false``, which the openai and anthropic SDKs honour
before any status-based retry rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from wiretape.model import Headers, JSONValue

_GRPC_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "UNIMPLEMENTED",
                413: "INVALID_ARGUMENT", 501: "UNIMPLEMENTED", 502: "UNAVAILABLE",
                504: "DEADLINE_EXCEEDED"}


def _openai(status: int, code: str, message: str) -> dict[str, JSONValue]:
    return {"error": {"message": message, "type": "wiretape_error", "param": None, "code": code}}


def _anthropic(status: int, code: str, message: str) -> dict[str, JSONValue]:
    kind = "invalid_request_error" if status < 500 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


def _gemini(status: int, code: str, message: str) -> dict[str, JSONValue]:
    return {"error": {"code": status, "message": message,
                      "status": _GRPC_STATUS.get(status, "FAILED_PRECONDITION")}}


#: A provider's error body for (status, code, message).
ErrorShape = Callable[[int, str, str], dict[str, JSONValue]]

#: (path test, shape) in order; the first that matches wins.
SHAPES: tuple[tuple[Callable[[bytes], bool], ErrorShape], ...] = (
    (lambda p: p.rstrip(b"/").endswith(b"/messages") or b"/messages/" in p, _anthropic),
    (lambda p: b":generateContent" in p or b":streamGenerateContent" in p
     or b"/v1beta/" in p or b":embedContent" in p or b":batchEmbedContents" in p, _gemini),
)


def error_response(path: bytes, status: int, code: str, message: str) -> tuple[Headers, bytes]:
    """Headers and JSON body of an error for a request to ``path``."""
    shape = next((fn for test, fn in SHAPES if test(path)), _openai)
    body = json.dumps(shape(status, code, message)).encode()
    headers: Headers = (
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(body)).encode()),
        (b"x-should-retry", b"false"),
        (b"x-wiretape-error", code.encode()),
    )
    return headers, body


def unreachable_response(path: bytes, upstream_url: str, reason: str, *,
                         timeout: bool = False) -> tuple[int, bytes, Headers, bytes]:
    """The 502 the agent gets when the origin cannot be reached, or the 504
    when it did not answer in time (``timeout``). The recording stores it
    as the exchange's response, and a replay serves those bytes; runs
    without one (older, imported) get it made again from the stored facts."""
    if timeout:
        headers, body = error_response(
            path, 504, "origin_timeout",
            f"wiretape: origin {upstream_url} did not answer in time: {reason}")
        return 504, b"Gateway Timeout", headers, body
    headers, body = error_response(
        path, 502, "origin_unreachable", f"wiretape: origin {upstream_url} unreachable: {reason}"
    )
    return 502, b"Bad Gateway", headers, body
