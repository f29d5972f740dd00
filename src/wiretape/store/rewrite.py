"""Copying a run file into a new one with every stored text passed through
a :class:`Rewriter` (``wiretape scrub``; ``wiretape scan`` copies into a
file it throws away and keeps what the rewriter found).

The copy is built from nothing, table by table, so no page of the new
file ever held what the rewriter took out (SQLite keeps deleted bytes in
free pages; rewriting in place would leave them there). Bodies are stored
again content-addressed, requests compressed against the previous one as
a recording does. Tables this module does not know are copied as they
are. Knows nothing of what a secret is.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from wiretape.errors import RunFileError, RunFileWriteError, write_failure_reason
from wiretape.model import Exchange, Redaction
from wiretape.snapshot.tree import is_text
from wiretape.store import blobs, schema
from wiretape.store.runfile import RunFile

#: Meta keys whose values are the run's own bookkeeping, copied as they are.
_META_AS_IS = frozenset({"run_id", "wiretape_version", "started_at_ns", "ended_at_ns",
                         "exit_status", "mode", "cwd", "intercept", "snapshot_policy",
                         "left_out", "scrubbed", "allow"})
#: Meta keys holding bytes as latin-1 text.
_META_BYTES = {"stdout": "stdout", "stderr": "stderr"}
#: What each other meta key is called as a place.
_META_PLACES = {"argv": "argv", "env_names": "env-names", "credential_env": "env-names",
                "connect": "connect", "extra": "extra"}
_KNOWN_TABLES = frozenset({"meta", "origins", "blobs", "exchanges", "frames", "redactions",
                           "messages",
                           "replays", "replay_requests", "snapshots", "snapshot_entries",
                           "outcome_changes"})


class Rewriter(Protocol):
    """What a copy does to each stored value. ``place`` names where it is
    (``stdout``, ``snapshot:PATH``, ``replay:ID``, ...)."""

    def exchange(self, exchange: Exchange) -> tuple[Exchange, list[Redaction]]:
        """The exchange as it is to be stored, and the facts of what changed."""
        ...

    def text(self, data: bytes, place: str) -> bytes:
        """Bytes of text (output, a file's contents)."""
        ...

    def json(self, value: object, place: str) -> object:
        """A stored JSON value (every string in it)."""
        ...

    def keep(self, path: str, empty: bool) -> bool:
        """Whether a snapshot's entry at ``path`` (relative) is kept;
        ``empty``: it holds no bytes (a folder; an outcome row of no size)."""
        ...

    def binary(self, data: bytes, place: str) -> None:
        """``data`` at ``place`` is not text: it is copied as it is."""
        ...

    def run_facts(self) -> list[Redaction]:
        """Facts found outside exchanges so far (stored with the copy)."""
        ...


def _rows(db: sqlite3.Connection, sql: str, *args: object) -> Iterator[tuple[object, ...]]:
    yield from db.execute(sql, args).fetchall()


def rewrite(src_path: Path, dst_path: Path, rw: Rewriter) -> None:
    """Write a copy of the run at ``src_path`` to ``dst_path`` (a new file,
    fsynced) with every stored value passed through ``rw``. Raises
    RunFileError."""
    # Read-only and its schema checked; an older version read as it is.
    reader = RunFile.open(src_path)
    reader.info()
    src = reader.connection
    try:
        fd = os.open(dst_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        dst = sqlite3.connect(dst_path, isolation_level=None, check_same_thread=False)
        dst.execute("PRAGMA journal_mode = DELETE")
        dst.execute("PRAGMA synchronous = OFF")  # one fsync of the whole file at the end
        schema.create(dst)
    except (OSError, sqlite3.Error) as exc:
        reader.close()
        raise RunFileWriteError(dst_path, write_failure_reason(exc)) from exc
    writer = RunFile(dst_path, dst, writable=True)
    try:
        with dst:
            _copy_meta(src, dst, rw)
            _copy_exchanges(reader, writer, rw)
            _copy_snapshots(src, dst, rw)
            _copy_replays(src, dst, rw)
            _copy_unknown(src, dst)
            dst.executemany(
                "INSERT INTO redactions (seq, location, name, fingerprint) VALUES (NULL,?,?,?)",
                [(f.location, f.name, f.fingerprint) for seq, f in reader.redactions()
                 if seq is None]
                + [(f.location, f.name, f.fingerprint) for f in rw.run_facts()])
    except RunFileError:
        dst.close()
        reader.close()
        os.unlink(dst_path)
        raise
    except (sqlite3.Error, KeyError, ValueError, TypeError) as exc:
        dst.close()
        reader.close()
        os.unlink(dst_path)
        if isinstance(exc, sqlite3.Error) and write_failure_reason(exc) != str(exc):
            raise RunFileWriteError(dst_path, write_failure_reason(exc)) from exc
        raise RunFileError(src_path, f"{exc}; the file is damaged") from exc
    dst.close()
    reader.close()
    with open(dst_path, "rb") as fh:
        os.fsync(fh.fileno())


def _copy_meta(src: sqlite3.Connection, dst: sqlite3.Connection, rw: Rewriter) -> None:
    for key, raw in _rows(src, "SELECT key, value FROM meta"):
        value: object = json.loads(str(raw))
        name = str(key)
        if name in _META_BYTES and isinstance(value, str):
            value = rw.text(value.encode("latin-1"), _META_BYTES[name]).decode("latin-1")
        elif name not in _META_AS_IS:
            value = rw.json(value, _META_PLACES.get(name, f"meta:{name}"))
        dst.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (name, json.dumps(value)))
    for origin, upstream, port, env in _rows(src, "SELECT name, upstream, port, env_vars "
                                                  "FROM origins ORDER BY rowid"):
        dst.execute("INSERT INTO origins (name, upstream, port, env_vars) VALUES (?, ?, ?, ?)",
                    (origin, rw.json(upstream, "origins"), port, env))


def _copy_exchanges(reader: RunFile, writer: RunFile, rw: Rewriter) -> None:
    facts_of: dict[int, list[Redaction]] = {}
    for seq, fact in reader.redactions():
        if seq is not None:
            facts_of.setdefault(seq, []).append(fact)
    for exchange in reader.iter_exchanges():
        stored, found = rw.exchange(exchange)
        writer.write_exchange(stored, facts_of.get(exchange.seq, []) + found)


def _copy_snapshots(src: sqlite3.Connection, dst: sqlite3.Connection, rw: Rewriter) -> None:
    #: (snapshot id, path) to the digest of its bytes as copied
    digests: dict[tuple[int, str], str] = {}
    for sid, root, taken in _rows(src, "SELECT id, root, taken_at_ns FROM snapshots ORDER BY id"):
        kept_files = kept_bytes = 0
        for path, kind, mode, blob, link in _rows(
                src, "SELECT path, kind, mode, blob, link FROM snapshot_entries "
                     "WHERE snapshot_id = ? ORDER BY path", sid):
            if not rw.keep(str(path), kind == "dir"):
                continue
            digest = None
            if blob is not None:
                data = blobs.get(src, str(blob))
                if is_text(data):
                    data = rw.text(data, f"snapshot:{path}")
                else:
                    rw.binary(data, f"snapshot:{path}")
                digest = blobs.put(dst, data)
                digests[(int(str(sid)), str(path))] = digest
                kept_files += 1
                kept_bytes += len(data)
            dst.execute("INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link)"
                        " VALUES (?, ?, ?, ?, ?, ?)", (sid, path, kind, mode, digest, link))
        dst.execute("INSERT INTO snapshots (id, root, taken_at_ns, files, bytes) "
                    "VALUES (?, ?, ?, ?, ?)", (sid, root, taken, kept_files, kept_bytes))
    _copy_outcome(src, dst, rw, digests)


def _copy_outcome(src: sqlite3.Connection, dst: sqlite3.Connection, rw: Rewriter,
                  digests: Mapping[tuple[int, str], str]) -> None:
    for sid, path, change, detail in _rows(
            src, "SELECT snapshot_id, path, change, detail FROM outcome_changes ORDER BY rowid"):
        row = json.loads(str(detail))
        if not isinstance(row, dict):
            raise ValueError("an outcome change is not an object")
        if not rw.keep(str(path), not row.get("before_size") and not row.get("after_size")):
            continue
        place = f"outcome:{path}"
        if isinstance(row.get("diff"), str):
            row["diff"] = rw.text(row["diff"].encode("utf-8", "surrogateescape"),
                                  place).decode("utf-8", "surrogateescape")
        before = row.get("before_hash")
        if isinstance(before, str):
            row["before_hash"] = digests.get((int(str(sid)), str(path)), before)
        after = row.get("after_hash")
        if isinstance(after, str):
            try:
                data = blobs.get(src, after)
            except KeyError:
                data = None  # not kept (too large, binary): the hash stays
            if data is not None:
                if is_text(data):
                    data = rw.text(data, place)
                else:
                    rw.binary(data, place)
                ref = row["before_hash"] if isinstance(row.get("before_hash"), str) else None
                exists = ref is not None and dst.execute(
                    "SELECT 1 FROM blobs WHERE hash = ?", (ref,)).fetchone()
                row["after_hash"] = blobs.put(dst, data, ref=ref if exists else None)
        dst.execute("INSERT INTO outcome_changes (snapshot_id, path, change, detail) "
                    "VALUES (?, ?, ?, ?)", (sid, path, change, json.dumps(row)))


def _copy_replays(src: sqlite3.Connection, dst: sqlite3.Connection, rw: Rewriter) -> None:
    for row in _rows(src, "SELECT id, started_at_ns, ended_at_ns, mode, settings, exit_status,"
                          " stdout, stderr, outcome FROM replays ORDER BY rowid"):
        rid, started, ended, mode, settings, status, stdout, stderr, outcome = row
        place = f"replay:{rid}"
        dst.execute(
            "INSERT INTO replays (id, started_at_ns, ended_at_ns, mode, settings, exit_status,"
            " stdout, stderr, outcome) VALUES (?,?,?,?,?,?,?,?,?)",
            (rid, started, ended, mode, json.dumps(rw.json(json.loads(str(settings)), place)),
             status, _bytes(rw, stdout, place), _bytes(rw, stderr, place),
             json.dumps(rw.json(json.loads(str(outcome)), place)) if outcome else outcome))
    for row in _rows(src, "SELECT replay_id, idx, kind, seq, served, method, target,"
                          " decided_at_ns, detail FROM replay_requests ORDER BY rowid"):
        rid, idx, kind, seq, served, method, target, decided, detail = row
        place = f"replay:{rid}"
        dst.execute(
            "INSERT INTO replay_requests (replay_id, idx, kind, seq, served, method, target,"
            " decided_at_ns, detail) VALUES (?,?,?,?,?,?,?,?,?)",
            (rid, idx, kind, seq, served, method, _bytes(rw, target, place), decided,
             json.dumps(rw.json(json.loads(str(detail)), place))))


def _bytes(rw: Rewriter, value: object, place: str) -> object:
    if isinstance(value, bytes):
        return rw.text(value, place)
    if isinstance(value, str):
        return rw.text(value.encode("utf-8", "surrogateescape"),
                       place).decode("utf-8", "surrogateescape")
    return value


def _copy_unknown(src: sqlite3.Connection, dst: sqlite3.Connection) -> None:
    """Tables a newer part of wiretape added: copied as they are."""
    for name, sql in _rows(src, "SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
        if str(name) in _KNOWN_TABLES or str(name).startswith("sqlite_"):
            continue
        if not dst.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
            dst.execute(str(sql))
        rows = src.execute(f'SELECT * FROM "{name}"').fetchall()
        if rows:
            marks = ", ".join("?" * len(rows[0]))
            dst.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)
