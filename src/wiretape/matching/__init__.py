"""Comparing a live request with a recorded one, and explaining the
difference as a value (DESIGN.md, "Divergence report").

Pure: nothing here opens a socket, reads a clock or touches the disk.
"""

from wiretape.matching.explain import explain
from wiretape.matching.headers import DEFAULT_SEMANTIC_HEADERS
from wiretape.matching.kinds import SpanKind
from wiretape.matching.report import Explanation, HeaderDiff, Span, ToolRef

__all__ = [
    "DEFAULT_SEMANTIC_HEADERS",
    "Explanation",
    "HeaderDiff",
    "Span",
    "SpanKind",
    "ToolRef",
    "explain",
]
