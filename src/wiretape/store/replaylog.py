"""Replay logs: each replay's settings, one row per request as it is decided,
and its outcome, kept beside the run rather than in it (DESIGN.md, "The
run file").

A replay never writes the run it replays: the run may be committed, read-
only, or someone else's. Its log goes to the user's folder of replay logs
(``store.locate.replay_logs_dir``: ``$WIRETAPE_HOME/replays``, else
``~/.local/state/wiretape/replays``), one SQLite file per run
(``<run-id>.replays``), and each replay in it is tied to the run's content
(the sha256 of its bytes): a copy of a run shares its replays, other bytes
under the same run id never do. The folder gets a ``.gitignore`` of its
own, so a store kept inside a git working tree stays clean.

A replay is written when it starts; one with no command of its own
(``serve --replay``) only with its first decided request, so one stopped
before any client came stores nothing. Old run files kept their replays
inside; those are read (never written) when the log has none for the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from wiretape.model import (
    Outcome,
    ReplayKind,
    ReplayMode,
    ReplayRecord,
    ReplayRow,
    ReplaySettingsJSON,
    RequestDetail,
)
from wiretape.store import shapes
from wiretape.store.database import connect_read, connect_write, statements, transaction
from wiretape.store.database import schema_problem as _schema_problem

LOG_VERSION = 1

_LOG_V1 = """
CREATE TABLE replays (
  id TEXT PRIMARY KEY,
  run_hash TEXT NOT NULL,         -- sha256 of the run file replayed
  source TEXT NOT NULL,           -- the run file's absolute path as given
  started_at_ns INTEGER NOT NULL,
  ended_at_ns INTEGER,
  mode TEXT NOT NULL,
  settings TEXT NOT NULL,         -- JSON: pace, argv, cwd, substitutions
  exit_status INTEGER,
  stdout BLOB,
  stderr BLOB,
  outcome TEXT                    -- JSON, written at the end
);
CREATE TABLE replay_requests (
  replay_id TEXT NOT NULL REFERENCES replays(id),
  idx INTEGER NOT NULL,           -- order in which the request was decided
  kind TEXT NOT NULL,             -- exact, substituted, diverged, missing
  seq INTEGER,                    -- recorded exchange served or compared with
  served INTEGER NOT NULL,        -- 1 when the recorded response was sent
  method BLOB NOT NULL,
  target BLOB NOT NULL,
  decided_at_ns INTEGER NOT NULL,
  detail TEXT NOT NULL,           -- JSON: what differed
  PRIMARY KEY (replay_id, idx)
);
"""

_KINDS: tuple[ReplayKind, ...] = ("exact", "substituted", "equivalent", "diverged", "missing")
_MODES: tuple[ReplayMode, ...] = ("strict", "diagnostic")


class LogError(Exception):
    """A replay log that cannot be read or written (one line)."""


@dataclass
class _Pending:
    """A replay started but not yet in the file."""

    record: ReplayRecord
    stdout: bytes = b""
    stderr: bytes = b""
    rows: list[ReplayRow] = field(default_factory=list)


def replay_record(row: Sequence[object], where: str) -> ReplayRecord:
    """A row (id, started, ended, mode, settings, exit_status, outcome) of a
    replays table, checked. Raises shapes.StoredValueError."""
    rid, started, ended, mode, settings, exit_status, outcome = row
    what = f"{where} replay {str(rid)[:24]!r}"
    return {
        "id": shapes.text(rid, f"{where} replay id"),
        "started_at_ns": shapes.integer(started, f"{what}: its start"),
        "ended_at_ns": shapes.optional_integer(ended, f"{what}: its end"),
        "mode": cast(ReplayMode, shapes.one_of(mode, _MODES, f"{what}: its mode")),
        "settings": shapes.json_value(settings, ReplaySettingsJSON, f"{what}: settings"),
        "exit_status": shapes.optional_integer(exit_status, f"{what}: exit status"),
        "outcome": (None if outcome is None
                    else shapes.json_value(outcome, Outcome, f"{what}: outcome")),
    }


def request_row(row: Sequence[object], where: str) -> ReplayRow:
    """A row (idx, kind, seq, served, method, target, decided, detail) of a
    replay_requests table, checked. Raises shapes.StoredValueError."""
    idx, kind, seq, served, method, target, decided, detail = row
    what = f"{where} replay request {idx if type(idx) is int else '?'}"
    return {
        "index": shapes.integer(idx, f"{where} replay request index", 0),
        "kind": cast(ReplayKind, shapes.one_of(kind, _KINDS, f"{what}: kind")),
        "seq": shapes.optional_integer(seq, f"{what}: sequence number", 0),
        "served": bool(shapes.integer(served, f"{what}: served", 0, 1)),
        "method": shapes.blob(method, f"{what}: method").decode("latin-1"),
        "target": shapes.blob(target, f"{what}: target").decode("latin-1"),
        "decided_at_ns": shapes.integer(decided, f"{what}: decision time"),
        "detail": shapes.json_value(detail, RequestDetail, f"{what}: detail"),
    }


class ReplayLog:
    """The replay log of one run (its content ``run_hash``) at ``path``
    (None: kept in memory only, for a store that cannot be written).

    Opened to read, it reads the file if there is one; :meth:`start` and
    what follows create and write it. Safe for one thread at a time (a lock
    serialises)."""

    def __init__(self, path: Path | None, run_hash: str) -> None:
        self.path = path
        self.run_hash = run_hash
        self._db: sqlite3.Connection | None = None
        self._writing = False
        self._pending: dict[str, _Pending] = {}
        self._sources: dict[str, str] = {}
        self._lock = threading.RLock()

    @property
    def kept(self) -> bool:
        """Whether what is written here outlives the process."""
        return self.path is not None

    # -- the file ----------------------------------------------------------

    def _reader(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        if self.path is None or not self.path.is_file():
            return None
        try:
            db = connect_read(self.path)
            self._check(db)
        except sqlite3.Error as exc:
            raise LogError(f"the replay log {self.path} cannot be read ({exc}); "
                           "delete it to start a new one") from exc
        self._db = db
        return db

    def _writer(self) -> sqlite3.Connection:
        if self._db is not None and self._writing:
            return self._db
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            if self.path is None:
                db = connect_write(Path(":memory:"))
            else:
                _make_folder(self.path.parent)
                db = connect_write(self.path)
                db.execute("PRAGMA journal_mode = WAL")
                # Each row survives a killed process without an fsync per row.
                db.execute("PRAGMA synchronous = NORMAL")
            with transaction(db):
                found = int(db.execute("PRAGMA user_version").fetchone()[0])
                if found == 0:
                    for stmt in statements(_LOG_V1):
                        db.execute(stmt)
                    db.execute(f"PRAGMA user_version = {LOG_VERSION}")
                else:
                    self._check(db)
        except (OSError, sqlite3.Error) as exc:
            raise LogError(f"the replay log {self.path} cannot be written "
                           f"({getattr(exc, 'strerror', None) or exc})") from exc
        self._db, self._writing = db, True
        return db

    def check_writable(self) -> None:
        """Make sure the log can be written, writing nothing yet (its folder
        and file are made with the first replay written). Raises LogError."""
        if self.path is None:
            return
        target = self.path
        while not target.exists() and target.parent != target:
            target = target.parent
        wanted = os.W_OK if target == self.path else os.W_OK | os.X_OK
        if not os.access(target, wanted) or (target != self.path and not target.is_dir()):
            raise LogError(f"the replay log {self.path} cannot be written ({target} is not "
                           "a folder that can be written)")
        if target == self.path:
            self._writer()  # an existing log must be one wiretape wrote

    def _check(self, db: sqlite3.Connection) -> None:
        found = int(db.execute("PRAGMA user_version").fetchone()[0])
        if found != LOG_VERSION:
            raise LogError(f"the replay log {self.path} has version {found}, this wiretape "
                           f"reads {LOG_VERSION}; delete it to start a new one")
        problem = _schema_problem(db, _LOG_V1)
        if problem is not None:
            raise LogError(f"the replay log {self.path} is not one wiretape writes ({problem}); "
                           "delete it to start a new one")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                if self._writing and self.path is not None:
                    # Another replay may hold it; its own close folds the WAL in.
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._db.close()
                self._db = None

    # -- writing -----------------------------------------------------------

    def start(self, replay_id: str, mode: str, settings: ReplaySettingsJSON, source: Path, *,
              lazy: bool = False) -> None:
        """Write a replay's start (so a replay killed early still shows as
        one that did not finish); ``lazy``: only with its first request, so
        a replay that answered nobody and ran no agent is never stored."""
        with self._lock:
            self._pending[replay_id] = _Pending({
                "id": replay_id, "started_at_ns": time.time_ns(), "ended_at_ns": None,
                "mode": cast(ReplayMode, mode),
                "settings": settings, "exit_status": None, "outcome": None,
            })
            self._sources[replay_id] = str(source.absolute())
            if not lazy:
                db = self._writer()
                with transaction(db):
                    self._flush_start(db, replay_id)

    def _flush_start(self, db: sqlite3.Connection, replay_id: str) -> None:
        pending = self._pending.pop(replay_id, None)
        if pending is None:
            return
        r = pending.record
        db.execute(
            "INSERT INTO replays (id, run_hash, source, started_at_ns, mode, settings)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (replay_id, self.run_hash, self._sources.get(replay_id, ""), r["started_at_ns"],
             r["mode"], json.dumps(r["settings"])))

    def add_request(self, replay_id: str, idx: int, kind: ReplayKind, seq: int | None,
                    served: bool, method: bytes, target: bytes, detail: RequestDetail, *,
                    decided_at_ns: int | None = None) -> None:
        """Write one request's outcome, decided at ``decided_at_ns`` (epoch
        ns; None: now), with the replay's start the first time."""
        with self._lock:
            db = self._writer()
            with transaction(db):
                self._flush_start(db, replay_id)
                db.execute(
                    "INSERT INTO replay_requests (replay_id, idx, kind, seq, served, method,"
                    " target, decided_at_ns, detail) VALUES (?,?,?,?,?,?,?,?,?)",
                    (replay_id, idx, kind, seq, int(served), method, target,
                     time.time_ns() if decided_at_ns is None else decided_at_ns,
                     json.dumps(detail)))

    def finish(self, replay_id: str, exit_status: int | None, stdout: bytes, stderr: bytes,
               outcome: Outcome) -> None:
        """Write the replay's end. A lazy replay that answered nobody and
        ran no agent stays in memory: it is reported, never stored."""
        with self._lock:
            pending = self._pending.get(replay_id)
            if pending is not None and exit_status is None:
                pending.record["ended_at_ns"] = time.time_ns()
                pending.record["outcome"] = outcome
                pending.stdout, pending.stderr = stdout, stderr
                return
            db = self._writer()
            with transaction(db):
                self._flush_start(db, replay_id)
                db.execute(
                    "UPDATE replays SET ended_at_ns = ?, exit_status = ?, stdout = ?,"
                    " stderr = ?, outcome = ? WHERE id = ?",
                    (time.time_ns(), exit_status, stdout, stderr, json.dumps(outcome),
                     replay_id))

    # -- reading -----------------------------------------------------------

    def replays(self, source: Path | None = None) -> list[ReplayRecord]:
        """This run's replays, oldest first (``source``: only those that
        replayed the run file at that path). Raises LogError,
        shapes.StoredValueError."""
        with self._lock:
            db = self._reader()
            out: list[ReplayRecord] = []
            if db is not None:
                query = ("SELECT id, started_at_ns, ended_at_ns, mode, settings, exit_status,"
                         " outcome FROM replays WHERE run_hash = ?")
                args: tuple[str, ...] = (self.run_hash,)
                if source is not None:
                    query += " AND source = ?"
                    args += (str(source.absolute()),)
                rows = db.execute(query + " ORDER BY started_at_ns, rowid", args).fetchall()
                out = [replay_record(row, "the replay log's") for row in rows]
            out += [p.record for rid, p in self._pending.items()
                    if source is None or self._sources.get(rid) == str(source.absolute())]
            return out

    def requests(self, replay_id: str) -> list[ReplayRow] | None:
        """The request rows of ``replay_id`` (None: no such replay here)."""
        with self._lock:
            if replay_id in self._pending:
                return list(self._pending[replay_id].rows)
            db = self._reader()
            if db is None:
                return None
            known = db.execute("SELECT 1 FROM replays WHERE id = ? AND run_hash = ?",
                               (replay_id, self.run_hash)).fetchone()
            if known is None:
                return None
            rows = db.execute(
                "SELECT idx, kind, seq, served, method, target, decided_at_ns, detail"
                " FROM replay_requests WHERE replay_id = ? ORDER BY idx", (replay_id,)).fetchall()
            return [request_row(row, "the replay log's") for row in rows]


def _make_folder(folder: Path) -> None:
    """The log folder, with a ``.gitignore`` that keeps it out of git."""
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        try:
            fd = os.open(ignore, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as fh:
            fh.write("# wiretape's replay logs: local to this machine\n*\n")
