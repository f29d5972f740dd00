"""A recorded response body as the JSON documents it carries.

Owns: undoing the response's ``Content-Encoding`` (for reading only; the
stored bytes are never changed), and cutting a Server-Sent Events stream
into the JSON of its ``data`` fields. Knows nothing of providers' shapes,
of requests or of differences. Bad input yields fewer documents, never an
error: a run file is untrusted.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterator, Sequence

import zstandard

from wiretape.matching.jsontree import parse
from wiretape.model import Frame, Message, Opcode, Response, header_values

#: Decoded bodies are read up to this size (a compressed body is small on
#: disk and may be huge when inflated).
MAX_DECODED = 64 << 20


def _inflate(wbits: int) -> Callable[[bytes], bytes]:
    def decode(data: bytes) -> bytes:
        return zlib.decompressobj(wbits).decompress(data, MAX_DECODED)

    return decode


def _deflate(data: bytes) -> bytes:
    # RFC 9110 §8.4.1.2: "deflate" is the zlib format; some servers send raw
    # deflate instead, so try both.
    try:
        return _inflate(zlib.MAX_WBITS)(data)
    except zlib.error:
        return _inflate(-zlib.MAX_WBITS)(data)


def _zstd(data: bytes) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    return bytes(reader.read(MAX_DECODED))


#: Content codings (RFC 9110 §8.4.1) that can be undone; others are left.
DECODERS: dict[bytes, Callable[[bytes], bytes]] = {
    b"gzip": _inflate(16 + zlib.MAX_WBITS),
    b"x-gzip": _inflate(16 + zlib.MAX_WBITS),
    b"deflate": _deflate,
    b"zstd": _zstd,
    b"identity": lambda data: data,
}


def decoded_body(response: Response) -> bytes | None:
    """The body with its content codings undone, last applied first
    (RFC 9110 §8.4); None when a coding is unknown or the data is bad."""
    body = response.body
    codings = [
        c.strip().lower()
        for v in header_values(response.headers, b"content-encoding")
        for c in v.split(b",")
        if c.strip()
    ]
    for coding in reversed(codings):
        decoder = DECODERS.get(coding)
        if decoder is None:
            return None
        try:
            body = decoder(body)
        except (zlib.error, zstandard.ZstdError, ValueError):
            return None
    return body


def sse_data(body: bytes) -> Iterator[bytes]:
    """The data of each event of an SSE stream (WHATWG HTML, "Server-sent
    events", §9.2.6): ``data:`` lines joined by newlines, one leading space
    dropped, events ended by a blank line."""
    lines: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if not line:
            if lines:
                yield b"\n".join(lines)
            lines = []
        elif line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if lines:
        yield b"\n".join(lines)


def documents(response: Response) -> Iterator[object]:
    """The JSON documents in a response: the whole body when it is JSON
    (each element when it is an array, as Gemini's unary stream is), else
    each SSE event's data that is JSON (``[DONE]`` and the like skipped)."""
    body = decoded_body(response)
    if body is None:
        return
    whole = parse(body) if body.lstrip()[:1] in (b"{", b"[") else None
    if whole is not None:
        yield from whole.value if isinstance(whole.value, list) else [whole.value]
        return
    for data in sse_data(body):
        event = parse(data)
        if event is not None:
            yield event.value


def session_stream(messages: Sequence[Message]) -> Response:
    """The server's text messages of a WebSocket session as one SSE
    response (one ``data:`` event per message, a payload's newlines each
    starting a ``data:`` line), so that what reads a response's documents
    (the tool calls named in them) reads a session's too."""
    events = [b"data: " + m.payload.replace(b"\r\n", b"\n").replace(b"\n", b"\ndata: ")
              + b"\n\n"
              for m in messages if m.direction == "server" and m.opcode is Opcode.TEXT]
    return Response(200, b"OK", ((b"content-type", b"text/event-stream"),),
                    (Frame(0, b"".join(events)),))
