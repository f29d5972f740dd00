"""Byte regions where two bodies differ, and their edit distance.

Owns: the differing middle of two byte strings (between their common
prefix and suffix, found by ``wiretape.commonbytes``), its split into
separate regions, regions that differ only in whitespace, and the
Levenshtein distance. Knows nothing of JSON, HTTP, kinds or how a region
is shown.

A region is a pair of half-open ranges, one in the recorded bytes and one
in the live bytes; either range may be empty (an insertion or a deletion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from rapidfuzz.distance import Levenshtein

from wiretape.commonbytes import common_prefix, common_suffix

#: Byte-level alignment (rapidfuzz opcodes, O(n*m/64)) is used on a region
#: only when the product of its two lengths is at most this (~2 ms).
ALIGN_LIMIT = 1 << 24
#: Differences separated by fewer equal bytes than this are one region: a
#: random token against another shares a few bytes by chance.
MERGE_GAP = 8
#: The edit distance is computed up to this value; above it, it is capped.
EDIT_DISTANCE_CAP = 1024
#: Cutoffs tried in turn. Below 32, rapidfuzz's band fits one machine word
#: and 1 MB takes ~5 ms; any larger cutoff costs ~30-40 ms. Most divergences
#: are a few edits, so the narrow try usually settles it.
EDIT_DISTANCE_STEPS = (31, EDIT_DISTANCE_CAP)
#: Bodies whose differing middles together exceed this get no edit distance.
EDIT_DISTANCE_MAX_BYTES = 8 << 20

#: JSON's insignificant whitespace (RFC 8259 §2), also HTTP's and most text's.
_WHITESPACE = b" \t\r\n"
_WHITESPACE_RUN = re.compile(rb"[" + _WHITESPACE + rb"]+")
#: Separators tried, in order, to cut a region too large to align into
#: pieces that difflib can match (lines first, then JSON members).
_PIECE_PATTERNS = (re.compile(rb"[^\n]*\n|[^\n]+"), re.compile(rb"[^,]*,|[^,]+"))


@dataclass(frozen=True)
class Region:
    """``recorded[rec_start:rec_end]`` became ``live[live_start:live_end]``."""

    rec_start: int
    rec_end: int
    live_start: int
    live_end: int

    @property
    def size(self) -> int:
        """Bytes that differ: the longer of the two sides."""
        return max(self.rec_end - self.rec_start, self.live_end - self.live_start)

    def union(self, other: Region) -> Region:
        return Region(
            min(self.rec_start, other.rec_start),
            max(self.rec_end, other.rec_end),
            min(self.live_start, other.live_start),
            max(self.live_end, other.live_end),
        )


def differing_region(a: bytes, b: bytes, within: Region | None = None) -> Region | None:
    """The region between the common prefix and the common suffix (of the
    whole bodies, or of the two ranges of ``within``); None when equal."""
    a0, a1, b0, b1 = (
        (0, len(a), 0, len(b))
        if within is None
        else (within.rec_start, within.rec_end, within.live_start, within.live_end)
    )
    if a[a0:a1] == b[b0:b1]:
        return None
    prefix = common_prefix(a, b, a0, b0, limit=min(a1 - a0, b1 - b0))
    suffix = common_suffix(a, b, a1, b1, limit=min(a1 - a0, b1 - b0) - prefix)
    return Region(a0 + prefix, a1 - suffix, b0 + prefix, b1 - suffix)


def _merge_close(regions: list[Region], gap: int) -> list[Region]:
    merged: list[Region] = []
    for region in regions:
        if merged and (
            region.rec_start - merged[-1].rec_end < gap
            or region.live_start - merged[-1].live_end < gap
        ):
            merged[-1] = merged[-1].union(region)
        else:
            merged.append(region)
    return merged


def _aligned(a: bytes, b: bytes, region: Region) -> list[Region]:
    """Split a small region by Levenshtein alignment (rapidfuzz opcodes)."""
    ops = Levenshtein.opcodes(
        a[region.rec_start : region.rec_end], b[region.live_start : region.live_end]
    )
    found = [
        Region(
            region.rec_start + op.src_start,
            region.rec_start + op.src_end,
            region.live_start + op.dest_start,
            region.live_start + op.dest_end,
        )
        for op in ops
        if op.tag != "equal"
    ]
    return _merge_close(found, MERGE_GAP) or [region]


def _pieces(
    data: bytes, start: int, end: int, pattern: re.Pattern[bytes]
) -> tuple[list[bytes], list[int]]:
    pieces, starts = [], []
    for m in pattern.finditer(data, start, end):
        pieces.append(m.group())
        starts.append(m.start())
    starts.append(end)
    return pieces, starts


def _by_pieces(a: bytes, b: bytes, region: Region, refine: int) -> list[Region] | None:
    """Split a large region by matching whole pieces (lines, then members)
    with difflib, then align the first ``refine`` changed blocks byte by
    byte. None when the pieces in common are under half the region (data
    with no lines, or nothing really in common)."""
    for pattern in _PIECE_PATTERNS:
        pa, sa = _pieces(a, region.rec_start, region.rec_end, pattern)
        pb, sb = _pieces(b, region.live_start, region.live_end, pattern)
        if len(pa) < 2 and len(pb) < 2:
            continue
        opcodes = SequenceMatcher(None, pa, pb).get_opcodes()
        common = sum(sa[i2] - sa[i1] for tag, i1, i2, _, _ in opcodes if tag == "equal")
        if 2 * common < region.rec_end - region.rec_start:
            continue
        out: list[Region] = []
        for tag, i1, i2, j1, j2 in opcodes:
            if tag == "equal":
                continue
            block = differing_region(a, b, Region(sa[i1], sa[i2], sb[j1], sb[j2]))
            if block is None:
                continue
            out.extend(split(a, b, block, pieces=False) if len(out) < refine else [block])
        return _merge_close(out, 1)
    return None


def split(
    a: bytes, b: bytes, region: Region, *, pieces: bool = True, refine: int = 40
) -> list[Region]:
    """The separate differing regions inside ``region``, in order. Small
    regions are aligned byte by byte; large ones are cut into lines first
    (and only the first ``refine`` of those aligned further); what is still
    too large stays one region."""
    length_a, length_b = region.rec_end - region.rec_start, region.live_end - region.live_start
    if length_a == 0 or length_b == 0:
        return [region]
    found: list[Region] | None = None
    if length_a * length_b <= ALIGN_LIMIT:
        found = _aligned(a, b, region)
    elif pieces:
        found = _by_pieces(a, b, region, refine)
    if not found or _mostly_different(region, found):
        return [region]
    return found


def _mostly_different(whole: Region, parts: list[Region]) -> bool:
    """More bytes differ than are kept between the parts: text rewritten
    all through, whose pieces in common are chance, not structure."""
    differing = sum(part.size for part in parts)
    kept = whole.live_end - whole.live_start - sum(p.live_end - p.live_start for p in parts)
    return len(parts) > 1 and kept < differing


def whitespace_regions(a: bytes, b: bytes, region: Region) -> list[Region] | None:
    """When ``a`` and ``b`` differ only in runs of whitespace inside
    ``region``, the regions where the runs differ; else None."""
    mid_a, mid_b = a[region.rec_start : region.rec_end], b[region.live_start : region.live_end]
    if mid_a.translate(None, _WHITESPACE) != mid_b.translate(None, _WHITESPACE):
        return None
    runs_a = _runs_by_content_offset(a, region.rec_start, region.rec_end)
    runs_b = _runs_by_content_offset(b, region.live_start, region.live_end)
    # Walk both bodies in step by their non-whitespace offset: a run present
    # or different on one side only is a region.
    out: list[Region] = []
    removed_a = removed_b = 0
    for content_offset in sorted(runs_a.keys() | runs_b.keys()):
        ra, rb = runs_a.get(content_offset), runs_b.get(content_offset)
        if ra is not None and rb is not None and a[ra[0] : ra[1]] == b[rb[0] : rb[1]]:
            removed_a, removed_b = removed_a + ra[1] - ra[0], removed_b + rb[1] - rb[0]
            continue
        at_a = region.rec_start + content_offset + removed_a
        at_b = region.live_start + content_offset + removed_b
        end_a = ra[1] if ra is not None else at_a
        end_b = rb[1] if rb is not None else at_b
        out.append(Region(at_a, end_a, at_b, end_b))
        removed_a += end_a - at_a
        removed_b += end_b - at_b
    return out


def _runs_by_content_offset(data: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """Whitespace runs in ``data[start:end]`` keyed by the count of
    non-whitespace bytes before them."""
    runs: dict[int, tuple[int, int]] = {}
    removed = 0
    for m in _WHITESPACE_RUN.finditer(data, start, end):
        runs[m.start() - start - removed] = (m.start(), m.end())
        removed += m.end() - m.start()
    return runs


def edit_distance(a: bytes, b: bytes, region: Region | None) -> tuple[int | None, bool]:
    """(Levenshtein distance, capped) of the two bodies, computed on the
    differing middle only; above ``EDIT_DISTANCE_CAP`` the cap is returned
    with capped=True."""
    if region is None:
        return 0, False
    length_a, length_b = region.rec_end - region.rec_start, region.live_end - region.live_start
    if length_a + length_b > EDIT_DISTANCE_MAX_BYTES:
        return None, False
    if abs(length_a - length_b) > EDIT_DISTANCE_CAP:
        return EDIT_DISTANCE_CAP, True
    mid_a, mid_b = a[region.rec_start : region.rec_end], b[region.live_start : region.live_end]
    distance = EDIT_DISTANCE_CAP + 1
    for cutoff in EDIT_DISTANCE_STEPS:
        distance = Levenshtein.distance(mid_a, mid_b, score_cutoff=cutoff)
        if distance <= cutoff:
            return distance, False
    return EDIT_DISTANCE_CAP, True
