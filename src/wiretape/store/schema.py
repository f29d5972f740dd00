"""The run file's SQLite schema and its migrations.

Owns the DDL, the schema version (``PRAGMA user_version``) and the steps that
bring an older file forward. Knows nothing of exchanges as objects.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from wiretape.errors import RunFileError, SchemaTooNew

SCHEMA_VERSION = 2

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE origins (
  name TEXT PRIMARY KEY, upstream TEXT NOT NULL, port INTEGER NOT NULL, env_vars TEXT NOT NULL
);
CREATE TABLE blobs (
  hash TEXT PRIMARY KEY,          -- sha256 hex of the uncompressed bytes
  size INTEGER NOT NULL,          -- uncompressed bytes
  codec TEXT NOT NULL,            -- 'raw', 'zstd', or 'zstd-ref' (ref's bytes as dictionary)
  ref TEXT,                       -- hash of the dictionary blob for 'zstd-ref'
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


# Migration i brings a file from version i to version i + 1.
def _to_v1(db: sqlite3.Connection) -> None:
    db.executescript(_V1)


def _to_v2(db: sqlite3.Connection) -> None:
    db.executescript(_V2)


_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {0: _to_v1, 1: _to_v2}


def create(db: sqlite3.Connection) -> None:
    """Lay out the current schema in an empty database."""
    migrate(db, Path("<new>"))


def migrate(db: sqlite3.Connection, path: Path) -> int:
    """Bring ``db`` to ``SCHEMA_VERSION``; return the version it had.

    Raises SchemaTooNew for a file from a newer wiretape.
    """
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(path, found, SCHEMA_VERSION)
    for version in range(found, SCHEMA_VERSION):
        if version == 0 and _has_tables(db):
            raise RunFileError(path, "it is an SQLite file but not a wiretape run")
        with db:
            _MIGRATIONS[version](db)
            db.execute(f"PRAGMA user_version = {version + 1}")
    return found


def _has_tables(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
    return bool(row[0])
