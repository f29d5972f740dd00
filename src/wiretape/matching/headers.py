"""How the request line and headers of two requests differ.

Owns the default semantic headers (DESIGN.md, "Matching and the verdict":
they decide a match, the rest are listed) and the comparison of method,
target and headers, with secrets redacted before anything is shown (the
rules of ``wiretape.redaction``: a key never reaches a report). Knows nothing of
bodies.
"""

from __future__ import annotations

from collections.abc import Sequence

from wiretape.matching.report import HeaderDiff
from wiretape.model import Headers, Request
from wiretape.redaction import redact_request

#: Headers that decide a match (lower-case); others are informational.
DEFAULT_SEMANTIC_HEADERS: tuple[bytes, ...] = (
    b"content-type",
    b"anthropic-version",
    b"anthropic-beta",
    b"openai-beta",
)


def _text(value: bytes) -> str:
    # RFC 9110 §5.5: field values are octets; latin-1 keeps every one.
    return value.decode("latin-1")


def _redacted(request: Request) -> Request:
    return redact_request(Request(request.method, request.target, request.headers, b""))[0]


def _by_name(headers: Headers) -> dict[bytes, tuple[bytes, ...]]:
    out: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        out.setdefault(name.lower(), []).append(value)
    return {name: tuple(values) for name, values in out.items()}


def request_line_differences(
    recorded: Request, live: Request
) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """(method, target) as (recorded, live) where they differ, else None;
    secret query parameters redacted."""
    rec, liv = _redacted(recorded), _redacted(live)
    method = (_text(rec.method), _text(liv.method)) if recorded.method != live.method else None
    target = (_text(rec.target), _text(liv.target)) if rec.target != liv.target else None
    return method, target


def header_differences(
    recorded: Request, live: Request, semantic: Sequence[bytes]
) -> tuple[HeaderDiff, ...]:
    """Headers whose values differ after redaction: the semantic ones in
    the order given, then the others by name."""
    semantic_names = list(dict.fromkeys(name.lower() for name in semantic))
    rec, liv = _by_name(_redacted(recorded).headers), _by_name(_redacted(live).headers)
    others = sorted((rec.keys() | liv.keys()) - set(semantic_names))
    out: list[HeaderDiff] = []
    for name in [*semantic_names, *others]:
        before, after = rec.get(name, ()), liv.get(name, ())
        if before != after:
            out.append(
                HeaderDiff(
                    _text(name),
                    tuple(map(_text, before)),
                    tuple(map(_text, after)),
                    semantic=name in semantic_names,
                )
            )
    return tuple(out)
