"""Content codings (RFC 9110 §8.4): undone piece by piece, and done again
the same way on every machine.

Redaction looks for secrets in a body's decoded text. When it finds one,
the body is coded again here: gzip, deflate (zlib or raw) and zstd are
written with *stored* blocks (no compression at all), so the same decoded
bytes always give the same coded bytes, whatever zlib or zstd library a
machine has. Each input piece (a response frame) gives one output piece,
so a stream keeps its frame boundaries and timing; a stream that was cut
off stays cut off (no final block, no trailer).

Brotli (``br``) is not undone: no brotli library is required. Pure: bytes
in, bytes out; a body that cannot be undone gives None, never an error.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zstandard

#: Decoded bodies are undone up to this size (a compressed body is small on
#: the wire and may be huge when inflated); a larger one is left coded.
MAX_DECODED = 64 << 20

#: Codings undone and done again here (``identity`` changes nothing).
SUPPORTED: frozenset[bytes] = frozenset({b"gzip", b"x-gzip", b"deflate", b"zstd", b"identity"})


def parse(values: Sequence[bytes]) -> list[bytes]:
    """The codings named by ``Content-Encoding`` field values, in the order
    they were applied, ``identity`` left out."""
    return [c.strip().lower() for v in values for c in v.split(b",")
            if c.strip() and c.strip().lower() != b"identity"]


@dataclass(frozen=True)
class Decoded:
    """A coded body undone: ``pieces[i]`` is what input piece i decoded to;
    ``complete`` says whether every coding reached its proper end."""

    pieces: tuple[bytes, ...]
    complete: bool
    #: the variant of each coding as found (``zlib`` or ``raw`` for deflate)
    variants: tuple[str, ...]


# -- undoing -----------------------------------------------------------------------------------


class _Inflater:
    """A zlib stream (gzip, zlib or raw deflate), fed piece by piece;
    gzip members may follow each other."""

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._d = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> bytes:
        out = [self._d.decompress(data)]
        while self._d.eof and self._d.unused_data:
            if self._wbits < 16 + zlib.MAX_WBITS:  # only gzip has members
                raise ValueError("data after the end of the stream")
            rest = self._d.unused_data
            self._d = zlib.decompressobj(self._wbits)
            out.append(self._d.decompress(rest))
        return b"".join(out)

    @property
    def eof(self) -> bool:
        return self._d.eof


class _Unzstd:
    def __init__(self) -> None:
        self._d = zstandard.ZstdDecompressor().decompressobj()
        self.eof = False

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            if self._d.eof:  # frames may follow each other
                self._d = zstandard.ZstdDecompressor().decompressobj()
            out.append(self._d.decompress(data))
            data = self._d.unused_data if self._d.eof else b""
        self.eof = self._d.eof
        return b"".join(out)


def _deflate_variant(first: bytes) -> str:
    """RFC 9110 §8.4.1.2 says zlib; some servers send raw deflate."""
    if len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0:
        return "zlib"
    return "raw"


def _undoer(coding: bytes, variant: str) -> _Inflater | _Unzstd:
    if coding in (b"gzip", b"x-gzip"):
        return _Inflater(16 + zlib.MAX_WBITS)
    if coding == b"deflate":
        return _Inflater(zlib.MAX_WBITS if variant == "zlib" else -zlib.MAX_WBITS)
    return _Unzstd()


def _bounded_size(coding: bytes, variant: str, data: bytes, limit: int) -> int:
    """The decoded size of ``data``, read no further than ``limit`` + 1."""
    if coding == b"zstd":
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data),
                                                           read_across_frames=True)
        return len(reader.read(limit + 1))
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}.get(variant, -zlib.MAX_WBITS)
    d = zlib.decompressobj(wbits)
    return len(d.decompress(data, limit + 1))


def decode(coded: Sequence[bytes], applied: Sequence[bytes],
           limit: int = MAX_DECODED) -> Decoded | None:
    """Undo ``applied`` codings (in the order they were applied) on the
    body cut into ``coded`` pieces. None when a coding is not supported,
    the data is bad, or the body would decode past ``limit`` bytes."""
    pieces = tuple(coded)
    variants: list[str] = []
    complete = True
    try:
        for coding in reversed(applied):
            if coding not in SUPPORTED:
                return None
            if coding == b"identity":
                variants.append("")
                continue
            whole = b"".join(pieces)
            variant = ("gzip" if coding in (b"gzip", b"x-gzip") else
                       _deflate_variant(whole) if coding == b"deflate" else "zstd")
            if _bounded_size(coding, variant, whole, limit) > limit:
                return None
            undo = _undoer(coding, variant)
            pieces = tuple(undo.feed(p) for p in pieces)
            complete = complete and undo.eof
            variants.append(variant)
    except (zlib.error, zstandard.ZstdError, ValueError):
        return None
    return Decoded(pieces, complete, tuple(reversed(variants)))


# -- doing again, deterministically ------------------------------------------------------------

_STORED_MAX = 0xFFFF  # bytes in one stored deflate block
_ZSTD_RAW_MAX = 1 << 17  # bytes in one raw zstd block (the window below)


def _stored_blocks(data: bytes) -> bytes:
    """Non-final stored deflate blocks (RFC 1951 §3.2.4) holding ``data``."""
    out = []
    for i in range(0, len(data), _STORED_MAX):
        block = data[i:i + _STORED_MAX]
        out.append(b"\x00" + struct.pack("<HH", len(block), len(block) ^ 0xFFFF) + block)
    return b"".join(out)


_FINAL_STORED = b"\x01\x00\x00\xff\xff"  # an empty final stored block


class _Coder:
    """Codes pieces one after the other: ``feed`` each, ``end`` once."""

    def __init__(self, start: bytes, feed: Callable[[bytes], bytes],
                 end: Callable[[], bytes]) -> None:
        self._start, self._feed, self._end = start, feed, end
        self._started = False

    def feed(self, data: bytes) -> bytes:
        head = b"" if self._started else self._start
        self._started = True
        return head + self._feed(data)

    def end(self) -> bytes:
        head = b"" if self._started else self._start
        self._started = True
        return head + self._end()


def _gzip_coder() -> _Coder:
    state = {"crc": 0, "size": 0}

    def feed(data: bytes) -> bytes:
        state["crc"] = zlib.crc32(data, state["crc"])
        state["size"] += len(data)
        return _stored_blocks(data)

    def end() -> bytes:
        return _FINAL_STORED + struct.pack("<II", state["crc"], state["size"] & 0xFFFFFFFF)

    # RFC 1952: no name, mtime 0, no extra flags, OS unknown (255)
    return _Coder(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", feed, end)


def _zlib_coder(wrapped: bool) -> _Coder:
    state = {"adler": 1}

    def feed(data: bytes) -> bytes:
        state["adler"] = zlib.adler32(data, state["adler"])
        return _stored_blocks(data)

    def end() -> bytes:
        return _FINAL_STORED + (struct.pack(">I", state["adler"]) if wrapped else b"")

    # RFC 1950: deflate, 32 KiB window, no dictionary, fastest (0x7801)
    return _Coder(b"\x78\x01" if wrapped else b"", feed, end)


def _zstd_coder() -> _Coder:
    def block(data: bytes, last: bool) -> bytes:
        return (len(data) << 3 | int(last)).to_bytes(3, "little") + data

    def feed(data: bytes) -> bytes:
        return b"".join(block(data[i:i + _ZSTD_RAW_MAX], False)
                        for i in range(0, len(data), _ZSTD_RAW_MAX))

    # RFC 8878: magic, no content size, no checksum, window 128 KiB; raw blocks
    return _Coder(b"\x28\xb5\x2f\xfd\x00\x38", feed, lambda: block(b"", True))


def _coder(coding: bytes, variant: str) -> _Coder:
    if coding in (b"gzip", b"x-gzip"):
        return _gzip_coder()
    if coding == b"deflate":
        return _zlib_coder(variant == "zlib")
    return _zstd_coder()


def encode(decoded: Decoded, pieces: Sequence[bytes], applied: Sequence[bytes]) -> list[bytes]:
    """``pieces`` (decoded, one per original piece) coded again with
    ``applied``, stored blocks only: one output piece per input piece, the
    first carrying the header, the last the end (when ``decoded`` was
    complete)."""
    out = list(pieces)
    for coding, variant in zip(applied, decoded.variants, strict=True):
        if coding == b"identity":
            continue
        coder = _coder(coding, variant)
        out = [coder.feed(p) for p in out]
        if decoded.complete:
            tail = coder.end()
            if out:
                out[-1] += tail
            else:
                out = [tail]
    return out
