"""Values that cross between the parts of wiretape: requests, responses,
frames, exchanges, origins and run metadata.

Everything here is a frozen dataclass of bytes, ints and strings. Nothing
here knows about sockets, SQLite or the CLI. Header names and values are
kept as raw bytes in the order and case they crossed the wire.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

Header = tuple[bytes, bytes]
Headers = tuple[Header, ...]

#: The largest request body a proxy accepts unless told otherwise (bytes);
#: a larger one gets 413.
DEFAULT_MAX_BODY = 64 * 1024 * 1024


class Ending(enum.StrEnum):
    """How a recorded exchange ended (DESIGN.md, "The run file")."""

    COMPLETE = "complete"
    ORIGIN_RESET = "origin_reset"
    CLIENT_GONE = "client_gone"
    ORIGIN_UNREACHABLE = "origin_unreachable"
    TIMEOUT = "timeout"


def header_values(headers: Headers, name: bytes) -> list[bytes]:
    """All values of header ``name`` (case-insensitive), in wire order."""
    lname = name.lower()
    return [v for k, v in headers if k.lower() == lname]


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of header ``name`` (case-insensitive), or None."""
    values = header_values(headers, name)
    return values[0] if values else None


@dataclass(frozen=True)
class Request:
    """An HTTP request as it arrived at the proxy.

    ``target`` is the request-target (path and query, RFC 9112 §3.2);
    ``http_version`` is e.g. ``b"1.1"``; ``body`` is the whole body.
    """

    method: bytes
    target: bytes
    headers: Headers
    body: bytes
    http_version: bytes = b"1.1"

    @property
    def path(self) -> bytes:
        """The target without its query string."""
        return self.target.split(b"?", 1)[0]


@dataclass(frozen=True)
class Frame:
    """One piece of a response body as read from the origin.

    ``offset_ns`` is nanoseconds from the start of the request.
    """

    offset_ns: int
    data: bytes


@dataclass(frozen=True)
class Response:
    """An origin's response: status line, ordered raw headers, body frames.

    The frames concatenate to the body exactly as it came off the wire after
    de-chunking only (still compressed where ``Content-Encoding`` says so).
    """

    status: int
    reason: bytes
    headers: Headers
    frames: tuple[Frame, ...]
    http_version: bytes = b"1.1"

    @property
    def body(self) -> bytes:
        return b"".join(f.data for f in self.frames)


@dataclass(frozen=True)
class Exchange:
    """One request and its response as they crossed the proxy.

    ``seq`` is the order of request arrival (0-based) within the run;
    ``started_at_ns`` is wall-clock epoch ns; ``ttfb_ns`` and
    ``duration_ns`` are ns from the start of the request. ``response`` is
    None when the origin never answered (``ending`` says why).
    """

    seq: int
    connection_id: int
    origin: str
    started_at_ns: int
    request: Request
    response: Response | None
    ending: Ending
    ttfb_ns: int | None
    duration_ns: int
    error: str | None = None


@dataclass(frozen=True)
class Origin:
    """A model provider endpoint and the local port that stands for it.

    ``upstream`` is ``scheme://host[:port][/base-path]``; ``env_vars`` are
    the child's variables pointed at the proxy for this origin.
    """

    name: str
    upstream: str
    port: int
    env_vars: tuple[str, ...] = ()


@dataclass(frozen=True)
class Redaction:
    """A secret removed before it reached the disk.

    ``location`` is ``request-header``, ``response-header``, ``query`` or
    ``request-body``/``response-body``; ``name`` the header or parameter (or
    the key shape for bodies); ``fingerprint`` the first 8 hex digits of the
    secret's sha256, so two runs can be seen to use the same key.
    """

    location: str
    name: str
    fingerprint: str


@dataclass(frozen=True)
class RunInfo:
    """A run's metadata (DESIGN.md, "The run file")."""

    run_id: str
    wiretape_version: str
    argv: tuple[str, ...]
    cwd: str
    env_names: tuple[str, ...]
    origins: tuple[Origin, ...]
    started_at_ns: int
    ended_at_ns: int | None = None
    exit_status: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    mode: str = "record"
    extra: dict[str, str] = field(default_factory=dict)
    #: hosts whose TLS was intercepted (``--intercept``); empty otherwise
    intercept: tuple[str, ...] = ()
