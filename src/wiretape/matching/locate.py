"""Where values named by paths lie in a JSON text, as byte ranges.

Owns one scan of the text that follows only the wanted paths: at each
object or array on the way it reads member names and skips every other
value with the C decoder (``JSONDecoder.raw_decode``), so locating a few
values in 1 MB costs about one parse. Compact and pretty JSON alike, any
insignificant whitespace (RFC 8259 §2). Knows nothing of differences,
kinds or providers; the text has already parsed, so a failure here only
leaves paths unlocated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

from wiretape.matching.jsontree import Path

_DECODER = json.JSONDecoder()
#: The decoder's C scanner: (text, index of a value) -> (value, index after
#: it); raises StopIteration on bad input. Not in the type stubs.
_scan_once: Callable[[str, int], tuple[object, int]]
_scan_once = _DECODER.scan_once  # type: ignore[attr-defined]
#: CPython's string scanner (json/decoder.py, C-accelerated): (text, index
#: after the opening quote) -> (string, index after the closing quote). Not
#: in the type stubs.
_scanstring: Callable[[str, int], tuple[str, int]]
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
#: Insignificant whitespace (RFC 8259 §2); the pattern matches everywhere,
#: so its match is never None.
_ws: Callable[[str, int], re.Match[str]]
_ws = re.compile(r"[ \t\n\r]*").match  # type: ignore[assignment]

Trie = dict[str, "Trie"]


def _trie(paths: Iterable[Path]) -> Trie:
    root: Trie = {}
    for path in paths:
        node = root
        for token in path:
            node = node.setdefault(token, {})
    return root


class _Done(Exception):
    """Every wanted path is located: the rest of the text is not read."""


class _Scan:
    """One pass over ``text``, entering only the containers on a wanted
    path. Hot loops are written out: a 1 MB history has thousands of
    elements to step over."""

    def __init__(self, text: str, wanted: set[Path]) -> None:
        self.text = text
        self.found: dict[Path, tuple[int, int]] = {}
        self.wanted = wanted
        self.missing = len(wanted)

    def value(self, i: int, node: Trie, path: Path) -> int:
        text = self.text
        i = _ws(text, i).end()
        opener = text[i : i + 1]
        if node and opener == "{":
            end = self.object(i, node, path)
        elif node and opener == "[":
            end = self.array(i, node, path)
        else:
            end = _scan_once(text, i)[1]
        self.found[path] = (i, end)
        if path in self.wanted:
            self.missing -= 1
            if self.missing == 0:
                raise _Done
        return end

    def object(self, i: int, node: Trie, path: Path) -> int:
        text, ws, scan = self.text, _ws, _scan_once
        i = ws(text, i + 1).end()
        if text[i] == "}":
            return i + 1
        while True:
            key, i = _scanstring(text, i + 1)
            i = ws(text, i).end() + 1  # past ":"
            wanted = node.get(key)
            if wanted is None:
                i = scan(text, ws(text, i).end())[1]
            else:
                i = self.value(i, wanted, (*path, key))
            i = ws(text, i).end()
            if text[i] == "}":
                return i + 1
            i = ws(text, i + 1).end()  # past ","

    def array(self, i: int, node: Trie, path: Path) -> int:
        text, ws, scan = self.text, _ws, _scan_once
        wanted = {int(token): (token, child) for token, child in node.items() if token.isdigit()}
        i = ws(text, i + 1).end()
        if text[i] == "]":
            return i + 1
        index = 0
        while True:
            hit = wanted.get(index)
            i = scan(text, i)[1] if hit is None else self.value(i, hit[1], (*path, hit[0]))
            i = ws(text, i).end()
            if text[i] == "]":
                return i + 1
            i = ws(text, i + 1).end()  # past ","
            index += 1


def locate(text: str, paths: Iterable[Path]) -> dict[Path, tuple[int, int]]:
    """Character ranges ``[start, end)`` of the values at ``paths`` (and of
    the containers on the way that were read to the end) in ``text``. The
    scan stops once every path is found, so a member name repeated later
    (RFC 8259 §4 leaves its meaning open) is located at its first
    occurrence."""
    wanted = set(paths)
    scan = _Scan(text, wanted)
    try:
        scan.value(0, _trie(wanted), ())
    except _Done:
        pass
    except (ValueError, IndexError, StopIteration, RecursionError):
        pass  # leave what was found; the caller falls back for the rest
    return scan.found


class ByteOffsets:
    """Character index to byte offset in the UTF-8 encoding of ``text``;
    the identity for ASCII text (``json.dumps`` writes ASCII by default)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ascii = text.isascii()
        self._memo: dict[int, int] = {0: 0}

    def __call__(self, index: int) -> int:
        if self.ascii:
            return index
        if index not in self._memo:
            base = max(k for k in self._memo if k <= index)
            self._memo[index] = self._memo[base] + len(self.text[base:index].encode("utf-8"))
        return self._memo[index]


def follow_shift(
    recorded: str, live: str, values: list[tuple[Path, tuple[int, int]]]
) -> dict[Path, tuple[int, int]] | None:
    """Recorded ranges of values already located in ``live``, without a
    scan: when each value replaces the one at the same path (no member
    added, removed or reordered) and the text between them is the same on
    both sides, the parser is in the same place on both sides at each
    value, so a recorded value starts where the live one does, shifted by
    the length differences so far. ``values`` are (recorded path, live
    range) in document order. None when the texts between differ."""
    out: dict[Path, tuple[int, int]] = {}
    rec_at = live_at = 0
    for path, (start, end) in values:
        rec_start = rec_at + start - live_at
        if start < live_at or recorded[rec_at:rec_start] != live[live_at:start]:
            return None
        try:
            rec_end = _scan_once(recorded, rec_start)[1]
        except (StopIteration, ValueError, RecursionError):
            return None
        out[path] = (rec_start, rec_end)
        rec_at, live_at = rec_end, end
    return out
