"""Content-addressed, compressed body storage inside a run file.

A body is stored once under the sha256 of its bytes. It is compressed with
zstd; when a reference blob is given (the previous request body: agents
resend their growing conversation), that blob's bytes are the compression
dictionary, so a request that extends the previous one costs about its new
bytes. Reference chains are capped so reading stays cheap.

A body too large to hold while it is recorded is stored in parts
(:func:`put_part`, :func:`put_parts`): each part its own compressed row
under a staging key (``part:<token>:<index>``, never a sha256), then one
row under the body's hash with codec ``parts`` naming the token (``ref``)
and listing the parts' sizes. Until that row is committed the parts are
reached from nothing (:func:`sweep_parts` removes them).

Reading back is bounded whatever the file says (:func:`get`): a run file is
untrusted input.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import struct

import zstandard

MAX_REF_DEPTH = 32
_MIN_COMPRESS = 64  # bytes; below this zstd framing costs more than it saves
#: The largest body read back (uncompressed bytes): above a snapshot's whole
#: default limit and four times the default request body limit.
MAX_BLOB_BYTES = 256 * 1024 * 1024
_MAX_WINDOW = 1 << 27  # zstd's own default limit, said here: no frame may ask for more
_CHUNK = 1 << 20
#: The most parts a ``parts`` body may list, whatever the file says.
MAX_PARTS = 1 << 16
_PARTS_MAGIC = b"WTP1"
_PART_SIZE = struct.Struct(">Q")
_TOKEN = re.compile(r"[0-9a-f]{32}")
#: zstd level of a part: a part is compressed while its response streams.
_PART_LEVEL = 3


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


def part_key(token: str, index: int) -> str:
    """The key a staged part is stored under (never a sha256 hex)."""
    return f"part:{token}:{index}"


def compress_part(data: bytes) -> tuple[str, bytes]:
    """(codec, payload) of one part: CPU work, done before the write that
    stores it (no lock held)."""
    if len(data) < _MIN_COMPRESS:
        return "raw", data
    return "zstd", zstandard.ZstdCompressor(level=_PART_LEVEL).compress(data)


def put_part(db: sqlite3.Connection, token: str, index: int, size: int, codec: str,
             payload: bytes) -> None:
    """Stage part ``index`` (``size`` uncompressed bytes, as
    :func:`compress_part` made it) of the body being spooled as ``token``.
    The caller owns the transaction."""
    db.execute(
        "INSERT INTO blobs (hash, size, codec, ref, depth, data) VALUES (?, ?, ?, NULL, 0, ?)",
        (part_key(token, index), size, codec, payload))


def put_parts(db: sqlite3.Connection, digest: str, token: str, sizes: list[int]) -> str:
    """Make the body ``digest`` (sha256 hex of the whole) out of the parts
    staged as ``token`` (``sizes``: each part's bytes, in order), in the
    caller's transaction; when that body is already stored, the staged
    parts are dropped instead. Returns ``digest``."""
    if db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone():
        db.execute("DELETE FROM blobs WHERE hash >= ? AND hash < ?",
                   (f"part:{token}:", f"part:{token};"))
        return digest
    listing = _PARTS_MAGIC + b"".join(_PART_SIZE.pack(n) for n in sizes)
    db.execute(
        "INSERT INTO blobs (hash, size, codec, ref, depth, data) VALUES (?, ?, 'parts', ?, 0, ?)",
        (digest, sum(sizes), token, listing))
    return digest


#: Staged parts no ``parts`` body names: those of a body never committed.
_UNCLAIMED = ("hash LIKE 'part:%' AND substr(hash, 6, 32) NOT IN"
              " (SELECT ref FROM blobs WHERE codec = 'parts' AND ref IS NOT NULL)")


def sweep_parts(db: sqlite3.Connection, keep: set[str] | frozenset[str] = frozenset()) -> int:
    """Delete the staged parts of bodies never committed (a recording
    killed, or a write that failed, mid-stream), but those of the tokens in
    ``keep`` (bodies still being spooled). The caller owns the transaction.
    Returns how many rows were deleted."""
    rows = db.execute(f"SELECT hash FROM blobs WHERE {_UNCLAIMED}").fetchall()
    gone = [(h,) for (h,) in rows if str(h)[5:37] not in keep]
    db.executemany("DELETE FROM blobs WHERE hash = ?", gone)
    return len(gone)


def stored_bytes(db: sqlite3.Connection) -> int:
    """Bytes of blobs as stored (compressed), staged parts of a body never
    committed left out. Raises sqlite3.Error."""
    row = db.execute(
        f"SELECT coalesce(sum(length(data)), 0) FROM blobs WHERE NOT ({_UNCLAIMED})").fetchone()
    return int(row[0]) if type(row[0]) is int else 0


class BlobError(ValueError):
    """A stored body that cannot be read back as it claims: too large,
    another length than stored, a broken chain, bytes that are not its hash."""


def get(db: sqlite3.Connection, digest: str, cache: dict[str, bytes] | None = None, *,
        limit: int = MAX_BLOB_BYTES) -> bytes:
    """The bytes stored under ``digest``, at most ``limit`` of them.

    A run file is untrusted: the declared size is checked against the limit
    before anything is decompressed, decompression streams and stops at the
    declared size (a zstd bomb costs at most ``limit`` bytes), a dictionary
    chain is followed at most MAX_REF_DEPTH links whatever the file says,
    and what comes out must have the declared size and hash. Raises KeyError
    when absent, BlobError when it cannot be read.
    """
    return _get(db, digest, cache, limit, set())


def _get(db: sqlite3.Connection, digest: str, cache: dict[str, bytes] | None, limit: int,
         chain: set[str]) -> bytes:
    if cache is not None and digest in cache:
        return cache[digest]
    if len(chain) > MAX_REF_DEPTH:
        raise BlobError(f"body {_short(digest)} is compressed against a chain of more than "
                        f"{MAX_REF_DEPTH} bodies")
    if digest in chain:
        raise BlobError(f"body {_short(digest)} is compressed against itself")
    row = db.execute(
        "SELECT size, codec, ref, data FROM blobs WHERE hash = ?", (digest,)
    ).fetchone()
    if row is None:
        raise KeyError(digest)
    size, codec, ref, payload = row
    if type(size) is not int or size < 0:
        raise BlobError(f"body {_short(digest)} has no valid size ({_kind(size)})")
    if not isinstance(payload, bytes):
        raise BlobError(f"body {_short(digest)} is stored as {_kind(payload)}, not bytes")
    if size > limit:
        raise BlobError(f"body {_short(digest)} says it is {size} bytes, more than the "
                        f"{limit} bytes wiretape reads back")
    if codec == "raw":
        if len(payload) != size:
            raise BlobError(f"body {_short(digest)} says it is {size} bytes but {len(payload)} "
                            "are stored")
        data = payload
    elif codec in ("zstd", "zstd-ref"):
        dictionary = None
        if codec == "zstd-ref":
            if not isinstance(ref, str):
                raise BlobError(f"body {_short(digest)} names no dictionary body")
            dictionary = zstandard.ZstdCompressionDict(
                _get(db, ref, cache, limit, chain | {digest}),
                dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        data = _decompress(payload, size, dictionary, digest)
    elif codec == "parts":
        data = _join_parts(db, digest, size, ref, payload)
    else:
        raise BlobError(f"body {_short(digest)} has an unknown codec ({_kind(codec)})")
    if blob_hash(data) != digest:
        raise BlobError(f"body {_short(digest)} does not have the hash it is stored under")
    if cache is not None:
        cache[digest] = data
    return data


def _join_parts(db: sqlite3.Connection, digest: str, size: int, token: object,
                listing: bytes) -> bytes:
    """The body ``digest`` made of the parts ``listing`` names, each read
    within its listed size (``size`` is already within the limit)."""
    what = f"body {_short(digest)}"
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        raise BlobError(f"{what} is stored in parts but names no valid part set")
    count, rest = divmod(len(listing) - len(_PARTS_MAGIC), _PART_SIZE.size)
    if not listing.startswith(_PARTS_MAGIC) or rest or count < 1:
        raise BlobError(f"{what} is stored in parts but its list of parts is malformed")
    if count > MAX_PARTS:
        raise BlobError(f"{what} lists {count} parts, more than the {MAX_PARTS} wiretape reads")
    sizes = [n for (n,) in _PART_SIZE.iter_unpack(listing[len(_PARTS_MAGIC):])]
    if sum(sizes) != size or any(n < 1 for n in sizes):
        raise BlobError(f"{what} says it is {size} bytes but its parts' sizes do not add up "
                        "to it")
    out = bytearray()
    for index, part_size in enumerate(sizes):
        row = db.execute("SELECT size, codec, data FROM blobs WHERE hash = ?",
                         (part_key(token, index),)).fetchone()
        if row is None:
            raise BlobError(f"{what} lacks its part {index}")
        stored_size, codec, payload = row
        where = f"{what}, part {index},"
        if stored_size != part_size or not isinstance(payload, bytes):
            raise BlobError(f"{where} is not stored as its list of parts says")
        if codec == "raw":
            if len(payload) != part_size:
                raise BlobError(f"{where} says it is {part_size} bytes but {len(payload)} are "
                                "stored")
            out += payload
        elif codec == "zstd":
            out += _decompress(payload, part_size, None, digest)
        else:
            raise BlobError(f"{where} has a codec a part cannot have ({_kind(codec)})")
    return bytes(out)


def _decompress(payload: bytes, size: int, dictionary: zstandard.ZstdCompressionDict | None,
                digest: str) -> bytes:
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise BlobError(f"body {_short(digest)} is not zstd data ({exc})") from exc
    if declared not in (-1, size):  # -1: the frame does not say
        raise BlobError(f"body {_short(digest)} says it is {size} bytes but its compressed "
                        f"frame says {declared}")
    decompressor = (zstandard.ZstdDecompressor(dict_data=dictionary, max_window_size=_MAX_WINDOW)
                    if dictionary is not None
                    else zstandard.ZstdDecompressor(max_window_size=_MAX_WINDOW))
    out = bytearray()
    try:
        with decompressor.stream_reader(payload, read_across_frames=True) as reader:
            while len(out) <= size:
                chunk = reader.read(min(_CHUNK, size + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as exc:
        raise BlobError(f"body {_short(digest)} cannot be decompressed ({exc})") from exc
    if len(out) != size:
        more = "more" if len(out) > size else str(len(out))
        raise BlobError(f"body {_short(digest)} says it is {size} bytes but decompresses to "
                        f"{more}")
    return bytes(out)


def _short(digest: object) -> str:
    return str(digest)[:12]


def _kind(value: object) -> str:
    if value is None:
        return "NULL"
    return {int: "an integer", float: "a real", str: "text", bytes: "bytes"}.get(
        type(value), type(value).__name__)
