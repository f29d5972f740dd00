"""SQLite connections for run files and replay logs: opening one to read
without executing anything from it, opening one to write, transactions, and
checking that a file's schema is exactly one wiretape wrote.

A file handed to wiretape is untrusted input. SQLite runs code kept in a
database's schema (triggers, views, generated columns, CHECK and DEFAULT
expressions, expression indexes), so before any query a reader compares
``sqlite_master`` with the schema wiretape wrote for that version and
refuses anything else; ``trusted_schema`` is off on every connection, and a
reader's connection is read-only, so opening a file never writes to it.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator
from pathlib import Path

#: Seconds a connection waits for another writer's lock.
BUSY_TIMEOUT_S = 30


def _harden(db: sqlite3.Connection) -> sqlite3.Connection:
    db.execute("PRAGMA trusted_schema = OFF")
    db.execute("PRAGMA cell_size_check = ON")
    db.execute("PRAGMA temp_store = MEMORY")
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    return db


def connect_write(path: Path) -> sqlite3.Connection:
    """A connection that writes ``path``; transactions are explicit
    (:func:`transaction`), nothing commits on its own."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                         timeout=BUSY_TIMEOUT_S)
    return _harden(db)


def connect_read(path: Path) -> sqlite3.Connection:
    """A read-only connection to ``path``: SQLite opens the file read-only
    (``mode=ro``), so nothing done through it can change the file.

    A file whose journal mode is WAL makes SQLite put a ``-shm`` (and an
    empty ``-wal``) file beside it for any reader, which a read-only
    connection cannot remove when it closes, and cannot make at all in a
    directory that cannot be written. When no ``-wal`` file is there (no
    writer has the file open, none was killed while writing it), nothing
    can be lost by reading it as immutable, and it is: a reader then leaves
    nothing beside the file. With a ``-wal`` beside it, it is read through
    that as SQLite reads it. Raises sqlite3.Error.
    """
    uri = path.absolute().as_uri()
    if _in_wal_mode(path) and not Path(f"{path}-wal").exists():
        return _connect_immutable(uri)
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False,
                         isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
        return _probe(_harden(db))
    except sqlite3.OperationalError:
        db.close()
        if any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-journal")):
            raise
        return _connect_immutable(uri)


def _connect_immutable(uri: str) -> sqlite3.Connection:
    db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False,
                         isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
        return _probe(_harden(db))
    except BaseException:
        db.close()
        raise


def _in_wal_mode(path: Path) -> bool:
    """Whether the database header says WAL: its file format write and read
    versions (bytes 18 and 19) are 2 (sqlite.org/fileformat2.html, 1.3.3).
    False when the file cannot be read (SQLite then says why)."""
    try:
        with open(path, "rb") as fh:
            header = fh.read(20)
    except OSError:
        return False
    return header[18:20] == b"\x02\x02"


def _probe(db: sqlite3.Connection) -> sqlite3.Connection:
    # The header and the schema's first page: where a read-only open of a
    # WAL file in a read-only directory fails.
    db.execute("PRAGMA user_version").fetchone()
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; on any error ``ROLLBACK`` and
    re-raise: either every statement inside is in the file, or none is."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    try:
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def statements(script: str) -> list[str]:
    """The statements of ``script`` one by one (``executescript`` commits
    first, so DDL inside a transaction is run statement by statement)."""
    out, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out


# --- the schema check --------------------------------------------------------------------------

#: One object of ``sqlite_master``: type, name, table, and its SQL with
#: comments and spacing taken out (None for SQLite's own automatic indexes).
SchemaObject = tuple[str, str, str, str | None]


def normalise_sql(sql: str) -> str:
    """``sql`` without comments, with runs of white space made one space and
    none next to punctuation; quoted text is kept exactly."""
    out: list[str] = []
    space = False
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            space = True
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            space = True
            continue
        if c.isspace():
            space = True
            i += 1
            continue
        if c in "'\"`[":
            close = "]" if c == "[" else c
            j = i + 1
            while j < n:
                if sql[j] == close:
                    if close != "]" and j + 1 < n and sql[j + 1] == close:
                        j += 2  # a doubled quote inside quoted text
                        continue
                    break
                j += 1
            token = sql[i:j + 1]
            i = j + 1
        else:
            token = c
            i += 1
        if space and out and out[-1] not in "(," and token not in "),;":
            out.append(" ")
        space = False
        out.append(token)
    return "".join(out)


def schema_objects(db: sqlite3.Connection) -> set[SchemaObject]:
    """What ``sqlite_master`` of ``db`` holds. Raises sqlite3.Error."""
    found: set[SchemaObject] = set()
    for kind, name, table, sql in db.execute(
            "SELECT type, name, tbl_name, sql FROM main.sqlite_master"):
        text = sql if isinstance(sql, str) else None
        found.add((str(kind), str(name), str(table),
                   normalise_sql(text) if text is not None else None))
    return found


@functools.cache
def expected_objects(ddl: str) -> frozenset[SchemaObject]:
    """The objects ``ddl`` makes, as :func:`schema_objects` reads them."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(ddl)
        return frozenset(schema_objects(mem))
    finally:
        mem.close()


def schema_problem(db: sqlite3.Connection, ddl: str) -> str | None:
    """What makes the schema of ``db`` differ from the one ``ddl`` makes
    (exactly those tables with those columns, their automatic indexes,
    nothing else: no trigger, no view, no other table or index), or None.
    Raises sqlite3.Error."""
    found = schema_objects(db)
    expected = expected_objects(ddl)
    if found == expected:
        return None
    want = {(kind, name): sql for kind, name, _table, sql in expected}
    have = {(kind, name): sql for kind, name, _table, sql in found}
    problems = []
    for (kind, name), sql in sorted(have.items()):
        if (kind, name) not in want:
            article = "an" if kind[0] in "aeiou" else "a"
            problems.append(f"{article} {kind} {name!r} wiretape never makes")
        elif want[(kind, name)] != sql:
            problems.append(f"its {kind} {name!r} is not defined as wiretape defines it")
    for kind, name in sorted(set(want) - set(have)):
        problems.append(f"it lacks the {kind} {name!r}")
    if not problems:  # the same names on other tables
        problems.append("its indexes belong to other tables")
    # Triggers and views first: they are what runs code.
    problems.sort(key=lambda p: not any(w in p for w in ("trigger", "view")))
    more = f" (and {len(problems) - 1} more differences)" if len(problems) > 1 else ""
    return problems[0] + more
