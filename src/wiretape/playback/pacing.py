"""When each part of a replayed response is written. Pure.

``fast`` writes every recorded frame as its own write, with no waiting;
``recorded`` keeps the recorded offsets (scaled), measured from the moment
the request was complete.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class Pace(enum.StrEnum):
    FAST = "fast"
    RECORDED = "recorded"


def schedule(
    ttfb_ns: int | None, frame_offsets_ns: Sequence[int], pace: Pace, scale: float = 1.0
) -> tuple[int, tuple[int, ...]]:
    """(when to send the head, when to send each frame), ns after the request.

    Offsets never go backwards, so a frame is never written before the one
    that preceded it when recorded.
    """
    if pace is Pace.FAST:
        return 0, tuple(0 for _ in frame_offsets_ns)
    head = int((ttfb_ns or 0) * scale)
    out, last = [], head
    for offset in frame_offsets_ns:
        last = max(last, int(offset * scale))
        out.append(last)
    return head, tuple(out)
