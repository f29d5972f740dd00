"""Content-addressed, compressed body storage inside a run file.

A body is stored once under the sha256 of its bytes. It is compressed with
zstd; when a reference blob is given (the previous request body: agents
resend their growing conversation), that blob's bytes are the compression
dictionary, so a request that extends the previous one costs about its new
bytes. Reference chains are capped so reading stays cheap.
"""

from __future__ import annotations

import hashlib
import sqlite3

import zstandard

MAX_REF_DEPTH = 32
_MIN_COMPRESS = 64  # bytes; below this zstd framing costs more than it saves


def blob_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(db: sqlite3.Connection, data: bytes, ref: str | None = None) -> str:
    """Store ``data`` (if not already there) and return its hash.

    ``ref`` names a stored blob to use as the dictionary. The caller owns the
    transaction.
    """
    digest = blob_hash(data)
    if db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone():
        return digest
    codec, ref_used, depth, payload = "raw", None, 0, data
    if len(data) >= _MIN_COMPRESS:
        codec, payload = "zstd", zstandard.ZstdCompressor(level=6).compress(data)
        if ref is not None:
            row = db.execute("SELECT depth FROM blobs WHERE hash = ?", (ref,)).fetchone()
            if row is not None and row[0] < MAX_REF_DEPTH:
                ref_bytes = get(db, ref)
                dictionary = zstandard.ZstdCompressionDict(
                    ref_bytes, dict_type=zstandard.DICT_TYPE_RAWCONTENT
                )
                delta = zstandard.ZstdCompressor(level=6, dict_data=dictionary).compress(data)
                if len(delta) < len(payload):
                    codec, ref_used, depth, payload = "zstd-ref", ref, row[0] + 1, delta
    db.execute(
        "INSERT INTO blobs (hash, size, codec, ref, depth, data) VALUES (?, ?, ?, ?, ?, ?)",
        (digest, len(data), codec, ref_used, depth, payload),
    )
    return digest


def get(db: sqlite3.Connection, digest: str, cache: dict[str, bytes] | None = None) -> bytes:
    """The bytes stored under ``digest``. Raises KeyError when absent."""
    if cache is not None and digest in cache:
        return cache[digest]
    row = db.execute(
        "SELECT size, codec, ref, data FROM blobs WHERE hash = ?", (digest,)
    ).fetchone()
    if row is None:
        raise KeyError(digest)
    size, codec, ref, payload = row
    if codec == "raw":
        data = bytes(payload)
    elif codec == "zstd":
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=size)
    elif codec == "zstd-ref":
        dictionary = zstandard.ZstdCompressionDict(
            get(db, ref, cache), dict_type=zstandard.DICT_TYPE_RAWCONTENT
        )
        data = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(
            payload, max_output_size=size
        )
    else:
        raise ValueError(f"unknown blob codec {codec!r}")
    if cache is not None:
        cache[digest] = data
    return data
