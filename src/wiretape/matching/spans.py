"""The differing spans of two bodies: by JSON value when both are JSON,
else by bytes.

Owns the walk from differences to spans: which value changed (a JSON
pointer), where it starts in the live body, its kind, its text and context,
and the tool result it lies in. Both bodies JSON: one span per differing
value (split further when a long string differs in separate places).
Otherwise, or when the trees are equal and only the bytes differ (spacing,
escapes): spans of bytes, the first at the exact first differing byte.
Knows nothing of headers or of the request line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from wiretape.matching.elements import describe
from wiretape.matching.excerpt import context, show, trim
from wiretape.matching.jsontree import (
    Change,
    ParsedJson,
    Path,
    TreeChange,
    at,
    diff,
    parse,
    pointer,
)
from wiretape.matching.kinds import SpanKind, Token, classify, embedded
from wiretape.matching.locate import ByteOffsets, follow_shift, locate
from wiretape.matching.regions import Region, differing_region, split, whitespace_regions
from wiretape.matching.report import Span, ToolRef
from wiretape.matching.toolcalls import CallNames
from wiretape.matching.toolresults import tool_result_at
from wiretape.model import Response

#: Spans listed at most; the rest are counted.
MAX_SPANS = 20


@dataclass(frozen=True)
class BodySpans:
    spans: tuple[Span, ...]
    omitted: int


def body_spans(
    recorded: bytes, live: bytes, region: Region, responses: Sequence[Response]
) -> BodySpans:
    """The spans of the differing ``region`` of two bodies."""
    rec_json, live_json = parse(recorded), parse(live)
    if rec_json is not None and live_json is not None:
        try:
            changes = diff(rec_json.value, live_json.value)
        except RecursionError:
            changes = []
        if changes:
            return _JsonSpans(recorded, live, rec_json, live_json, responses).spans(changes, region)
    return _byte_spans(recorded, live, region)


def _overlap(first: tuple[int, int] | None, second: tuple[int, int] | None) -> bool:
    return first is not None and second is not None and second[0] < first[1]


def classified(
    recorded: bytes, live: bytes, regions: Sequence[Region]
) -> list[tuple[Region, Token]]:
    """Each region with its token; regions whose tokens overlap (two edits
    in one path or id) become one and are classified again."""
    out: list[tuple[Region, Token]] = []
    for region in regions:
        token = classify(recorded, live, region)
        while out and (
            _overlap(out[-1][1].recorded, token.recorded) or _overlap(out[-1][1].live, token.live)
        ):
            region = out.pop()[0].union(region)
            token = classify(recorded, live, region)
        out.append((region, token))
    return out


def _text_span(
    recorded: bytes,
    live: bytes,
    region: Region,
    token: Token,
    *,
    offset: int,
    pointer: str | None,
    tool: ToolRef | None = None,
) -> Span:
    rec = token.recorded or (region.rec_start, region.rec_end)
    liv = token.live or (region.live_start, region.live_end)
    return Span(
        pointer=pointer,
        offset=offset,
        recorded=show(recorded, *rec),
        live=show(live, *liv),
        recorded_context=context(recorded, *rec),
        live_context=context(live, *liv),
        kind=str(token.kind),
        bytes_differ=region.size,
        tool=tool,
    )


def _byte_spans(recorded: bytes, live: bytes, region: Region) -> BodySpans:
    regions = whitespace_regions(recorded, live, region) or split(recorded, live, region)
    considered = regions[: 2 * MAX_SPANS]
    found = classified(recorded, live, considered)
    spans = tuple(
        _text_span(recorded, live, r, token, offset=r.live_start, pointer=None)
        for r, token in found[:MAX_SPANS]
    )
    return BodySpans(spans, max(0, len(found) - MAX_SPANS) + len(regions) - len(considered))


def _inside_quotes(data: bytes, start: int, end: int) -> tuple[int, int]:
    if end - start >= 2 and data[start] == 0x22 and data[end - 1] == 0x22:
        return start + 1, end - 1
    return start, end


class _JsonSpans:
    """Spans of tree changes: one scan of the live text locates them, and
    of the recorded text too unless ``follow_shift`` can do without."""

    def __init__(
        self,
        recorded: bytes,
        live: bytes,
        rec_json: ParsedJson,
        live_json: ParsedJson,
        responses: Sequence[Response],
    ) -> None:
        self.recorded, self.live = recorded, live
        self.rec_json, self.live_json = rec_json, live_json
        self.names = CallNames(responses, (live_json.value, rec_json.value))
        self.unshown = 0

    def spans(self, changes: list[TreeChange], region: Region) -> BodySpans:
        shown = changes[:MAX_SPANS]
        live_chars = locate(self.live_json.text, {c.live_path for c in shown})
        rec_chars = self._follow(shown, live_chars) or locate(
            self.rec_json.text, {c.recorded_path for c in shown}
        )
        rec_bytes, live_bytes = ByteOffsets(self.rec_json.text), ByteOffsets(self.live_json.text)
        spans: list[Span] = []
        for change in shown:
            if len(spans) >= MAX_SPANS:
                self.unshown += 1
                continue
            rr, lr = rec_chars.get(change.recorded_path), live_chars.get(change.live_path)
            if rr is None or lr is None:
                # Not expected for parsed JSON; say where the bytes differ.
                found = _byte_spans(self.recorded, self.live, region).spans[:1]
                spans.extend(replace(s, pointer=pointer(change.path)) for s in found)
                continue
            located = Region(
                rec_bytes(rr[0]), rec_bytes(rr[1]), live_bytes(lr[0]), live_bytes(lr[1])
            )
            spans.extend(self._change(change, located, room=MAX_SPANS - len(spans)))
        omitted = len(changes) - len(shown) + self.unshown + max(0, len(spans) - MAX_SPANS)
        return BodySpans(tuple(spans[:MAX_SPANS]), omitted)

    def _follow(
        self, shown: list[TreeChange], live_chars: dict[Path, tuple[int, int]]
    ) -> dict[Path, tuple[int, int]] | None:
        """The recorded ranges without a second scan, when every change
        replaces one value (see ``follow_shift``)."""
        if any(c.change is not Change.CHANGED or c.live_path not in live_chars for c in shown):
            return None
        ordered = sorted(
            ((c.recorded_path, live_chars[c.live_path]) for c in shown), key=lambda item: item[1]
        )
        return follow_shift(self.rec_json.text, self.live_json.text, ordered)

    def _tool(self, change: TreeChange) -> ToolRef | None:
        tree = self.rec_json.value if change.change is Change.REMOVED else self.live_json.value
        result = tool_result_at(tree, change.path)
        if result is None:
            return None
        name = result.name or (self.names.get(result.call_id) if result.call_id else None)
        return ToolRef(result.call_id, name, pointer(result.path))

    def _change(self, change: TreeChange, where: Region, room: int) -> list[Span]:
        """``where`` holds the value's byte range on each side (the parent's
        on the side where an added or removed value is absent)."""
        a, b, here, tool = self.recorded, self.live, pointer(change.path), self._tool(change)
        if change.change is Change.KEY_ORDER:
            return [self._key_order(change, where, here, tool)]
        if change.change is Change.ADDED:
            value = Region(
                where.rec_start,
                where.rec_start,
                *_inside_quotes(b, where.live_start, where.live_end),
            )
            token = classify(a, b, value, recorded_absent=True)
            live = token.live or (value.live_start, value.live_end)
            return [
                Span(
                    here,
                    where.live_start,
                    "",
                    show(b, *live),
                    "",
                    context(b, *live),
                    str(token.kind),
                    where.live_end - where.live_start,
                    tool,
                    "added",
                    self._element(self.live_json.value, change.live_path),
                )
            ]
        if change.change is Change.REMOVED:
            value = Region(
                *_inside_quotes(a, where.rec_start, where.rec_end),
                where.live_start,
                where.live_start,
            )
            token = classify(a, b, value, live_absent=True)
            rec = token.recorded or (value.rec_start, value.rec_end)
            return [
                Span(
                    here,
                    where.live_start,
                    show(a, *rec),
                    "",
                    context(a, *rec),
                    "",
                    str(token.kind),
                    where.rec_end - where.rec_start,
                    tool,
                    "removed",
                    self._element(self.rec_json.value, change.recorded_path),
                )
            ]
        # A JSON document carried in a string: each value inside that differs.
        inside = embedded(a, b, where)
        if inside is not None:
            return [_text_span(a, b, r, token, offset=where.live_start,
                               pointer=here + token.inner, tool=tool) for r, token in inside]
        # A long string that differs all through splits into many regions:
        # only those that can still be listed are classified.
        regions = split(a, b, _differing(a, b, where), refine=room)
        considered = regions[: room + 1]
        self.unshown += len(regions) - len(considered)
        return [
            _text_span(a, b, r, token, offset=where.live_start, pointer=here, tool=tool)
            for r, token in classified(a, b, considered)
        ]

    @staticmethod
    def _element(tree: object, path: Path) -> str | None:
        """An added or removed array element in a few words (None for a member)."""
        return describe(at(tree, path)) if path and path[-1].isdigit() else None

    def _key_order(
        self, change: TreeChange, where: Region, here: str, tool: ToolRef | None
    ) -> Span:
        def names(tree: object, path: tuple[str, ...]) -> str:
            found = at(tree, path)
            keys = [key for key, _ in found] if isinstance(found, tuple) else []
            return trim(", ".join(keys))

        differing = _differing(self.recorded, self.live, where)
        return Span(
            here,
            where.live_start,
            names(self.rec_json.value, change.recorded_path),
            names(self.live_json.value, change.live_path),
            context(self.recorded, differing.rec_start, differing.rec_end),
            context(self.live, differing.live_start, differing.live_end),
            str(SpanKind.KEY_ORDER),
            differing.size,
            tool,
        )


def _differing(a: bytes, b: bytes, where: Region) -> Region:
    return differing_region(a, b, where) or Region(
        where.rec_start, where.rec_start, where.live_start, where.live_start
    )
