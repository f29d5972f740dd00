"""What differs between two honest runs of the same agent: timestamps and timings.

The outcome of a replay compares what the agent left behind (files it
wrote, its stdout) with what the recording left. Two runs that sent the
same requests and got the same answers still stamp their own wall-clock
time and measure their own durations: nanobot's session files, for one,
carry ``"timestamp": "2026-11-29T14:55:02.230532"`` per message and
``"ttft_ms"``/``"latency_ms"`` per turn. This module decides whether two
texts differ *only* in such values:

* a **timestamp**: a differing region the kinds table classifies as a
  timestamp on both sides (ISO 8601 / RFC 3339, RFC 2822, log formats,
  epoch seconds or milliseconds);
* a **duration**: a JSON number whose member name names a time measure
  (``*_ms``, ``*_ns``, ``*_us``, ``*_s``, ``*_seconds``, ``latency``,
  ``duration``, ``elapsed``, ``ttft``, ``took``).

Anything else (another string, a number under another name, a member or
element added, removed or reordered, a line more or less) is a real
difference. JSON documents, JSON Lines (every non-blank line a JSON value,
RFC 8259 per line) and other UTF-8 text are understood; binary data never
compares as "volatile". Pure: bytes in, a value out, never an exception.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import re
import time
from collections import Counter
from dataclasses import dataclass

from wiretape.matching import correspond
from wiretape.matching.correspond import DURATION_NAME, Learned
from wiretape.matching.jsontree import Change, JsonObject, at, diff, parse, pointer
from wiretape.matching.kinds import SpanKind
from wiretape.matching.regions import differing_region, split
from wiretape.matching.spans import classified
from wiretape.snapshot.tree import is_text

#: Real differences listed at most (the rest are counted).
MAX_LISTED = 5
#: A number in text followed by a time unit ("took 88.1 ms") is a timing.
_UNIT = re.compile(rb"\s?(?:ms|s|sec|secs|seconds|us|\xc2\xb5s|ns|min|minutes)\b")
_DAY = 86400.0


def _seconds(text: str) -> float | None:
    """Epoch seconds of a timestamp's text, or None when it does not parse."""
    text = text.strip().strip('"')
    if re.fullmatch(r"\d+(\.\d+)?", text):
        value = float(text)
        for scale in (1.0, 1e3, 1e6, 1e9):  # s, ms, us, ns
            if 1e9 <= value / scale < 1e10:
                return value / scale
        return None
    for reader in (lambda t: dt.datetime.fromisoformat(t.replace(",", ".")),
                   email.utils.parsedate_to_datetime,
                   lambda t: dt.datetime.strptime(t, "%d/%b/%Y:%H:%M:%S %z")):
        try:
            moment = reader(text)
        except (ValueError, TypeError, IndexError):
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp()
    return None


def _clock_reading(window: tuple[float | None, float], text: str) -> bool:
    """A timestamp read from a clock during the runs (see compare_volatile)."""
    seconds = _seconds(text)
    low, high = window
    return seconds is not None and (low is None or seconds >= low) and seconds <= high


@dataclass(frozen=True)
class VolatileComparison:
    """How two texts compare once timestamps and timings are set aside.

    ``volatile`` counts the values that differ and are expected to, by kind
    (``timestamp``, ``duration``); ``examples`` shows the first few as
    ``(where, recorded, replayed)``, where ``where`` is ``line N`` and/or an
    RFC 6901 pointer; ``real`` lists the first real differences in the same
    form, ``real_count`` counts them all. ``same`` is true when there is no
    real difference.
    """

    volatile: dict[str, int]
    examples: tuple[tuple[str, str, str], ...]
    real: tuple[tuple[str, str, str], ...]
    real_count: int

    @property
    def same(self) -> bool:
        return self.real_count == 0

    def summary(self) -> str:
        """``2 timestamps, 1 duration`` (empty when nothing volatile differs)."""
        return ", ".join(f"{n} {kind}{'s' if n != 1 else ''}"
                         for kind, n in sorted(self.volatile.items()))


#: The side of a real difference where a JSON member is not (added or
#: removed): shown as it is, unquoted.
ABSENT = "(absent)"


class _Tally:
    def __init__(self, window: tuple[float | None, float]) -> None:
        self.window = window
        self.volatile: Counter[str] = Counter()
        self.examples: list[tuple[str, str, str]] = []
        self.real: list[tuple[str, str, str]] = []
        self.real_count = 0

    def expected(self, kind: str, where: str, recorded: str, replayed: str) -> None:
        self.volatile[kind] += 1
        if len(self.examples) < MAX_LISTED:
            self.examples.append((where, _short(recorded), _short(replayed)))

    def differs(self, where: str, recorded: str, replayed: str) -> None:
        self.real_count += 1
        if len(self.real) < MAX_LISTED:
            self.real.append((where, _short(recorded), _short(replayed)))

    def result(self) -> VolatileComparison:
        return VolatileComparison(dict(self.volatile), tuple(self.examples), tuple(self.real),
                                  self.real_count)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def compare_volatile(recorded: bytes, replayed: bytes, *, since: float | None = None,
                     until: float | None = None) -> VolatileComparison:
    """Compare two texts (a file's bytes after the recording and after the
    replay, or two stdouts), setting timestamps and timings aside.

    A timestamp only counts as a clock reading when it parses (ISO 8601 /
    RFC 3339, RFC 2822, Common Log Format, epoch s/ms/ns) and falls between
    ``since`` and ``until`` (epoch seconds; the recording's start and now),
    each widened by a day for time zones: a birthday or a due date that
    changed is a real difference. Equal bytes give an empty, ``same``
    comparison. Binary data (not UTF-8, or holding NUL) that differs is one
    real difference.
    """
    tally = _Tally((None if since is None else since - _DAY,
                    (time.time() if until is None else until) + _DAY))
    if recorded == replayed:
        return tally.result()
    if not (is_text(recorded) and is_text(replayed)):
        tally.differs("bytes", f"{len(recorded)} bytes", f"{len(replayed)} bytes")
        return tally.result()
    rec_doc, rep_doc = parse(recorded), parse(replayed)
    if rec_doc is not None and rep_doc is not None:
        _json(rec_doc.value, rep_doc.value, "", tally)
        return tally.result()
    _lines(recorded.split(b"\n"), replayed.split(b"\n"), tally)
    return tally.result()


def line_count(text: bytes) -> str:
    """How many lines ``text`` holds, in words: ``no lines``, ``1 line``,
    ``3 lines`` (a last line without a newline counts)."""
    count = text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)
    return "no lines" if count == 0 else f"{count} line{'s' if count != 1 else ''}"


def _lines(recorded: list[bytes], replayed: list[bytes], tally: _Tally) -> None:
    if len(recorded) != len(replayed):
        tally.differs("lines", line_count(b"\n".join(recorded)),
                      line_count(b"\n".join(replayed)))
        return
    for number, (a, b) in enumerate(zip(recorded, replayed, strict=True), start=1):
        if a == b:
            continue
        where = f"line {number}"
        doc_a, doc_b = (parse(a), parse(b)) if a.strip() and b.strip() else (None, None)
        if doc_a is not None and doc_b is not None:
            _json(doc_a.value, doc_b.value, where, tally)
        else:
            _text(a, b, where, tally)


def _text(a: bytes, b: bytes, where: str, tally: _Tally) -> None:
    region = differing_region(a, b)
    if region is None:
        return
    for part, token in classified(a, b, split(a, b, region)):
        shown_a = _range_text(a, token.recorded, part.rec_start, part.rec_end)
        shown_b = _range_text(b, token.live, part.live_start, part.live_end)
        if (token.kind is SpanKind.TIMESTAMP and _clock_reading(tally.window, shown_a)
                and _clock_reading(tally.window, shown_b)):
            tally.expected("timestamp", where, shown_a, shown_b)
        elif (token.kind is SpanKind.NUMBER and token.recorded and token.live
              and _UNIT.match(a, token.recorded[1]) and _UNIT.match(b, token.live[1])):
            tally.expected("duration", where, shown_a, shown_b)
        elif token.kind is SpanKind.OTHER:
            # (plain text: whole words, not the bytes between a shared
            # prefix and suffix, ``hello [rc=0]`` and not ``hello [rc=0``)
            tally.differs(where, _word_text(a, *(token.recorded or (part.rec_start, part.rec_end))),
                          _word_text(b, *(token.live or (part.live_start, part.live_end))))
        else:
            tally.differs(where, shown_a, shown_b)


def _word_text(data: bytes, start: int, end: int) -> str:
    """``data[start:end]`` widened to whitespace (or the text's ends) on
    both sides."""
    while start > 0 and not data[start - 1:start].isspace():
        start -= 1
    while end < len(data) and not data[end:end + 1].isspace():
        end += 1
    return data[start:end].decode("utf-8", "replace")


def _range_text(data: bytes, token: tuple[int, int] | None, start: int, end: int) -> str:
    low, high = token if token is not None else (start, end)
    return data[low:high].decode("utf-8", "replace")


def _json(a: object, b: object, prefix: str, tally: _Tally) -> None:
    for change in diff(a, b):
        where = " ".join(p for p in (prefix, pointer(change.path) or "/") if p)
        if change.change is Change.ADDED:
            tally.differs(where, ABSENT, _scalar_text(at(b, change.live_path)))
            continue
        if change.change is Change.REMOVED:
            tally.differs(where, _scalar_text(at(a, change.recorded_path)), ABSENT)
            continue
        if change.change is not Change.CHANGED:
            tally.differs(where, "member order", "member order")
            continue
        old, new = at(a, change.recorded_path), at(b, change.live_path)
        name = change.live_path[-1] if change.live_path else ""
        _scalar(old, new, name, where, tally)


def _scalar(old: object, new: object, name: str, where: str, tally: _Tally) -> None:
    if isinstance(old, str) and isinstance(new, str):
        inner = _Tally(tally.window)
        _text(old.encode(), new.encode(), where, inner)
        if inner.real_count == 0 and inner.volatile:
            tally.expected("timestamp" if inner.volatile["timestamp"] else "duration",
                           where, old, new)
        else:
            tally.differs(where, old, new)
        return
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new))
    if numbers and name and not name.isdigit() and DURATION_NAME.search(name):
        tally.expected("duration", where, _scalar_text(old), _scalar_text(new))
        return
    shown_old, shown_new = _scalar_text(old), _scalar_text(new)
    # An epoch time (s, ms, us or ns) in a member of any name.
    if (
        numbers
        and _clock_reading(tally.window, shown_old)
        and _clock_reading(tally.window, shown_new)
    ):
        tally.expected("timestamp", where, shown_old, shown_new)
        return
    tally.differs(where, shown_old, shown_new)


def _scalar_text(value: object) -> str:
    if isinstance(value, (JsonObject, list)):
        return "{...}" if isinstance(value, JsonObject) else "[...]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: What a learned rule's values are called in an outcome summary.
_LEARNED_KIND = {"ids": "id", "clock": "clock reading", "key-order": "key order",
                 "durations": "duration"}


def equal_up_to(recorded: bytes, replayed: bytes, learned: Learned) -> VolatileComparison | None:
    """Two texts (a file, stdout) the same up to what a replay ``learned``
    (matching.correspond: the identifier bijection, the clock shift, key
    order): a ``same`` comparison naming the values by kind (``id``,
    ``clock reading``, ``key order``), and ``learned`` extended by what
    they hold; None (``learned`` untouched) when a real difference remains
    or a side is not UTF-8."""
    try:
        old, new = recorded.decode("utf-8"), replayed.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = correspond.compare(old, new, learned)
    if not found.equivalent:
        return None
    learned.hold(found.learned)
    counts = Counter(_LEARNED_KIND[rule.value] for rule, *_ in found.fired)
    examples = tuple((where, _short(rec), _short(live))
                     for _, where, rec, live in found.fired[:MAX_LISTED])
    return VolatileComparison(dict(counts), examples, (), 0)
