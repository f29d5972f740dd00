"""Body bytes shown as text: a differing token trimmed, and its context.

Owns how bytes become a short readable string: cut on UTF-8 character
boundaries, undecodable bytes as ``\\xNN``, long text trimmed with an
ellipsis. Knows nothing of differences, kinds or JSON.
"""

from __future__ import annotations

#: A differing text is trimmed to about this many characters.
TEXT_LIMIT = 120
#: Context shown either side of a differing text, in bytes.
CONTEXT = 40
ELLIPSIS = "…"


def _is_continuation(byte: int) -> bool:
    # UTF-8 continuation bytes are 10xxxxxx (RFC 3629 §3).
    return byte & 0xC0 == 0x80


def align(data: bytes, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` widened to whole UTF-8 characters (at most 3 bytes
    either way, so binary data is not swallowed)."""
    for _ in range(3):
        if 0 < start < len(data) and _is_continuation(data[start]):
            start -= 1
    for _ in range(3):
        if start <= end < len(data) and _is_continuation(data[end]):
            end += 1
    return start, end


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def trim(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def show(data: bytes, start: int, end: int) -> str:
    """``data[start:end]`` as text, trimmed."""
    start, end = align(data, start, end)
    # Decode a little more than shown, so trimming never cuts an escape.
    return trim(_decode(data[start : min(end, start + 4 * TEXT_LIMIT)]))


def context(data: bytes, start: int, end: int) -> str:
    """The text ``data[start:end]`` (trimmed) with ``CONTEXT`` bytes either side."""
    start, end = align(data, start, end)
    before_start, _ = align(data, max(0, start - CONTEXT), start)
    _, after_end = align(data, end, min(len(data), end + CONTEXT))
    return _decode(data[before_start:start]) + show(data, start, end) + _decode(data[end:after_end])
