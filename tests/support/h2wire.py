"""Reading raw HTTP/2 frames a test received (RFC 9113 §4.1: a 9-byte
header, length, type, flags, stream id, then the payload)."""

from __future__ import annotations


def h2_frames(wire: bytes) -> list[tuple[int, bytes]]:
    """(type, payload) of each whole frame in ``wire``, in order."""
    frames, pos = [], 0
    while pos + 9 <= len(wire):
        length = int.from_bytes(wire[pos:pos + 3], "big")
        frames.append((wire[pos + 3], wire[pos + 9:pos + 9 + length]))
        pos += 9 + length
    return frames


def goaway_codes(wire: bytes) -> list[int]:
    """The error code of each GOAWAY frame in ``wire`` (RFC 9113 §6.8)."""
    return [int.from_bytes(payload[4:8], "big") for kind, payload in h2_frames(wire)
            if kind == 0x7]
