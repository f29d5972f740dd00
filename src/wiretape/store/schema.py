"""The run file's SQLite schema and its migrations.

Owns the DDL, the schema version (``PRAGMA user_version``), the check that
a file's schema is the one wiretape wrote for its version, and the steps
that bring an older file forward. Knows nothing of exchanges as objects.

Readers never migrate a file: an older file is read as it is, with the
tables later versions added supplied empty as TEMP tables of the reading
connection (:func:`later_tables`). Only a connection that writes migrates,
in one transaction with the version bump.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from wiretape.errors import RunFileError, SchemaTooNew
from wiretape.store.database import schema_problem, statements, transaction

SCHEMA_VERSION = 3

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE origins (
  name TEXT PRIMARY KEY, upstream TEXT NOT NULL, port INTEGER NOT NULL, env_vars TEXT NOT NULL
);
CREATE TABLE blobs (
  hash TEXT PRIMARY KEY,          -- sha256 hex of the uncompressed bytes
  size INTEGER NOT NULL,          -- uncompressed bytes
  codec TEXT NOT NULL,            -- 'raw', 'zstd', 'zstd-ref' (ref's bytes as dictionary),
                                  -- 'splice' (ref's start and end kept, new bytes between),
                                  -- or 'parts'
  ref TEXT,                       -- hash of the reference blob ('zstd-ref', 'splice'),
                                  -- the part set's token ('parts')
  depth INTEGER NOT NULL DEFAULT 0,
  data BLOB NOT NULL
);
CREATE TABLE exchanges (
  seq INTEGER PRIMARY KEY,
  connection_id INTEGER NOT NULL,
  origin TEXT NOT NULL,
  started_at_ns INTEGER NOT NULL,
  method BLOB NOT NULL,
  target BLOB NOT NULL,
  http_version BLOB NOT NULL,
  request_headers TEXT NOT NULL,  -- JSON list of [name, value], latin-1 text
  request_body TEXT NOT NULL REFERENCES blobs(hash),
  status INTEGER,
  reason BLOB,
  response_http_version BLOB,
  response_headers TEXT,
  response_body TEXT REFERENCES blobs(hash),
  ending TEXT NOT NULL,
  ttfb_ns INTEGER,
  duration_ns INTEGER NOT NULL,
  error TEXT
);
CREATE TABLE frames (
  seq INTEGER NOT NULL,
  idx INTEGER NOT NULL,
  offset_ns INTEGER NOT NULL,     -- from the start of the request
  start INTEGER NOT NULL,         -- byte offset into the response body
  length INTEGER NOT NULL,
  PRIMARY KEY (seq, idx)
);
CREATE TABLE redactions (
  seq INTEGER,                    -- NULL for run-level facts
  location TEXT NOT NULL,
  name TEXT NOT NULL,
  fingerprint TEXT NOT NULL
);
CREATE TABLE replays (
  id TEXT PRIMARY KEY,
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

# Version 2: snapshots of the agent's trees and what the agent changed in them.
_V2 = """
CREATE TABLE snapshots (
  id INTEGER PRIMARY KEY,
  root TEXT NOT NULL,             -- absolute path of the tree when recorded
  taken_at_ns INTEGER NOT NULL,
  files INTEGER NOT NULL,
  bytes INTEGER NOT NULL
);
CREATE TABLE snapshot_entries (
  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
  path TEXT NOT NULL,             -- relative POSIX path
  kind TEXT NOT NULL,             -- file, dir, symlink
  mode INTEGER NOT NULL,
  blob TEXT REFERENCES blobs(hash),
  link TEXT,
  PRIMARY KEY (snapshot_id, path)
);
CREATE TABLE outcome_changes (
  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
  path TEXT NOT NULL,
  change TEXT NOT NULL,           -- added, modified, deleted
  detail TEXT NOT NULL            -- JSON: hashes, sizes, binary, text diff
);
"""

# Version 3: the WebSocket messages after an upgrade's 101 (DESIGN.md, "WebSockets").
_V3 = """
CREATE TABLE messages (
  seq INTEGER NOT NULL,           -- the exchange whose handshake opened the session
  idx INTEGER NOT NULL,           -- order of the message in the session
  direction TEXT NOT NULL,        -- client, server
  opcode TEXT NOT NULL,           -- text, binary, ping, pong, close
  offset_ns INTEGER NOT NULL,     -- from the start of the handshake
  size INTEGER NOT NULL,          -- the payload's bytes, as the application saw them
                                  -- (a close: its reason)
  payload BLOB,                   -- the payload itself when under 1 KiB, else NULL
  blob TEXT REFERENCES blobs(hash), -- else the body holding it (compressed, shared)
  close_code INTEGER,             -- a close's status code (NULL: none was sent)
  PRIMARY KEY (seq, idx)
);
"""


# The DDL of migration i, which brings a file from version i to version i + 1.
_STEPS: dict[int, str] = {0: _V1, 1: _V2, 2: _V3}


def ddl(version: int) -> str:
    """The DDL of a file of ``version``: every step up to it."""
    return "".join(_STEPS[v] for v in range(version))


def later_tables(version: int) -> list[str]:
    """The CREATE TABLE statements later versions added to a file of
    ``version``, as TEMP tables: a reader of an older file sees them empty
    without the file being written (they live in the connection's memory)."""
    return [stmt.replace("CREATE TABLE ", "CREATE TEMP TABLE ", 1)
            for v in range(version, SCHEMA_VERSION) for stmt in statements(_STEPS[v])]


def version(db: sqlite3.Connection) -> int:
    """``PRAGMA user_version``. Raises sqlite3.Error."""
    found = db.execute("PRAGMA user_version").fetchone()[0]
    return int(found)


def check(db: sqlite3.Connection, path: Path) -> int:
    """The schema version of ``db`` after checking that its schema is the
    one wiretape wrote for that version (DESIGN.md, "The run file"); to be
    done before any other query. Raises SchemaTooNew for a newer file,
    RunFileError for anything else (sqlite3.Error for a damaged one)."""
    found = version(db)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(path, found, SCHEMA_VERSION)
    if found <= 0:
        tables = {str(row[0]) for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
        if tables & {"meta", "exchanges", "blobs"}:
            said = "missing (0)" if found == 0 else f"invalid ({found})"
            raise RunFileError(path, f"it holds a run's tables but its schema version is "
                                     f"{said}: it was edited or damaged, and is not read "
                                     "(record the run again, or ask its author for the "
                                     "original)")
        raise RunFileError(path, "it is an SQLite file but not a wiretape run (it has no run "
                                 "schema); give the path of a .wtape file")
    problem = schema_problem(db, ddl(found))
    if problem is not None:
        raise RunFileError(path, f"its schema is not one wiretape writes: {problem}; it was "
                                 "edited or made elsewhere, and is not read (record the run "
                                 "again, or ask its author for the original)")
    return found


def create(db: sqlite3.Connection) -> None:
    """Lay out the current schema in an empty database, in the caller's
    transaction."""
    for v in range(SCHEMA_VERSION):
        for stmt in statements(_STEPS[v]):
            db.execute(stmt)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring ``db`` (a connection that writes) to ``SCHEMA_VERSION`` in one
    transaction, the version bump included: a file is either wholly at its
    old version or wholly at the new one. Returns the version it had.

    Raises SchemaTooNew for a file from a newer wiretape, RunFileError for
    one whose schema is not wiretape's.
    """
    with transaction(db):
        found = version(db)
        if found == 0 and _has_objects(db):
            raise RunFileError(path, "it is an SQLite file but not a wiretape run")
        if found > 0:
            check(db, path)
        if found == SCHEMA_VERSION:
            return found
        if found < 0:
            raise RunFileError(path, f"it has schema version {found}, which no wiretape writes")
        for v in range(found, SCHEMA_VERSION):
            for stmt in statements(_STEPS[v]):
                db.execute(stmt)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return found


def _has_objects(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT count(*) FROM main.sqlite_master").fetchone()
    return bool(row[0])
