"""What kind of difference a region is: a table of named recognisers.

Owns the recognisers (whitespace, timestamp, UUID, absolute path, hex and
base64 ids, number) and the rule that applies them: grow the differing
region to the token around it, on the recorded side and on the live side,
and take the first recogniser whose token holds the region on both sides.
Works on raw body bytes, so JSON escapes (``\\/``, ``\\\\``, ``\\n``) are
seen as they crossed the wire. Knows nothing of JSON structure, HTTP, or
how a span is reported.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from wiretape.matching.regions import Region

#: How far either side of a region a token is looked for.
WINDOW = 256
#: A region longer than this is no single token of a known kind.
MAX_TOKEN = 1024
#: How far an unrecognised region is grown to whole words, either side.
WORD_REACH = 40

Range = tuple[int, int]
Finder = Callable[[bytes, int, int], "Range | None"]


class SpanKind(enum.StrEnum):
    TIMESTAMP = "timestamp"
    UUID = "uuid"
    PATH = "path"
    HEX_ID = "hex_id"
    BASE64_ID = "base64_id"
    NUMBER = "number"
    WHITESPACE = "whitespace"
    KEY_ORDER = "key_order"
    OTHER = "other"


@dataclass(frozen=True)
class Recogniser:
    """``find(text, start, end)`` returns the token of this kind that holds
    ``text[start:end]`` (an empty range is held by a token around it)."""

    kind: SpanKind
    name: str
    find: Finder


@dataclass(frozen=True)
class Token:
    """A classified region: its kind and the token shown on each side
    (None where the value is absent on that side)."""

    kind: SpanKind
    recorded: Range | None
    live: Range | None


def _regex(pattern: bytes, accept: Callable[[bytes], bool] | None = None) -> Finder:
    compiled = re.compile(pattern)

    def find(text: bytes, start: int, end: int) -> Range | None:
        if end - start > MAX_TOKEN:
            return None
        # Lookbehinds see the bytes before the window; a token cut by the
        # window's end is as long as the window allows.
        for m in compiled.finditer(text, max(0, start - WINDOW), min(len(text), end + WINDOW)):
            if m.start() > start:
                return None
            if m.end() >= end and (accept is None or accept(m.group())):
                return m.span()
        return None

    return find


#: Whitespace, also as a JSON escape (RFC 8259 §7: \n, \t, \r).
_WHITESPACE_ONLY = re.compile(rb"(?:[ \t\r\n]|\\[ntr])*")


def _whitespace(text: bytes, start: int, end: int) -> Range | None:
    # A region may begin just after the backslash of an escape ("\n" vs "\t").
    begin = start - 1 if start > 0 and text[start - 1] == 0x5C else start
    return (start, end) if _WHITESPACE_ONLY.fullmatch(text, begin, end) else None


def _epoch(low: int, high: int) -> Callable[[bytes], bool]:
    def accept(token: bytes) -> bool:
        return low <= int(token.split(b".")[0]) <= high

    return accept


def _has_hex_letter_and_digit(token: bytes) -> bool:
    tail = re.split(rb"[-_]", token)[-1]
    return re.search(rb"[A-Fa-f]", tail) is not None and re.search(rb"[0-9]", tail) is not None


def _random_looking(token: bytes) -> bool:
    """An id, not a word: some long segment mixes digits and letters, or
    has many capitals among small letters (base64 does; camelCase does not)."""
    for segment in re.split(rb"[-_=]", token):
        if len(segment) < 12:
            continue
        letters = sum(c.isalpha() for c in segment.decode("ascii"))
        digits = sum(c.isdigit() for c in segment.decode("ascii"))
        upper = sum(c.isupper() for c in segment.decode("ascii"))
        if letters and digits:
            return True
        if letters and upper * 4 >= letters and upper < letters:
            return True
    return False


_MONTH = rb"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_WEEKDAY = rb"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
# POSIX path segments; "/" may be written "\/" inside JSON (RFC 8259 §7).
_SEGMENT = rb"[\w.@+~%=-]+"
_SLASH = rb"\\?/"
# Windows: "\" raw, "\\" inside JSON, or "/".
_WIN_SEP = rb"(?:\\\\|\\|/)"
_WIN_SEGMENT = rb"[\w.@+~%$()-]+"
_ASCTIME = _WEEKDAY + rb"\s+" + _MONTH + rb"\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+\d{4}"
_POSIX_PATH = _SLASH + _SEGMENT + rb"(?:" + _SLASH + _SEGMENT + rb")+(?:" + _SLASH + rb")?"
_WIN_PATH = _WIN_SEP + rb"(?:" + _WIN_SEGMENT + rb"(?:" + _WIN_SEP + _WIN_SEGMENT + rb")*"
_WIN_PATH += _WIN_SEP + rb"?)?"
# 2000-01-01 and 2100-01-01 in epoch seconds: the plausible range.
_EPOCH_LOW, _EPOCH_HIGH = 946_684_800, 4_102_444_800

RECOGNISERS: tuple[Recogniser, ...] = (
    # First: a property of the region itself; a token next to inserted
    # whitespace would otherwise claim it.
    Recogniser(SpanKind.WHITESPACE, "whitespace", _whitespace),
    # RFC 3339 §5.6 / ISO 8601 extended: date, optional time, fraction and
    # offset; also "2026-11-29 10:00:00,123" (Python logging's asctime).
    Recogniser(
        SpanKind.TIMESTAMP,
        "iso8601",
        _regex(
            rb"(?<![0-9])\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
            rb"(?:[Tt ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{1,9})?)?"
            rb"(?:[Zz]|[+-](?:[01]\d|2[0-3]):?[0-5]\d)?)?(?![0-9])"
        ),
    ),
    # ISO 8601 basic format: 20261129T100000Z.
    Recogniser(
        SpanKind.TIMESTAMP,
        "iso8601-basic",
        _regex(rb"(?<![0-9])\d{8}T\d{6}(?:[.,]\d{1,9})?(?:Z|[+-]\d{4})?(?![0-9])"),
    ),
    # RFC 2822 §3.3 date-time (and RFC 9110 §5.6.7 IMF-fixdate): [Sun, ]29
    # Nov 2026 10:00:00 +0000, with the obsolete zone names of §4.3.
    Recogniser(
        SpanKind.TIMESTAMP,
        "rfc2822",
        _regex(
            rb"(?<![A-Za-z0-9])(?:" + _WEEKDAY + rb",\s*)?\d{1,2}\s+" + _MONTH + rb"\s+\d{4}\s+"
            rb"\d{2}:\d{2}(?::\d{2})?(?:\s*(?:[+-]\d{4}|UT|GMT|[ECMP][SD]T|Z))?(?![A-Za-z0-9])"
        ),
    ),
    # ANSI C asctime (RFC 9110 §5.6.7, obsolete): Sun Nov 29 10:00:00 2026.
    Recogniser(
        SpanKind.TIMESTAMP,
        "asctime",
        _regex(rb"(?<![A-Za-z])" + _ASCTIME + rb"(?![0-9])"),
    ),
    # NCSA Common Log Format: 29/Nov/2026:10:00:00 +0000.
    Recogniser(
        SpanKind.TIMESTAMP,
        "common-log",
        _regex(
            rb"(?<![0-9])\d{2}/" + _MONTH + rb"/\d{4}:\d{2}:\d{2}:\d{2}(?:\s[+-]\d{4})?(?![0-9])"
        ),
    ),
    # Unix time in seconds (10 digits, optional fraction) or milliseconds
    # (13 digits), between 2000 and 2100.
    Recogniser(
        SpanKind.TIMESTAMP,
        "epoch-seconds",
        _regex(rb"(?<![0-9.])\d{10}(?:\.\d{1,9})?(?![0-9])", _epoch(_EPOCH_LOW, _EPOCH_HIGH)),
    ),
    Recogniser(
        SpanKind.TIMESTAMP,
        "epoch-milliseconds",
        _regex(rb"(?<![0-9.])\d{13}(?![0-9])", _epoch(_EPOCH_LOW * 1000, _EPOCH_HIGH * 1000)),
    ),
    # RFC 9562 §4 UUID string representation, any version.
    Recogniser(
        SpanKind.UUID,
        "uuid",
        _regex(
            rb"(?<![0-9A-Fa-f])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"
            rb"[0-9A-Fa-f]{12}(?![0-9A-Fa-f])"
        ),
    ),
    # Absolute POSIX path of two segments or more (not a URL's path: not
    # after "host" or ":" or "/").
    Recogniser(
        SpanKind.PATH,
        "posix-path",
        _regex(rb"(?<![\w.~/\\:-])" + _POSIX_PATH),
    ),
    # Windows drive path: C:\Users\x, C:\\Users\\x (JSON), C:/Users/x.
    Recogniser(
        SpanKind.PATH,
        "windows-path",
        _regex(rb"(?<![\w])[A-Za-z]:" + _WIN_PATH),
    ),
    # 16+ hex digits, with an optional word prefix (call_..., req_...).
    Recogniser(
        SpanKind.HEX_ID,
        "hex-id",
        _regex(
            rb"(?<![A-Za-z0-9_])(?:[A-Za-z][A-Za-z0-9]*[-_])*[0-9A-Fa-f]{16,}(?![A-Za-z0-9_])",
            _has_hex_letter_and_digit,
        ),
    ),
    # base64url (RFC 4648 §5) tokens and provider ids (chatcmpl-..., msg_...).
    Recogniser(
        SpanKind.BASE64_ID,
        "base64-id",
        _regex(
            rb"(?<![A-Za-z0-9_+-])[A-Za-z0-9_+-]{16,}={0,2}(?![A-Za-z0-9_=+-])", _random_looking
        ),
    ),
    # A JSON number (RFC 8259 §6), or one in text.
    Recogniser(
        SpanKind.NUMBER,
        "number",
        _regex(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w])(?!\.\d)"),
    ),
)

_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _grow_to_words(text: bytes, start: int, end: int) -> Range:
    low, high = max(0, start - WORD_REACH), min(len(text), end + WORD_REACH)
    while start > low and text[start - 1] in _WORD:
        start -= 1
    while end < high and text[end] in _WORD:
        end += 1
    return start, end


def classify(
    recorded: bytes,
    live: bytes,
    region: Region,
    *,
    recorded_absent: bool = False,
    live_absent: bool = False,
) -> Token:
    """The kind of ``region`` and the token shown on each side. A side
    marked absent (a JSON member added or removed) does not vote."""
    rec_range = None if recorded_absent else (region.rec_start, region.rec_end)
    live_range = None if live_absent else (region.live_start, region.live_end)
    if rec_range is None and live_range is None:
        return Token(SpanKind.OTHER, None, None)
    for recogniser in RECOGNISERS:
        found_rec = None if rec_range is None else recogniser.find(recorded, *rec_range)
        found_live = None if live_range is None else recogniser.find(live, *live_range)
        if (found_rec or rec_range is None) and (found_live or live_range is None):
            return Token(recogniser.kind, found_rec, found_live)
    return Token(
        SpanKind.OTHER,
        None if rec_range is None else _grow_to_words(recorded, *rec_range),
        None if live_range is None else _grow_to_words(live, *live_range),
    )
