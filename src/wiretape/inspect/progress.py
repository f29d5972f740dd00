"""Progress for long operations (large imports, exports, reports): one line
on a terminal, redrawn in place at most every ``interval`` seconds, and
nothing at all when the stream is not a terminal (a pipe, a file, CI).

Owns the line's text and when to draw it. The clock and the stream are
passed in, so it is tested without a terminal. Knows nothing of what the
work is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    """``advance()`` after each unit of work, ``close()`` at the end."""

    def __init__(self, label: str, total: int | None, stream: TextIO | None, *,
                 interval: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream if stream is not None and _is_terminal(stream) else None
        self._interval = interval
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None

    @classmethod
    def on_stderr(cls, label: str, total: int | None) -> Progress:
        return cls(label, total, sys.stderr)

    def set_total(self, total: int) -> None:
        self.total = total

    @property
    def active(self) -> bool:
        return self._stream is not None

    def line(self) -> str:
        elapsed = max(self._clock() - self._started, 1e-9)
        if self.total:
            share = min(self.done / self.total, 1.0)
            bar = "#" * int(share * 20)
            head = f"{self.label} [{bar:<20}] {self.done}/{self.total} ({share:.0%})"
        else:
            head = f"{self.label} {self.done}"
        return f"{head}, {self.done / elapsed:.0f}/s"

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._stream is None:
            return
        now = self._clock()
        if self._drawn_at is None or now - self._drawn_at >= self._interval:
            self._draw()
            self._drawn_at = now

    def _draw(self) -> None:
        assert self._stream is not None
        self._stream.write("\r\x1b[2K" + self.line())
        self._stream.flush()

    def close(self) -> None:
        """Draw the final count and end the line (only if anything was drawn)."""
        if self._stream is not None and self._drawn_at is not None:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
