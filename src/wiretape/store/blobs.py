"""Content-addressed, compressed body storage inside a run file.

A body is stored once under the sha256 of its bytes. Agents resend their
growing conversation, so a request body is mostly the previous one (its
reference) with new messages spliced in: a long common start, the new
bytes, then a common end (the tool list, the settings). Such a body is
stored as a splice (codec ``splice``): a header saying how many bytes of
the reference's start and end it keeps, then only the new bytes between
them (zstd alone when that is smaller, else raw; the header says which).
Finding the common start and end compares the two bodies in blocks
(C-speed, linear in their size), so a splice costs about a memory
comparison plus compressing the new bytes. A body the reference does not
cover that well (the new bytes more than a quarter of it: a conversation
compacted or rewritten, another conversation) is compressed with zstd
against the reference's bytes as a raw-content dictionary (``zstd-ref``);
else with zstd alone (``zstd``). Both reference codecs form chains
(``depth``: the chain's length behind a body), capped at
``MAX_REF_DEPTH`` so reading stays cheap; a body past the cap starts a new
chain.

A splice payload is ``_SPLICE`` (magic ``WTS1``, how the new bytes are
stored: 0 raw, 1 zstd; the kept start's and end's lengths, unsigned 64-bit
big-endian) followed by the new bytes as stored; the body is
``ref[:start] + new + ref[len(ref) - end:]``.

A body too large to hold while it is recorded is stored in parts
(:func:`put_part`, :func:`put_parts`): each part its own compressed row
under a staging key (``part:<token>:<index>``, never a sha256), then one
row under the body's hash with codec ``parts`` naming the token (``ref``)
and listing the parts' sizes. Until that row is committed the parts are
reached from nothing (:func:`sweep_parts` removes them).

A body may first be stored raw (:func:`put_raw`: the cheapest write, for a
commit something waits for) and compressed afterwards under the same hash
(:func:`recompress`); a reader gets the same bytes either way.

Reading back is bounded whatever the file says (:func:`get`): a run file is
untrusted input.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import struct
import threading
from dataclasses import dataclass

import zstandard

from wiretape.commonbytes import common_prefix, common_suffix

MAX_REF_DEPTH = 32
MIN_COMPRESS = 64  # bytes; below this zstd framing costs more than it saves
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
_LEVEL = 6
#: The level of a compression done after the commit (``Packer(FAST_LEVEL)``):
#: on agent traffic (JSON text, a body extending the previous one) as small
#: as level 6, and several times faster, so it is soon done.
FAST_LEVEL = 3
#: The largest reference whose dictionary :meth:`Packer.pack_ahead` makes
#: (bytes): the ready form takes several times its size in memory, held
#: until the next.
_PREPARE_MAX = 16 * 1024 * 1024
#: A delta at most 1/_SURELY_SMALLER of its body is kept without trying
#: zstd alone (which makes no text that small).
_SURELY_SMALLER = 32
#: A body is spliced from its reference when its new bytes are at most
#: 1/_SPLICE_SHARE of it. Such a body is the previous turn plus a turn's
#: messages: zstd-ref would store about those same new bytes compressed
#: (some 5 % less: the conversation is their context), at several times
#: the CPU (making the reference's dictionary ready, then matching the whole
#: body against it). A turn adds about a tenth of a long conversation (the
#: bench's sessions: 10 KiB to 1 MiB in 50 turns), two turns (a body packed
#: against the one before the previous) about a fifth: both are spliced.
#: Past a quarter, the edit is not one splice (a conversation compacted,
#: rewritten, or another one), and the dictionary finds the reference's
#: bytes wherever they moved.
_SPLICE_SHARE = 4
#: A splice's header: magic, how the new bytes are stored (_MIDDLE_RAW,
#: _MIDDLE_ZSTD), and the bytes of the reference's start and end it keeps.
_SPLICE = struct.Struct(">4sBQQ")
_SPLICE_MAGIC = b"WTS1"
_MIDDLE_RAW = 0
_MIDDLE_ZSTD = 1


def blob_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(db: sqlite3.Connection, data: bytes, ref: str | None = None, *,
        ref_data: bytes | None = None, packer: Packer | None = None) -> str:
    """Store ``data`` (if not already there), compressed, and return its hash.

    ``ref`` names a stored blob to store it against (spliced from it, or
    its bytes as the dictionary); ``ref_data``: its bytes, when the caller
    has them (else they are read back). ``packer``: the compressors to use
    (default: this module's, one per thread). The caller owns the
    transaction.
    """
    digest = blob_hash(data)
    if db.execute("SELECT 1 FROM blobs WHERE hash = ?", (digest,)).fetchone():
        return digest
    reference = None
    if ref is not None and len(data) >= MIN_COMPRESS:
        depth = ref_depth(db, ref)
        if depth is not None and depth < MAX_REF_DEPTH:
            reference = Reference(ref, ref_data if ref_data is not None else get(db, ref), depth)
    codec, ref_used, depth, payload = (packer or _PACKER).pack(data, reference)
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
    if len(data) < MIN_COMPRESS:
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
def put_raw(db: sqlite3.Connection, data: bytes, digest: str) -> bool:
    """Store ``data`` as it is under ``digest`` (its sha256 hex, which the
    caller computed: :func:`blob_hash`), if no blob has that hash yet; True
    when this stored it. The cheap half of a write whose compression comes
    later (:func:`recompress`). The caller owns the transaction."""
    cur = db.execute(
        "INSERT OR IGNORE INTO blobs (hash, size, codec, ref, depth, data)"
        " VALUES (?, ?, 'raw', NULL, 0, ?)", (digest, len(data), data))
    return cur.rowcount == 1


def ref_depth(db: sqlite3.Connection, digest: str) -> int | None:
    """The length of the reference chain behind the stored blob ``digest``
    (0: it needs none), or None when there is no such blob (or its depth is
    not a number)."""
    row = db.execute("SELECT depth FROM blobs WHERE hash = ?", (digest,)).fetchone()
    return row[0] if row is not None and type(row[0]) is int else None


def recompress(db: sqlite3.Connection, digest: str, size: int,
               packed: tuple[str, str | None, int, bytes]) -> bool:
    """Replace the raw bytes stored under ``digest`` (``size`` of them) by
    ``packed`` (what :meth:`Packer.pack` made of the same bytes: the hash
    stays the bytes' own, so every reader gets the same bytes back). Only a
    blob still raw is changed, and only when the reference it names is
    still at the depth it was packed against; True when it was changed.
    The caller owns the transaction."""
    codec, ref, depth, payload = packed
    if codec == "raw":
        return False
    if ref is not None and ref_depth(db, ref) != depth - 1:
        return False  # its reference changed meanwhile: it stays raw (and correct)
    cur = db.execute(
        "UPDATE blobs SET codec = ?, ref = ?, depth = ?, data = ?"
        " WHERE hash = ? AND codec = 'raw' AND size = ?",
        (codec, ref, depth, payload, digest, size))
    return cur.rowcount == 1


@dataclass(frozen=True)
class Packed:
    """A body as it will be stored: its hash and size, codec, reference
    (hash, or None), depth and payload (:meth:`Packer.pack_ahead`)."""

    digest: str
    size: int
    codec: str
    ref: str | None
    depth: int
    payload: bytes


def put_packed(db: sqlite3.Connection, packed: Packed) -> bool:
    """Store a body packed ahead of its transaction (if no blob has its hash
    yet); False, storing nothing, when the reference it names is not
    stored at the depth it was packed against (the caller then stores it
    otherwise). The caller owns the transaction."""
    if packed.ref is not None and ref_depth(db, packed.ref) != packed.depth - 1:
        return False
    db.execute(
        "INSERT OR IGNORE INTO blobs (hash, size, codec, ref, depth, data)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (packed.digest, packed.size, packed.codec, packed.ref, packed.depth, packed.payload))
    return True


@dataclass(frozen=True)
class Reference:
    """A stored body to compress another against: its hash, its bytes and
    the depth of its own reference chain."""

    digest: str
    data: bytes
    depth: int


class Packer:
    """Compresses bodies: spliced from a reference body when it covers most
    of them, else zstd against the reference's bytes as a dictionary, else
    zstd alone. Its compressors are built once per thread; the body
    :meth:`pack_ahead` last packed, else the one :meth:`prepare` was last
    given, is the reference of the next :meth:`pack_ahead` (its dictionary
    made only when a body is not a splice of it). Safe to use from several
    threads."""

    def __init__(self, level: int = _LEVEL) -> None:
        self._level = level
        self._local = threading.local()
        self._lock = threading.Lock()
        #: the body last given to :meth:`prepare`, with its chain's depth as
        #: stored (at ``MAX_REF_DEPTH``: the next body starts a new chain);
        #: None when it is too small to pack against
        self._prepared: Reference | None = None
        #: the body last packed ahead, with the depth it was packed at (None:
        #: it was not packed; it is committed raw, its depth known later)
        self._ahead: Reference | None = None
        #: the dictionary last made (its body's hash, and it ready), kept
        #: while that body is the one prepared or being packed against
        self._dictionary_made: tuple[str, zstandard.ZstdCompressionDict] | None = None

    def _plain(self) -> zstandard.ZstdCompressor:
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "plain", None)
        if compressor is None:
            compressor = self._local.plain = zstandard.ZstdCompressor(level=self._level)
        return compressor

    def _dictionary(self, ref: Reference) -> zstandard.ZstdCompressionDict:
        """``ref``'s bytes as a dictionary, ready to compress with: about
        the cost of compressing them once, so made only when a body is not
        a splice, and kept for the next such body."""
        with self._lock:
            made = self._dictionary_made
        if made is not None and made[0] == ref.digest:
            return made[1]
        dictionary = zstandard.ZstdCompressionDict(
            ref.data, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        dictionary.precompute_compress(level=self._level)
        with self._lock:
            self._dictionary_made = (ref.digest, dictionary)
        return dictionary

    def prepare(self, digest: str, data: bytes, depth: int) -> None:
        """Make ``data`` (stored under ``digest``, with a chain of ``depth``
        behind it) the reference of the next body :meth:`pack_ahead` packs.
        Cheap: keeps the bytes; a dictionary is made only for a body that
        is not a splice of them."""
        with self._lock:
            self._prepared = (None if depth < MAX_REF_DEPTH and len(data) < MIN_COMPRESS
                              else Reference(digest, data, depth))
            made = self._dictionary_made
            if made is not None and made[0] != digest:
                self._dictionary_made = None  # (its memory: several times its body's)

    def pack_ahead(self, data: bytes, digest: str) -> Packed | None:
        """``data`` (whose hash is ``digest``) as stored against the body
        before it: the one this last packed ahead, at the depth it packed
        it at (the usual case: by the time ``data`` is committed, that body
        is, as packed; :func:`put_packed` checks it), else the one last
        prepared (:meth:`prepare`). Spliced from it (cheap: a memory
        comparison and the new bytes compressed), else compressed against
        it when that makes it far smaller. When that body's chain is at
        ``MAX_REF_DEPTH``, zstd alone (a new chain), when that is smaller.
        None when none of these (nothing to pack against: the body is then
        compressed later, against the previous one), or under
        ``MIN_COMPRESS``."""
        if len(data) < MIN_COMPRESS:
            return None
        with self._lock:
            ref, ahead = self._prepared, self._ahead
        if ahead is not None and ahead.digest != digest and (
                ref is None or ref.depth >= MAX_REF_DEPTH or ahead.digest != ref.digest):
            ref = ahead
        packed = self._pack_ahead(data, digest, ref)
        with self._lock:  # the next body's reference, unless this one is not packed
            self._ahead = Reference(digest, data, packed.depth) if packed is not None else None
        return packed

    def _pack_ahead(self, data: bytes, digest: str, ref: Reference | None) -> Packed | None:
        if ref is None:
            return None
        if ref.depth >= MAX_REF_DEPTH:  # its chain is full: this body starts a new one
            payload = self._plain().compress(data)
            return Packed(digest, len(data), "zstd", None, 0, payload) if len(
                payload) < len(data) else None
        if ref.digest == digest:
            return None  # the same body: stored already
        spliced = self._splice(data, ref)
        if spliced is not None:
            return Packed(digest, len(data), "splice", ref.digest, ref.depth + 1, spliced)
        if len(ref.data) > _PREPARE_MAX:
            return None  # (its dictionary would take several times its size)
        delta = zstandard.ZstdCompressor(
            level=self._level, dict_data=self._dictionary(ref)).compress(data)
        if len(delta) * _SURELY_SMALLER > len(data):
            return None
        return Packed(digest, len(data), "zstd-ref", ref.digest, ref.depth + 1, delta)

    def pack(self, data: bytes, ref: Reference | None = None,
             ) -> tuple[str, str | None, int, bytes]:
        """``data`` as stored: (codec, the reference's hash or None, depth,
        payload). Raw below 64 bytes; against ``ref`` when its chain is
        short enough: spliced from it when it covers all but at most a
        quarter of ``data``, else compressed against it when that is
        smaller than zstd alone (a body that extends ``ref`` costs about its
        new bytes)."""
        if len(data) < MIN_COMPRESS:
            return "raw", None, 0, data
        delta = None
        if ref is not None and ref.depth < MAX_REF_DEPTH:
            spliced = self._splice(data, ref)
            if spliced is not None:
                # zstd alone holds the new bytes too, with all the others.
                return "splice", ref.digest, ref.depth + 1, spliced
            if ref.data != data:
                delta = zstandard.ZstdCompressor(
                    level=self._level, dict_data=self._dictionary(ref)).compress(data)
            if delta is not None and len(delta) * _SURELY_SMALLER <= len(data):
                # Far below what zstd alone makes of any text: not worth trying.
                return "zstd-ref", ref.digest, ref.depth + 1, delta
        payload = self._plain().compress(data)
        if ref is not None and delta is not None and len(delta) < len(payload):
            return "zstd-ref", ref.digest, ref.depth + 1, delta
        return "zstd", None, 0, payload

    def _splice(self, data: bytes, ref: Reference) -> bytes | None:
        """``data`` as a splice of ``ref`` (header and new bytes), or None
        when the new bytes are more than 1/_SPLICE_SHARE of it, or it is
        ``ref`` itself (a body never refers to itself)."""
        prefix = common_prefix(ref.data, data)
        if prefix == len(data) == len(ref.data):
            return None
        suffix = common_suffix(ref.data, data, limit=min(len(ref.data), len(data)) - prefix)
        middle = len(data) - prefix - suffix
        if middle * _SPLICE_SHARE > len(data):
            return None
        new = data[prefix:len(data) - suffix]
        how = _MIDDLE_RAW
        if len(new) >= MIN_COMPRESS:
            squeezed = self._plain().compress(new)
            if len(squeezed) < len(new):
                new, how = squeezed, _MIDDLE_ZSTD
        return _SPLICE.pack(_SPLICE_MAGIC, how, prefix, suffix) + new


_PACKER = Packer()


class BlobError(ValueError):
    """A stored body that cannot be read back as it claims: too large,
    another length than stored, a broken chain, bytes that are not its hash."""


class UnknownCodecError(BlobError):
    """A stored body with a codec this wiretape does not know: written by a
    newer one (or edited)."""


def get(db: sqlite3.Connection, digest: str, cache: dict[str, bytes] | None = None, *,
        limit: int = MAX_BLOB_BYTES) -> bytes:
    """The bytes stored under ``digest``, at most ``limit`` of them.

    A run file is untrusted: the declared size is checked against the limit
    before anything is decompressed, decompression streams and stops at the
    declared size (a zstd bomb costs at most ``limit`` bytes), a reference
    chain is followed at most MAX_REF_DEPTH links whatever the file says,
    and what comes out must have the declared size and hash. Raises KeyError
    when absent, BlobError when it cannot be read (UnknownCodecError: its
    codec is not one this wiretape reads).
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
            dictionary = zstandard.ZstdCompressionDict(
                _reference(db, digest, ref, cache, limit, chain),
                dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        data = _decompress(payload, size, dictionary, digest)
    elif codec == "splice":
        data = _unsplice(db, digest, size, ref, payload, cache, limit, chain)
    elif codec == "parts":
        data = _join_parts(db, digest, size, ref, payload)
    elif isinstance(codec, str):
        raise UnknownCodecError(f"body {_short(digest)} is stored with the codec {codec[:20]!r}, "
                                "which this wiretape does not read (a newer wiretape may have "
                                "written it: read the run with that one)")
    else:
        raise BlobError(f"body {_short(digest)} has no valid codec ({_kind(codec)})")
    if blob_hash(data) != digest:
        raise BlobError(f"body {_short(digest)} does not have the hash it is stored under")
    if cache is not None:
        cache[digest] = data
    return data


def _reference(db: sqlite3.Connection, digest: str, ref: object,
               cache: dict[str, bytes] | None, limit: int, chain: set[str]) -> bytes:
    """The bytes of the body ``ref`` that the body ``digest`` is stored
    against (a dictionary or a splice's source), read within the same
    bounds, one more link in ``chain``."""
    if not isinstance(ref, str):
        raise BlobError(f"body {_short(digest)} names no body it is stored against")
    try:
        return _get(db, ref, cache, limit, chain | {digest})
    except KeyError:
        raise BlobError(f"body {_short(digest)} is stored against the body {_short(ref)}, "
                        "which the file does not hold") from None


def _unsplice(db: sqlite3.Connection, digest: str, size: int, ref: object, payload: bytes,
              cache: dict[str, bytes] | None, limit: int, chain: set[str]) -> bytes:
    """The body ``digest`` (``size`` bytes, within the limit already) that
    ``payload`` splices from the body ``ref``: the header checked against
    ``size`` before ``ref`` is read and against ``ref``'s length after, the
    new bytes decompressed to at most their own length."""
    what = f"body {_short(digest)}"
    if len(payload) < _SPLICE.size or not payload.startswith(_SPLICE_MAGIC):
        raise BlobError(f"{what} is stored as a splice but its header is malformed")
    _, how, prefix, suffix = _SPLICE.unpack_from(payload)
    if how not in (_MIDDLE_RAW, _MIDDLE_ZSTD):
        raise BlobError(f"{what} is stored as a splice but says its new bytes are stored in an "
                        f"unknown way ({how})")
    if prefix + suffix > size:
        raise BlobError(f"{what} says it is {size} bytes but keeps {prefix} + {suffix} bytes of "
                        "the body it is spliced from")
    base = _reference(db, digest, ref, cache, limit, chain)
    if prefix + suffix > len(base):
        raise BlobError(f"{what} keeps {prefix} + {suffix} bytes of the body {_short(ref)} it "
                        f"is spliced from, which has {len(base)}")
    new_size = size - prefix - suffix
    stored = payload[_SPLICE.size:]
    if how == _MIDDLE_ZSTD:
        new = _decompress(stored, new_size, None, digest, f"{what} (its new bytes)")
    elif len(stored) != new_size:
        raise BlobError(f"{what} says its new bytes are {new_size} but {len(stored)} are stored")
    else:
        new = stored
    return b"".join((base[:prefix], new, base[len(base) - suffix:]))


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
                digest: str, what: str | None = None) -> bytes:
    what = what or f"body {_short(digest)}"
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise BlobError(f"{what} is not zstd data ({exc})") from exc
    if declared not in (-1, size):  # -1: the frame does not say
        raise BlobError(f"{what} says it is {size} bytes but its compressed "
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
        raise BlobError(f"{what} cannot be decompressed ({exc})") from exc
    if len(out) != size:
        more = "more" if len(out) > size else str(len(out))
        raise BlobError(f"{what} says it is {size} bytes but decompresses to "
                        f"{more}")
    return bytes(out)


def _short(digest: object) -> str:
    return str(digest)[:12]


def _kind(value: object) -> str:
    if value is None:
        return "NULL"
    return {int: "an integer", float: "a real", str: "text", bytes: "bytes"}.get(
        type(value), type(value).__name__)
