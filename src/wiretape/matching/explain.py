"""Explain how a live request differs from a recorded one (DESIGN.md,
"Divergence report").

Pure: two requests (and the recorded responses, to name tools) in, an
``Explanation`` out; no sockets, no clock, no disk, never an exception for
odd bodies. Owns only the assembly: the request line and headers
(``headers``), the body's spans (``spans``), byte count and edit distance
(``regions``), and the first line (``report``). Knows nothing of the replay
decision or of how an explanation is printed.
"""

from __future__ import annotations

from collections.abc import Sequence

from wiretape.matching.headers import (
    DEFAULT_SEMANTIC_HEADERS,
    header_differences,
    request_line_differences,
)
from wiretape.matching.regions import differing_region, edit_distance
from wiretape.matching.report import Explanation, first_line, kind_summary
from wiretape.matching.spans import BodySpans, body_spans
from wiretape.model import Request, Response


def explain(
    recorded: Request,
    live: Request,
    *,
    recorded_responses: Sequence[Response] = (),
    semantic_headers: Sequence[bytes] = DEFAULT_SEMANTIC_HEADERS,
) -> Explanation:
    """How ``live`` differs from ``recorded``: method, target, headers
    (semantic ones apart) and the body's differing spans, each with its
    JSON pointer, kind, text and the tool result it lies in.
    ``recorded_responses`` (the responses of the recorded exchanges, as
    stored) are read only to name the tool behind a call id."""
    method, target = request_line_differences(recorded, live)
    headers = header_differences(recorded, live, semantic_headers)
    region = differing_region(recorded.body, live.body)
    found = (
        BodySpans((), 0)
        if region is None
        else body_spans(recorded.body, live.body, region, recorded_responses)
    )
    distance, capped = edit_distance(recorded.body, live.body, region)
    # Bytes that differ: the spans' own bytes when every span is listed (a
    # boundary change in four places counts four tokens, not the region
    # from the first to the last); else the whole differing region.
    listed = sum(span.bytes_differ for span in found.spans)
    whole = 0 if region is None else region.size
    return Explanation(
        bytes_differ=listed if found.spans and not found.omitted else whole,
        edit_distance=distance,
        edit_distance_capped=capped,
        spans=found.spans,
        spans_omitted=found.omitted,
        kind_summary=kind_summary(found.spans),
        target_differs=target,
        method_differs=method,
        header_differences=headers,
        first_line=first_line(found.spans, target, method, headers),
    )
