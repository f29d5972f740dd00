"""Looking for secrets in a run file the hard way: the file's own bytes
(and any journal beside it), every blob decompressed, and every blob that
is itself a gzip, deflate or zstd body decoded too."""

from __future__ import annotations

import gzip
import io
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import zstandard

from wiretape.store import blobs


def _decoded(data: bytes) -> Iterator[bytes]:
    attempts = (
        lambda d: gzip.decompress(d),
        lambda d: zlib.decompress(d),
        lambda d: zlib.decompress(d, -zlib.MAX_WBITS),
        lambda d: zstandard.ZstdDecompressor().stream_reader(io.BytesIO(d)).read(),
    )
    for attempt in attempts:
        try:
            decoded = attempt(data)
        except Exception:  # not that coding: try the next
            continue
        yield decoded


def run_file_texts(path: Path) -> Iterator[tuple[str, bytes]]:
    """(where, bytes) for everything a run file holds, decoded every way."""
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-journal")):
        if file.exists():
            yield file.name, file.read_bytes()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for (digest,) in db.execute("SELECT hash FROM blobs").fetchall():
            data = blobs.get(db, digest)
            yield f"blob {digest[:8]}", data
            for n, decoded in enumerate(_decoded(data)):
                yield f"blob {digest[:8]} decoded ({n})", decoded
    finally:
        db.close()


def places_holding(path: Path, secrets: Iterable[bytes]) -> list[str]:
    """Where in the run file any of ``secrets`` is found (empty: nowhere)."""
    wanted = [s for s in secrets if s]
    return [f"{where}: {secret[:6]!r}..." for where, data in run_file_texts(path)
            for secret in wanted if secret in data]


def assert_nowhere(path: Path, secrets: Iterable[bytes]) -> None:
    found = places_holding(path, secrets)
    assert not found, f"secrets left in {path}: {found}"
