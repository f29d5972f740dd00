"""Redaction on the way in: secrets are removed before a byte is written.

Owns which header values, query parameters and body shapes are secrets, and
what replaces them. The same function is applied to live requests during a
replay before they are compared, so redaction never turns an exact match
into a divergence. Knows nothing of storage.

Pure (values in, values out), so every part that meets a request can use
it: the recorder and the replayer, the header comparison of a divergence
report, and imports of other tools' recordings.

Replacements keep a body's length (a Content-Length stays true, and frame
boundaries stay where they were); header and query values become a fixed
marker so a replay with another key still matches.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from wiretape.model import Headers, Redaction, Request, Response

REDACTED = b"<redacted>"

#: Header names whose values are secrets (compared lower-case).
SECRET_HEADERS: frozenset[bytes] = frozenset(
    {
        b"authorization",
        b"proxy-authorization",
        b"x-api-key",
        b"api-key",
        b"x-goog-api-key",
        b"cookie",
        b"set-cookie",
    }
)

#: Query parameters whose values are secrets (Gemini accepts ``?key=``).
SECRET_QUERY_PARAMS: frozenset[bytes] = frozenset({b"key", b"api_key"})

#: Known API key shapes, looked for inside bodies: (label, pattern).
KEY_SHAPES: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    ("anthropic-key", re.compile(rb"(?<![A-Za-z0-9_])sk-ant-[A-Za-z0-9_\-]{20,}")),
    (
        "openai-key",
        re.compile(rb"(?<![A-Za-z0-9_])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ),
    ("google-key", re.compile(rb"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_\-]{35}")),
    ("github-token", re.compile(rb"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,}")),
    ("slack-token", re.compile(rb"(?<![A-Za-z0-9_])xox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("aws-access-key", re.compile(rb"(?<![A-Za-z0-9_])AKIA[0-9A-Z]{16}")),
    ("groq-key", re.compile(rb"(?<![A-Za-z0-9_])gsk_[A-Za-z0-9]{20,}")),
    ("huggingface-token", re.compile(rb"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")),
)


def fingerprint(secret: bytes) -> str:
    """First 8 hex digits of the secret's sha256."""
    return hashlib.sha256(secret).hexdigest()[:8]


def _mask(n: int) -> bytes:
    """A same-length stand-in for an n-byte secret found in a body."""
    if n >= 10:
        return b"<redacted" + b"*" * (n - 10) + b">"
    return b"*" * n


@dataclass
class _Facts:
    items: list[Redaction]

    def add(self, location: str, name: str, secret: bytes) -> None:
        self.items.append(Redaction(location, name, fingerprint(secret)))


def _redact_headers(headers: Headers, location: str, facts: _Facts) -> Headers:
    out = []
    for name, value in headers:
        if name.lower() in SECRET_HEADERS and value != REDACTED:
            secret = value.split(b" ", 1)[1] if value.lower().startswith(b"bearer ") else value
            facts.add(location, name.decode("latin-1"), secret)
            scheme = value.split(b" ", 1)[0] + b" " if b" " in value.strip() else b""
            value = scheme + REDACTED if name.lower().endswith(b"authorization") else REDACTED
        out.append((name, value))
    return tuple(out)


def _redact_target(target: bytes, facts: _Facts) -> bytes:
    if b"?" not in target:
        return target
    path, query = target.split(b"?", 1)
    parts = []
    for part in query.split(b"&"):
        key, eq, value = part.partition(b"=")
        if eq and key.lower() in SECRET_QUERY_PARAMS and value and value != REDACTED:
            facts.add("query", key.decode("latin-1"), value)
            part = key + b"=" + REDACTED
        parts.append(part)
    return path + b"?" + b"&".join(parts)


def redact_body(body: bytes, location: str, facts: _Facts) -> bytes:
    for label, pattern in KEY_SHAPES:
        if pattern.search(body) is None:
            continue

        def repl(match: re.Match[bytes], label: str = label) -> bytes:
            facts.add(location, label, match.group(0))
            return _mask(len(match.group(0)))

        body = pattern.sub(repl, body)
    return body


def redact_request(request: Request) -> tuple[Request, list[Redaction]]:
    """The request with every secret replaced, and the facts of what was."""
    facts = _Facts([])
    redacted = Request(
        method=request.method,
        target=_redact_target(request.target, facts),
        headers=_redact_headers(request.headers, "request-header", facts),
        body=redact_body(request.body, "request-body", facts),
        http_version=request.http_version,
    )
    return redacted, facts.items


def redact_response(response: Response) -> tuple[Response, list[Redaction]]:
    """The response with secret headers replaced, and secrets in an
    identity-encoded body masked in place (frames keep their lengths)."""
    from dataclasses import replace

    facts = _Facts([])
    headers = _redact_headers(response.headers, "response-header", facts)
    frames = response.frames
    encoded = any(
        k.lower() == b"content-encoding" and v.strip().lower() not in (b"", b"identity")
        for k, v in response.headers
    )
    if not encoded:
        body = response.body
        masked = redact_body(body, "response-body", facts)
        if masked != body:
            pos, new_frames = 0, []
            for frame in frames:
                n = len(frame.data)
                new_frames.append(replace(frame, data=masked[pos : pos + n]))
                pos += n
            frames = tuple(new_frames)
    return replace(response, headers=headers, frames=frames), facts.items
