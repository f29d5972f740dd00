"""What kind of difference a region is: a table of named recognisers.

Owns the recognisers (whitespace, timestamp, UUID, absolute path, hex and
base64 ids, number) and the rule that applies them: grow the differing
region to the token around it, on the recorded side and on the live side,
and take the first recogniser whose token holds the region on both sides.
Works on raw body bytes, so JSON escapes (``\\/``, ``\\\\``, ``\\n``) are
seen as they crossed the wire. One exception looks at structure: a JSON
document carried in a string value (Claude Code's ``metadata.user_id`` is
the text of ``{"device_id": ..., "session_id": ...}``) is decoded, and each
value that differs inside it is classified on its own (:func:`embedded`).
Knows nothing of HTTP, or of how a span is reported.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from wiretape.matching.jsontree import Change, diff, parse, pointer
from wiretape.matching.locate import ByteOffsets, locate
from wiretape.matching.regions import Region, differing_region

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
    (None where the value is absent on that side). ``inner`` is where it
    lies inside a JSON document carried in a string value: ``#`` and an RFC
    6901 pointer into that document (``#/session_id``; one ``#`` per level
    when such a document holds another), appended to the string's own
    pointer it reads ``/metadata/user_id#/session_id``, the form a URI
    fragment gives a pointer (RFC 6901 §6). Empty elsewhere."""

    kind: SpanKind
    recorded: Range | None
    live: Range | None
    inner: str = ""


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


# -- JSON documents carried in a string ----------------------------------------------------------

#: A string value is looked into when it is at most this long as written,
EMBEDDED_MAX = 256 * 1024
#: and through at most this many documents nested in strings.
EMBEDDED_DEPTH = 3
#: Values that differ inside one such document, classified at most.
EMBEDDED_VALUES = 20

#: RFC 8259 §7: the two-character escapes, by the character after "\".
_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b",
            ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_HEX4 = re.compile(rb"[0-9A-Fa-f]{4}")
#: A string literal whose text begins like a JSON object or array.
_DOCUMENT_START = re.compile(rb'"(?:[ \t]|\\[ntr])*[{\[]')


def _unicode_escape(text: bytes, i: int, stop: int) -> tuple[bytes, int] | None:
    """The UTF-8 bytes of the ``\\uXXXX`` escape at ``i`` (with its low
    surrogate when it is a pair) and the escape's length."""
    if i + 6 > stop or not _HEX4.fullmatch(text, i + 2, i + 6):
        return None
    code, length = int(text[i + 2:i + 6], 16), 6
    if (0xD800 <= code < 0xDC00 and i + 12 <= stop and text[i + 6:i + 8] == b"\\u"
            and _HEX4.fullmatch(text, i + 8, i + 12)
            and 0xDC00 <= (low := int(text[i + 8:i + 12], 16)) < 0xE000):
        code, length = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), 12
    return chr(code).encode("utf-8", "surrogatepass"), length


def _decoded(text: bytes, start: int, end: int) -> tuple[bytes, list[int]] | None:
    """The JSON string literal ``text[start:end]`` (its quotes included)
    decoded to UTF-8 bytes, and for each decoded byte the offset in
    ``text`` of what it was written as (one more entry: the closing
    quote). None when it is not one literal."""
    if not (2 <= end - start <= EMBEDDED_MAX and text[start] == text[end - 1] == 0x22):
        return None
    out, where, i, stop = bytearray(), [], start + 1, end - 1
    while i < stop:
        if text[i] == 0x22:
            return None  # a quote not escaped: this is no single string
        if text[i] != 0x5C:
            out.append(text[i])
            where.append(i)
            i += 1
            continue
        if i + 1 < stop and text[i + 1] != ord("u"):
            simple = _ESCAPES.get(text[i + 1])
            if simple is None:
                return None
            piece, length = simple, 2
        else:
            escape = _unicode_escape(text, i, stop)
            if escape is None:
                return None
            piece, length = escape
        out += piece
        where.extend([i] * len(piece))
        i += length
    where.append(stop)
    return bytes(out), where


def _unquoted(text: bytes, start: int, end: int) -> Range:
    """A string value's range without its quotes; another value's as it is."""
    if end - start >= 2 and text[start] == text[end - 1] == 0x22:
        return start + 1, end - 1
    return start, end


def embedded(recorded: bytes, live: bytes, value: Region,
             depth: int = 0) -> list[tuple[Region, Token]] | None:
    """When ``value`` is a string value on each side (its quotes included)
    whose text is a JSON object or array, each value that differs inside
    that document as (region in the bodies, its token): classified by the
    recognisers on the decoded text, ``Token.inner`` its place inside.
    None when ``value`` is not such a string on both sides, or nothing
    inside differs (the texts differ only in spacing or escapes)."""
    if not (_DOCUMENT_START.match(recorded, value.rec_start, value.rec_end)
            and _DOCUMENT_START.match(live, value.live_start, value.live_end)):
        return None
    rec_side = _decoded(recorded, value.rec_start, value.rec_end)
    live_side = _decoded(live, value.live_start, value.live_end)
    if rec_side is None or live_side is None:
        return None
    (rec_text, rec_at), (live_text, live_at) = rec_side, live_side
    rec_doc, live_doc = parse(rec_text), parse(live_text)
    if rec_doc is None or live_doc is None:
        return None
    try:
        changes = diff(rec_doc.value, live_doc.value)[:EMBEDDED_VALUES]
    except RecursionError:
        return None
    rec_chars = locate(rec_doc.text, {c.recorded_path for c in changes})
    live_chars = locate(live_doc.text, {c.live_path for c in changes})
    rec_bytes, live_bytes = ByteOffsets(rec_doc.text), ByteOffsets(live_doc.text)

    def outer(region: Region, token: Token, inner: str) -> tuple[Region, Token]:
        """A region and token in the decoded texts, placed in the bodies."""
        def place(at: list[int], r: Range | None) -> Range | None:
            return None if r is None else (at[r[0]], at[r[1]])

        return (Region(rec_at[region.rec_start], rec_at[region.rec_end],
                       live_at[region.live_start], live_at[region.live_end]),
                Token(token.kind, place(rec_at, token.recorded), place(live_at, token.live),
                      inner + token.inner))

    found: list[tuple[Region, Token]] = []
    for change in changes:
        rr, lr = rec_chars.get(change.recorded_path), live_chars.get(change.live_path)
        if rr is None or lr is None:
            continue
        where = Region(rec_bytes(rr[0]), rec_bytes(rr[1]), live_bytes(lr[0]), live_bytes(lr[1]))
        inner = "#" + pointer(change.path)
        if change.change is Change.ADDED or change.change is Change.REMOVED:
            added = change.change is Change.ADDED
            region = (Region(where.rec_start, where.rec_start,
                             *_unquoted(live_text, where.live_start, where.live_end))
                      if added else
                      Region(*_unquoted(rec_text, where.rec_start, where.rec_end),
                             where.live_start, where.live_start))
            token = classify(rec_text, live_text, region, recorded_absent=added,
                             live_absent=not added)
            found.append(outer(region, token, inner))
            continue
        nested = (embedded(rec_text, live_text, where, depth + 1)
                  if depth + 1 < EMBEDDED_DEPTH and change.change is Change.CHANGED else None)
        if nested is not None:
            found.extend(outer(region, token, inner) for region, token in nested)
            continue
        region = differing_region(rec_text, live_text, where) or where
        token = (Token(SpanKind.KEY_ORDER, (where.rec_start, where.rec_end),
                       (where.live_start, where.live_end))
                 if change.change is Change.KEY_ORDER else classify(rec_text, live_text, region))
        found.append(outer(region, token, inner))
    return found or None
