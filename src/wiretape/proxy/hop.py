"""Hop-by-hop header handling (RFC 9110 §7.6.1) and response framing.

Pure functions over ordered raw header lists. A proxy removes the fields
named by ``Connection`` and the ones known to be hop-by-hop before it
forwards a message, and may replace ``Connection`` with its own options.
wiretape replaces ``Connection`` and ``Transfer-Encoding`` in place with its
own connection option and framing (same position, same case), so a client
sees the recorded header order whether it talks to the origin through the
recorder or to the replayer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from wiretape.model import Headers

#: Fields removed before forwarding whether or not Connection names them
#: (RFC 9110 §7.6.1; Proxy-Connection is the pre-standard form of Connection).
HOP_BY_HOP: frozenset[bytes] = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade",
     b"transfer-encoding"}
)


def connection_options(headers: Headers) -> set[bytes]:
    """Lower-case field names listed in Connection header values."""
    names: set[bytes] = set()
    for k, v in headers:
        if k.lower() in (b"connection", b"proxy-connection"):
            names.update(t.strip().lower() for t in v.split(b",") if t.strip())
    return names


def upstream_request_headers(headers: Headers, host: bytes,
                             body_length: int | None = None) -> Headers:
    """Headers to send to the origin: hop-by-hop fields and Expect removed
    (the proxy answers 100-continue itself), ``Host`` set to the origin's.
    With ``body_length``, one ``Content-Length`` (the first, in its place)
    says that length: the origin never gets a length the body does not have."""
    drop = HOP_BY_HOP | connection_options(headers) | {b"expect", b"proxy-authorization"}
    out, saw_host, saw_length = [], False, False
    for k, v in headers:
        lk = k.lower()
        if lk == b"host":
            out.append((k, host))
            saw_host = True
        elif lk == b"content-length" and body_length is not None:
            if not saw_length:
                out.append((k, b"%d" % body_length))
                saw_length = True
        elif lk not in drop:
            out.append((k, v))
    if not saw_host:
        out.insert(0, (b"Host", host))
    return tuple(out)


class Framing(enum.Enum):
    CHUNKED = "chunked"
    LENGTH = "length"
    CLOSE = "close"  # body delimited by closing the connection
    NONE = "none"  # no body (HEAD, 1xx, 204, 304)


@dataclass(frozen=True)
class ClientHead:
    """The response head wiretape writes to its client, and how it frames
    the body. ``dropped`` lists hop-by-hop names removed (for reports)."""

    status: int
    reason: bytes
    headers: Headers
    framing: Framing
    keep_alive: bool
    dropped: tuple[str, ...]

    def encode(self) -> bytes:
        lines = [b"HTTP/1.1 %d %s\r\n" % (self.status, self.reason)]
        lines.extend(k + b": " + v + b"\r\n" for k, v in self.headers)
        lines.append(b"\r\n")
        return b"".join(lines)


def client_head(
    status: int, reason: bytes, headers: Headers, *, method: bytes, keep_alive: bool
) -> ClientHead:
    """The head to write to the client for an origin's (or a recorded)
    response. Framing follows RFC 9112 §6.3: Transfer-Encoding chunked wins
    over Content-Length; neither means close-delimited."""
    options = connection_options(headers)
    te = [v for k, v in headers if k.lower() == b"transfer-encoding"]
    chunked = any(b"chunked" in v.lower() for v in te)
    has_length = any(k.lower() == b"content-length" for k, _ in headers)
    if method == b"HEAD" or status < 200 or status in (204, 304):
        framing = Framing.NONE
    elif chunked:
        framing = Framing.CHUNKED
    elif has_length:
        framing = Framing.LENGTH
    else:
        framing = Framing.CLOSE
    keep = keep_alive and framing is not Framing.CLOSE and b"close" not in options
    out: list[tuple[bytes, bytes]] = []
    dropped: list[str] = []
    saw_connection = False
    for k, v in headers:
        lk = k.lower()
        if lk == b"connection":
            if not saw_connection:
                out.append((k, b"keep-alive" if keep else b"close"))
                saw_connection = True
            continue
        if lk == b"transfer-encoding":
            if chunked and framing is Framing.CHUNKED:
                out.append((k, b"chunked"))
            else:
                dropped.append(k.decode("latin-1"))
            continue
        if lk == b"content-length" and chunked:
            dropped.append(k.decode("latin-1"))  # RFC 9112 §6.3: TE overrides CL
            continue
        if lk in HOP_BY_HOP or lk in options:
            dropped.append(k.decode("latin-1"))
            continue
        out.append((k, v))
    if not keep and not saw_connection:
        out.append((b"Connection", b"close"))
    return ClientHead(status, reason, tuple(out), framing, keep, tuple(dropped))
