"""A long response body while it is recorded: held in memory up to a
threshold, then redacted and written to the run file in parts as it
streams, off the event loop (DESIGN.md, "Long responses").

:class:`Gathered` is what the recorder's frame loop feeds: every frame's
time and length, and its bytes until the body passes ``spool_at`` bytes;
from then on the bytes go, a batch at a time, to a :class:`Spool`, which
redacts them (:class:`StreamRedactor`), compresses them and stages each
batch as a part in its own transaction on a worker thread. The exchange's
final transaction makes the body out of its parts
(``RunFile.write_spooled_exchange``); until then no reader can reach them.

The relay of a frame never waits for these writes: the frame is relayed
first, then handed over. When the disk is slower than the origin, at most
``batches`` batches wait for it; the next read from the origin then waits
too (backpressure), so memory stays bounded whatever the origin's pace.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from array import array
from collections.abc import Callable, Iterator, Sequence

from wiretape import codings
from wiretape.model import Frame, Headers, Redaction, header_values
from wiretape.redaction import Facts, Rules, fingerprint, redact_text
from wiretape.store import blobs
from wiretape.store.runfile import RunFile, SpooledBody

#: Bytes of a response body held in memory before it is spooled.
DEFAULT_SPOOL_AT = 8 * 1024 * 1024
#: The longest secret found wherever it lies in a spooled body (bytes):
#: every secret shape but the unbounded ones is far shorter (keys are under
#: 300 bytes, a PEM private key under 8 KiB).
SECRET_REACH = 64 * 1024
#: Bytes redacted at a time, and so the most a part holds (about).
_WINDOW = 2 * 1024 * 1024


class StreamRedactor:
    """Redaction of a body that arrives in pieces, with the same rules and
    replacements as ``redaction.redact_text`` on the whole.

    Each :meth:`feed` scans the bytes given together with the last
    ``reach`` bytes before them, and gives back everything but those last
    ``reach`` bytes, redacted; :meth:`flush` gives back the rest. The
    bytes kept are the original ones, and the ``reach`` bytes before them
    (already given back) are scanned again with them, so a secret of up to
    ``reach`` bytes is masked whole wherever it lies, a piece boundary
    included, and a look-behind sees the bytes before it. A longer match
    that runs past what has arrived is masked up to there only. One fact
    per distinct secret (location, label, fingerprint) of the body.
    """

    def __init__(self, rules: Rules, location: str, reach: int = SECRET_REACH) -> None:
        longest = max((len(v) for _, v in rules.literals), default=0)
        self._rules = rules
        self._location = location
        self._reach = max(reach, 2 * longest)
        self._before = b""  # original bytes already given back (look-behind, rescan)
        self._kept = b""  # original bytes not given back yet
        self._facts: dict[Redaction, None] = {}
        self._given = 0  # bytes given back so far

    @property
    def facts(self) -> list[Redaction]:
        return list(self._facts)

    def _scan(self, window: bytes, *, first: bool, last: bool) -> bytes:
        """``window`` redacted; its facts kept but those of a match cut
        off by the window's end (unless ``last``: the body's end) or
        begun at its start without the bytes before it (unless ``first``):
        each is found whole in another window."""
        found = Facts()
        masked = redact_text(window, self._location, self._rules, found)[0]
        items = found.items
        if not first:
            _drop_edge(items, window, masked, _LEADING_MASK.match(masked))
        if not last:
            _drop_edge(items, window, masked, _trailing_mask(masked))
        self._facts.update(dict.fromkeys(items))
        return masked

    def feed(self, pieces: Sequence[bytes]) -> bytes:
        """The redacted bytes that can be given back now (possibly none)."""
        window = b"".join([self._before, self._kept, *pieces])
        start = len(self._before)
        cut = max(start, len(window) - self._reach)
        out = b""
        if cut > start:
            out = self._scan(window, first=self._given <= self._reach, last=False)[start:cut]
            self._given += cut - start
        self._before, self._kept = window[max(0, cut - self._reach):cut], window[cut:]
        return out

    def flush(self) -> bytes:
        """The redacted rest of the body, once it has all arrived."""
        start = len(self._before)
        out = self._scan(self._before + self._kept, first=self._given <= self._reach,
                         last=True)[start:]
        self._before = self._kept = b""
        return out


#: A replacement (``redaction._mask``'s shape) at a window's start or end.
_LEADING_MASK = re.compile(rb"<redacted\**>|\*+")
_LONG_MASK = re.compile(rb"<redacted\**>")


def _trailing_mask(masked: bytes) -> tuple[int, int] | None:
    """The span of a replacement that ends ``masked``, if one does (found
    from the end: linear whatever the bytes)."""
    if masked.endswith(b">"):
        start = masked.rfind(b"<redacted")
        if start >= 0 and _LONG_MASK.fullmatch(masked, start):
            return start, len(masked)
    stars = len(masked) - len(masked.rstrip(b"*"))
    return (len(masked) - stars, len(masked)) if stars else None


def _drop_edge(items: list[Redaction], window: bytes, masked: bytes,
               edge: re.Match[bytes] | tuple[int, int] | None) -> None:
    """Drop from ``items`` the one fact of the replacement at ``edge`` (a
    span at the window's start or end), when it replaced something."""
    if edge is None:
        return
    start, end = edge.span() if isinstance(edge, re.Match) else edge
    if masked[start:end] == window[start:end]:
        return
    print_ = fingerprint(window[start:end])
    for i in range(len(items) - 1, -1, -1) if end == len(masked) else range(len(items)):
        if items[i].fingerprint == print_:
            del items[i]
            return


class Spool:
    """A response body being staged in parts in ``run``: each batch
    :meth:`put` is redacted and written as a part by a worker task, in
    order (never a coded body: :func:`may_spool`).
    Create it on the event loop; :meth:`close` it before :meth:`finish`."""

    def __init__(self, run: RunFile, rules: Rules, *, batches: int = 2) -> None:
        self.token = secrets.token_hex(16)
        self._run = run
        self._redactor = StreamRedactor(rules, "response-body")
        self._queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(maxsize=batches)
        self._sizes: list[int] = []
        self._sha = hashlib.sha256()
        self._error: Exception | None = None
        self._task = asyncio.create_task(self._drain(), name=f"wiretape-spool-{self.token[:8]}")

    async def put(self, pieces: list[bytes]) -> None:
        """Hand over a batch; waits while ``batches`` batches wait already."""
        await self._queue.put(pieces)

    async def close(self, pieces: list[bytes]) -> None:
        """Hand over the last batch and wait until every batch is staged
        (or the staging failed: :meth:`finish` raises)."""
        if pieces:
            await self._queue.put(pieces)
        await self._queue.put(None)
        await asyncio.shield(self._task)

    async def _drain(self) -> None:
        while (pieces := await self._queue.get()) is not None:
            if self._error is not None:
                continue  # the staging failed: drop, so that no one waits
            try:
                await asyncio.to_thread(self._stage, pieces)
            except Exception as exc:  # reported by finish
                self._error = exc

    def _stage(self, pieces: list[bytes]) -> None:
        # a few MiB at a time: a window and its redacted copy stay small
        group: list[bytes] = []
        size = 0
        for piece in pieces:
            group.append(piece)
            size += len(piece)
            if size >= _WINDOW:
                self._write(self._redactor.feed(group))
                group, size = [], 0
        if group:
            self._write(self._redactor.feed(group))

    def _write(self, data: bytes) -> None:
        if not data:
            return
        self._sha.update(data)
        codec, payload = blobs.compress_part(data)
        self._run.stage_part(self.token, len(self._sizes), len(data), codec, payload)
        self._sizes.append(len(data))

    def finish(self) -> tuple[SpooledBody, list[Redaction]]:
        """Stage the rest of the body (blocking: on a worker thread, after
        :meth:`close`); the body as staged and the facts of what its
        redaction found. Raises what staging raised (RunFileWriteError)."""
        if self._error is not None:
            raise self._error
        self._write(self._redactor.flush())
        return (SpooledBody(self.token, tuple(self._sizes), self._sha.hexdigest()),
                self._redactor.facts)


def may_spool(headers: Headers) -> bool:
    """Whether a response with these headers may be spooled: not one whose
    body is coded (``Content-Encoding``: gzip, deflate, zstd, br), which
    redaction reads decoded, and codes again when it masked a secret
    (``redaction.redact_pieces``): that is done on the whole body, so such
    a response is held whole whatever its length."""
    return not codings.parse(header_values(headers, b"content-encoding"))


class Gathered:
    """A response body as its frames arrive: each frame's offset (ns from
    the request's start) and length, and its bytes, held until the body
    passes ``spool_at`` bytes, then handed to a Spool (``start_spool``
    makes it) a batch of about ``spool_at // 4`` bytes at a time. Frame
    times and lengths are kept in compact arrays (16 bytes a frame)."""

    def __init__(self, spool_at: int, start_spool: Callable[[], Spool]) -> None:
        self._spool_at = spool_at
        self._batch = max(64 * 1024, spool_at // 4)
        self._start_spool = start_spool
        self._offsets = array("q")
        self._lengths = array("q")
        self._pending: list[bytes] = []  # bytes not handed to a spool
        self._pending_bytes = 0
        self.spool: Spool | None = None

    def add(self, offset_ns: int, data: bytes) -> None:
        self._offsets.append(offset_ns)
        self._lengths.append(len(data))
        self._pending.append(data)
        self._pending_bytes += len(data)

    def due(self) -> bool:
        """Whether :meth:`spill` has bytes to hand over (enough are held)."""
        return self._pending_bytes >= (self._spool_at if self.spool is None else self._batch)

    async def spill(self) -> None:
        """Hand the bytes held to the spool once there are enough (the
        first time: more than ``spool_at``); may wait for the disk
        (backpressure). Call it after the frame is relayed."""
        if not self.due():
            return
        if self.spool is None:
            self.spool = self._start_spool()
        await self.spool.put(self._pending)
        self._pending, self._pending_bytes = [], 0

    def frames(self) -> tuple[Frame, ...]:
        """The frames, when no spool was started (else none)."""
        if self.spool is not None:
            return ()
        return tuple(Frame(o, d) for o, d in zip(self._offsets, self._pending, strict=True))

    def take_pending(self) -> list[bytes]:
        """The bytes not handed to the spool yet (for ``Spool.close``)."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        return pending

    def frame_rows(self) -> Iterator[tuple[int, int]]:
        """Every frame as (offset_ns, length), in order."""
        return zip(self._offsets, self._lengths, strict=True)
