"""A run's timeline: one row per exchange, in sequence order, with its
offset from the run's start, time to first byte, duration, model, stop
reason, tokens, a text excerpt and the tool calls it asked for, beside what
``show`` always listed (method, target, status, frames, bytes, ending).

Pure over a run's metadata, its exchanges and their views. Knows nothing of
the CLI, HTML or run files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from wiretape.inspect.formats import ExchangeView
from wiretape.model import TOOL_ORIGIN_PREFIX, Exchange, RunInfo, header_value

_EXCERPT = 80


class TimelineRowJSON(TypedDict):
    """A TimelineRow in ``show --json``: each field under its name."""

    seq: int
    method: str
    target: str
    origin: str
    status: int | None
    offset_ns: int
    ttfb_ns: int | None
    duration_ns: int
    frames: int
    bytes: int
    streamed: bool
    ending: str
    format: str
    model: str | None
    stop_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    excerpt: str
    tool_calls: list[str]
    error: str | None


@dataclass(frozen=True)
class TimelineRow:
    seq: int
    method: str
    target: str
    origin: str
    status: int | None
    offset_ns: int
    ttfb_ns: int | None
    duration_ns: int
    frames: int
    bytes: int
    streamed: bool
    ending: str
    format: str
    model: str | None
    stop_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    excerpt: str
    tool_calls: tuple[str, ...]
    error: str | None

    def to_json(self) -> TimelineRowJSON:
        return {
            "seq": self.seq, "method": self.method, "target": self.target,
            "origin": self.origin, "status": self.status, "offset_ns": self.offset_ns,
            "ttfb_ns": self.ttfb_ns, "duration_ns": self.duration_ns, "frames": self.frames,
            "bytes": self.bytes, "streamed": self.streamed, "ending": self.ending,
            "format": self.format, "model": self.model, "stop_reason": self.stop_reason,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens, "excerpt": self.excerpt,
            "tool_calls": list(self.tool_calls), "error": self.error,
        }


def tool_label(exchange: Exchange) -> str:
    """A tool exchange (``--tools``) named by its method and URL:
    ``GET https://docs.example.com/page``."""
    return (f"{exchange.request.method.decode('latin-1')} "
            f"{tool_url(exchange.origin, exchange.request.target.decode('latin-1'))}")


def tool_url(origin: str, target: str) -> str:
    """A tool exchange's URL: its origin's (``tool:https://host``) and its
    target."""
    return origin.removeprefix(TOOL_ORIGIN_PREFIX) + target


def excerpt(text: str, n: int = _EXCERPT) -> str:
    """The first ``n`` characters of ``text`` on one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def run_start(info: RunInfo, exchanges: Sequence[Exchange]) -> int:
    """The instant offsets count from: the run's start, or its first
    exchange when that came earlier (an imported run, a skewed clock)."""
    starts = [e.started_at_ns for e in exchanges]
    candidates = [info.started_at_ns] if info.started_at_ns > 0 else []
    return min(candidates + starts) if candidates or starts else 0


def _streamed(exchange: Exchange) -> bool:
    resp = exchange.response
    if resp is None:
        return False
    ctype = header_value(resp.headers, b"content-type") or b""
    chunked = header_value(resp.headers, b"transfer-encoding") is not None
    return b"event-stream" in ctype or (chunked and len(resp.frames) > 1)


def row(exchange: Exchange, view: ExchangeView, start_ns: int) -> TimelineRow:
    resp, rview = exchange.response, view.response
    usage = rview.usage if rview else None
    error = exchange.error
    if rview is not None and rview.errors:
        error = rview.errors[0].message
    text = ""
    if rview is not None:
        text = rview.text or (f"[reasoning] {rview.reasoning}" if rview.reasoning else "")
        if not text and rview.vectors is not None:
            text = f"{rview.vectors} vector(s) of {rview.dimensions} dimensions"
    return TimelineRow(
        seq=exchange.seq, method=exchange.request.method.decode("latin-1"),
        target=exchange.request.target.decode("latin-1"), origin=exchange.origin,
        status=resp.status if resp else None,
        offset_ns=max(0, exchange.started_at_ns - start_ns), ttfb_ns=exchange.ttfb_ns,
        duration_ns=exchange.duration_ns, frames=len(resp.frames) if resp else 0,
        bytes=(len(resp.body) if resp else 0) + sum(len(m.payload) for m in exchange.messages),
        streamed=_streamed(exchange) or view.session,
        ending=exchange.ending.value, format=rview.format if rview else view.request.format,
        model=view.model, stop_reason=rview.stop_reason if rview else None,
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        total_tokens=usage.total if usage else None,
        excerpt=excerpt(text), tool_calls=tuple(c.name for c in rview.tool_calls) if rview else (),
        error=excerpt(error, 120) if error else None,
    )


def timeline(info: RunInfo, exchanges: Sequence[Exchange],
             views: Sequence[tuple[int, ExchangeView]]) -> list[TimelineRow]:
    start = run_start(info, exchanges)
    by_seq = dict(views)
    return [row(e, by_seq[e.seq], start) for e in exchanges]
