"""A run file is untrusted input (DESIGN.md, "The run file"): opening one
never executes anything from it and never writes to it; a schema that is
not exactly one wiretape wrote, a body that would decompress past its
bounds, or a stored value of the wrong type is one RunFileError naming the
file, never a traceback, a spin or a gigabyte of memory.

The files are made by wiretape, then altered with sqlite3 the way an
attacker would hand-edit one.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from support import readonly
from wiretape.errors import RunFileError, SchemaTooNew
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.snapshot.tree import Entry
from wiretape.store import blobs, schema
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=("agent",), cwd="/x",
               env_names=(), origins=(Origin("openai", "https://h/v1", 9, ("OPENAI_BASE_URL",)),),
               started_at_ns=5)


def exchange(seq: int, body: bytes = b'{"q": 1}') -> Exchange:
    return Exchange(seq, 1, "openai", 100 + seq,
                    Request(b"POST", b"/v1/x", ((b"Content-Type", b"application/json"),), body),
                    Response(200, b"OK", ((b"X-A", b"1"),), (Frame(10, b"a" * 100),
                                                              Frame(20, b"bc"))),
                    Ending.COMPLETE, 7, 30)


@pytest.fixture
def run_path(tmp_path: Path) -> Path:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    run.write_exchange(exchange(0))
    run.write_exchange(exchange(1, b"x" * 5000))
    run.add_snapshot("/orig", [Entry("a.txt", "file", 0o644, b"hello" * 40)])
    run.finish(0, b"out", b"")
    run.close(compact=True)
    return path


def edit(path: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for i, statement in enumerate(statements):
            db.execute(statement, params if i == len(statements) - 1 else ())
    finally:
        db.close()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_everything(path: Path, logs: Path) -> None:
    with open_run(path, replay_logs=logs) as run:
        run.info()
        run.exchanges()
        run.redactions()
        run.snapshots()
        run.outcome_changes()
        run.connect_report()
        for replay in run.replays():
            run.replay_requests(replay["id"])


def refused(path: Path, logs: Path, *words: str) -> str:
    """The one line reading ``path`` fails with."""
    with pytest.raises(RunFileError) as err:
        read_everything(path, logs)
    line = str(err.value)
    assert "\n" not in line and str(path) in line, line
    for word in words:
        assert word in line, line
    return line


# --- opening never writes, never executes ---------------------------------------------------


def test_reading_a_run_leaves_its_bytes_and_its_folder_as_they_were(run_path: Path,
                                                                     tmp_path: Path) -> None:
    before = sha(run_path)
    read_everything(run_path, tmp_path / "replays")
    assert sha(run_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.wtape"]


READ_BACK = ("import sys; from wiretape.store import open_run; "
             "run = open_run(sys.argv[1], replay_logs=sys.argv[2]); "
             "print([e.seq for e in run.exchanges()])")


def read_on_a_read_only_mount(run_path: Path, tmp_path: Path) -> str:
    """The sequence numbers of ``run_path`` read by another process that
    sees its folder mounted read-only (root is stopped by that, not by modes)."""
    if not readonly.available():
        pytest.skip("no mount namespaces here to make a read-only mount")
    done = subprocess.run(
        readonly.read_only_argv(run_path.parent, [sys.executable, "-c", READ_BACK,
                                                  str(run_path), str(tmp_path / "logs")]),
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_run_in_a_read_only_folder_is_read(run_path: Path, tmp_path: Path) -> None:
    run_path.chmod(0o444)
    assert read_on_a_read_only_mount(run_path, tmp_path) == "[0, 1]"


def test_a_wal_mode_run_in_a_read_only_folder_is_read(run_path: Path, tmp_path: Path) -> None:
    """A run left in WAL mode with nothing in its WAL (its writer's WAL was
    folded in): SQLite needs a -shm file to open it read-only, which a
    read-only folder cannot get; it is read as immutable instead."""
    edit(run_path, "PRAGMA journal_mode = WAL")
    assert not Path(f"{run_path}-wal").exists()
    before = sha(run_path)
    assert read_on_a_read_only_mount(run_path, tmp_path) == "[0, 1]"
    assert sha(run_path) == before


def test_a_trigger_is_refused_before_anything_is_read(run_path: Path, tmp_path: Path) -> None:
    edit(run_path, "CREATE TRIGGER evil AFTER INSERT ON replay_requests BEGIN "
                   "UPDATE replay_requests SET kind = 'exact'; END")
    before = sha(run_path)
    line = refused(run_path, tmp_path / "replays", "trigger 'evil'", "not one wiretape writes")
    assert "record the run again" in line
    assert sha(run_path) == before


def test_a_recursive_view_named_like_a_table_is_refused_at_once(run_path: Path,
                                                                  tmp_path: Path) -> None:
    edit(run_path, "DROP TABLE exchanges",
         "CREATE VIEW exchanges AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 "
         "FROM r) SELECT n AS seq, n AS connection_id, 'o' AS origin, n AS started_at_ns, "
         "x'50' AS method, x'2f' AS target, x'31' AS http_version, '[]' AS request_headers, "
         "'' AS request_body, NULL AS status, NULL AS reason, NULL AS response_http_version, "
         "NULL AS response_headers, NULL AS response_body, 'complete' AS ending, NULL AS "
         "ttfb_ns, 0 AS duration_ns, NULL AS error FROM r")
    t0 = time.monotonic()
    refused(run_path, tmp_path / "replays", "view 'exchanges'")
    assert time.monotonic() - t0 < 1


@pytest.mark.parametrize(("statements", "said"), [
    (("CREATE TABLE notes (x)",), "table 'notes' wiretape never makes"),
    (("ALTER TABLE exchanges ADD COLUMN extra TEXT",), "table 'exchanges' is not defined"),
    (("CREATE INDEX by_origin ON exchanges (origin)",), "index 'by_origin'"),
    (("CREATE INDEX by_expr ON blobs (length(data))",), "index 'by_expr'"),
    (("DROP TABLE redactions",), "lacks the table 'redactions'"),
    (("DROP TABLE frames",
      "CREATE TABLE frames (seq INTEGER NOT NULL, idx INTEGER NOT NULL, offset_ns INTEGER "
      "NOT NULL, start INTEGER NOT NULL, length INTEGER NOT NULL, big BLOB GENERATED ALWAYS "
      "AS (zeroblob(1000000000)) VIRTUAL, PRIMARY KEY (seq, idx))"),
     "table 'frames' is not defined"),
    (("DROP TABLE meta",
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL CHECK (length(value) > 0))"),
     "table 'meta' is not defined"),
])
def test_a_schema_other_than_ours_is_refused(run_path: Path, tmp_path: Path,
                                              statements: tuple[str, ...], said: str) -> None:
    edit(run_path, *statements)
    refused(run_path, tmp_path / "replays", said)


def test_comments_and_spacing_in_the_schema_are_not_differences(tmp_path: Path) -> None:
    """Older wiretape wrote the same tables with other comments."""
    path = tmp_path / "old.wtape"
    ours = schema.ddl(schema.SCHEMA_VERSION)
    ddl = ours.replace(
        "-- 'raw', 'zstd', 'zstd-ref' (ref's bytes as dictionary),",
        "-- 'raw', 'zstd', or 'zstd-ref' (zstd with ref's bytes as dictionary)").replace(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        "CREATE TABLE meta (\n  key TEXT PRIMARY KEY,  /* the name */\n  value TEXT NOT NULL\n);")
    assert ddl.count("zstd with ref's") == 1 and "/* the name */" in ddl
    db = sqlite3.connect(path)
    db.executescript(ddl)
    db.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
    db.execute("INSERT INTO meta VALUES ('run_id', '\"run_0123456789ab\"')")
    db.commit()
    db.close()
    with open_run(path, replay_logs=tmp_path / "replays") as run:
        assert run.info().run_id == "run_0123456789ab"


def test_quoted_text_in_the_schema_is_compared_exactly() -> None:
    from wiretape.store.database import normalise_sql

    assert normalise_sql("CREATE TABLE t ( a  TEXT -- c\n, b)") == "CREATE TABLE t (a TEXT,b)"
    assert normalise_sql("DEFAULT '--  x'") == "DEFAULT '--  x'"
    assert normalise_sql("DEFAULT 'it''s -- '") == "DEFAULT 'it''s -- '"


def test_a_newer_schema_names_both_versions(run_path: Path, tmp_path: Path) -> None:
    edit(run_path, f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaTooNew) as err:
        open_run(run_path)
    assert f"schema version {schema.SCHEMA_VERSION + 1}" in str(err.value)
    assert f"up to {schema.SCHEMA_VERSION}" in str(err.value)


def test_an_sqlite_file_with_no_run_schema_is_not_a_run(tmp_path: Path) -> None:
    path = tmp_path / "empty.wtape"
    edit(path, "CREATE TABLE t (x)", "DROP TABLE t")
    refused(path, tmp_path / "replays", "not a wiretape run")


# --- bodies read back within bounds -----------------------------------------------------------


def test_a_body_that_says_it_is_larger_than_the_cap_is_refused_unread(run_path: Path,
                                                                       tmp_path: Path) -> None:
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET size = ? WHERE hash = ?",
         params=(4 * 1024**3, digest))
    refused(run_path, tmp_path / "replays", "4294967296 bytes", "more than the")


def test_a_zstd_bomb_stops_at_its_declared_size(run_path: Path, tmp_path: Path) -> None:
    """Small compressed, huge output, a small size declared: decompression
    stops one chunk past the declared size."""
    bomb = zstandard.ZstdCompressor(level=19, write_content_size=False).compress(
        b"\0" * (64 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET codec = 'zstd', data = ? WHERE hash = ?",
         params=(bomb, digest))
    refused(run_path, tmp_path / "replays", "decompresses to more")


def test_a_frame_that_says_another_size_is_refused_unread(run_path: Path,
                                                          tmp_path: Path) -> None:
    frame = zstandard.ZstdCompressor().compress(b"\0" * 100_000)
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET codec = 'zstd', data = ? WHERE hash = ?",
         params=(frame, digest))
    refused(run_path, tmp_path / "replays", "its compressed frame says 100000")


def test_a_dictionary_chain_that_loops_is_refused(run_path: Path, tmp_path: Path) -> None:
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET codec = 'zstd-ref', ref = hash, depth = 1 WHERE hash = ?",
         params=(digest,))
    refused(run_path, tmp_path / "replays", "compressed against itself")


def splice(prefix: int, suffix: int, new: bytes) -> bytes:
    """A ``splice`` payload (blobs' module docstring): header, then new bytes raw."""
    return struct.pack(">4sBQQ", b"WTS1", 0, prefix, suffix) + new


@pytest.mark.parametrize(("ref", "payload", "said"), [
    # keeps 9 bytes of an 8-byte body
    ('{"q": 1}', splice(9, 0, b"x" * 4991), "keeps 9 + 0 bytes of the body"),
    ("x" * 5000, splice(0, 0, b"x" * 5000), "compressed against itself"),
    ("not stored", splice(0, 0, b"x" * 5000), "which the file does not hold"),
    ('{"q": 1}', splice(0, 8, b"x" * 4000), "says its new bytes are 4992 but 4000 are stored"),
])
def test_a_splice_that_lies_is_refused(run_path: Path, tmp_path: Path, ref: str, payload: bytes,
                                       said: str) -> None:
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET codec = 'splice', ref = ?, depth = 1, data = ? WHERE hash = ?",
         params=(blobs.blob_hash(ref.encode()), payload, digest))
    refused(run_path, tmp_path / "replays", said, "damaged or was edited")


def test_a_splice_reads_back_from_its_reference(run_path: Path, tmp_path: Path) -> None:
    """The same row, told the truth: 5000 bytes spliced from nothing kept
    of '{"q": 1}' (the lies above are refused for what they say, not for
    the codec)."""
    digest = blobs.blob_hash(b"x" * 5000)
    edit(run_path, "UPDATE blobs SET codec = 'splice', ref = ?, depth = 1, data = ? WHERE hash = ?",
         params=(blobs.blob_hash(b'{"q": 1}'), splice(1, 0, b"x" * 4999), digest))
    refused(run_path, tmp_path / "replays", "does not have the hash")  # '{' + 4999 x
    edit(run_path, "UPDATE blobs SET data = ? WHERE hash = ?",
         params=(splice(0, 0, b"x" * 5000), digest))
    read_everything(run_path, tmp_path / "replays")


def test_a_codec_this_wiretape_does_not_know_names_a_newer_wiretape(run_path: Path,
                                                                     tmp_path: Path) -> None:
    edit(run_path, "UPDATE blobs SET codec = 'lzma'")
    line = refused(run_path, tmp_path / "replays", "codec 'lzma', which this wiretape does not "
                   "read (a newer wiretape may have written it: read the run with that one)")
    assert "damaged" not in line


def test_a_body_that_is_not_its_hash_is_refused(run_path: Path, tmp_path: Path) -> None:
    digest = blobs.blob_hash(b'{"q": 1}')
    edit(run_path, "UPDATE blobs SET data = ? WHERE hash = ?", params=(b'{"q": 2}', digest))
    refused(run_path, tmp_path / "replays", "does not have the hash")


def test_a_raw_body_shorter_than_it_says_is_refused(run_path: Path, tmp_path: Path) -> None:
    digest = blobs.blob_hash(b'{"q": 1}')
    edit(run_path, "UPDATE blobs SET size = 1000 WHERE hash = ?", params=(digest,))
    refused(run_path, tmp_path / "replays", "says it is 1000 bytes but 8 are stored")


# --- stored values of the wrong type ----------------------------------------------------------


@pytest.mark.parametrize(("statement", "said"), [
    ("UPDATE exchanges SET started_at_ns = 'yesterday' WHERE seq = 0",
     "exchange 0: its start is text, not an integer"),
    ("UPDATE exchanges SET method = 'POST' WHERE seq = 0", "exchange 0: its method is text"),
    ("UPDATE exchanges SET status = 'ok' WHERE seq = 1", "exchange 1: its status is text"),
    ("UPDATE exchanges SET status = 70000 WHERE seq = 1", "exchange 1: its status is 70000"),
    ("UPDATE exchanges SET ending = 'exploded' WHERE seq = 1", "exchange 1: its ending is"),
    ("UPDATE exchanges SET request_headers = '[[1, 2]]' WHERE seq = 0",
     "exchange 0: its request headers[0][0] is an integer, not text"),
    ("UPDATE exchanges SET request_headers = 'not json' WHERE seq = 0",
     "its request headers is not JSON"),
    ("UPDATE exchanges SET response_headers = NULL WHERE seq = 0",
     "exchange 0: its response headers is NULL"),
    ("UPDATE exchanges SET response_body = NULL WHERE seq = 0",
     "exchange 0: its response body is NULL"),
    ("UPDATE frames SET length = 1000000 WHERE seq = 0 AND idx = 1",
     "exchange 0: a frame reaches past its body"),
    ("UPDATE frames SET start = -5 WHERE seq = 0 AND idx = 1", "its start is -5"),
    ("UPDATE snapshot_entries SET mode = 9223372036854775807",
     "its mode is 9223372036854775807"),
    ("UPDATE snapshot_entries SET kind = 'fifo'", "its kind is 'fifo'"),
    ("UPDATE meta SET value = '5' WHERE key = 'argv'", "metadata 'argv' is an integer, not a list"),
    ("UPDATE meta SET value = '\"x\"' WHERE key = 'started_at_ns'",
     "metadata 'started_at_ns' is text"),
    ("UPDATE meta SET value = '{\"import_notes\": \"[1\"}' WHERE key = 'extra'",
     "import_notes' is not JSON"),
    ("UPDATE origins SET port = 'eighty'", "origin 'openai': its port is text"),
    ("UPDATE origins SET env_vars = '{}'", "its variables is an object, not a list"),
    ("UPDATE blobs SET codec = X'7a'", "has no valid codec (bytes)"),
    ("UPDATE blobs SET size = 'big'", "has no valid size"),
    ("INSERT INTO redactions VALUES (0, 'request-header', x'35', 'ab')",
     "a redaction's name is bytes"),
    ("INSERT INTO outcome_changes VALUES (1, 'a', 'added', '{\"path\": 3, \"change\": "
     "\"added\", \"before_hash\": null, \"after_hash\": null, \"before_size\": null, "
     "\"after_size\": null, \"binary\": false, \"diff\": \"\"}')",
     "snapshot 1.path is an integer, not text"),
    ("INSERT INTO outcome_changes VALUES (1, 'a', 'added', '{\"path\": \"a\"}')",
     "has no member 'after_hash'"),
])
def test_a_stored_value_of_the_wrong_type_is_one_line(run_path: Path, tmp_path: Path,
                                                      statement: str, said: str) -> None:
    edit(run_path, statement)
    line = refused(run_path, tmp_path / "replays", said)
    assert "damaged or was edited" in line


@pytest.mark.parametrize(("statement", "said"), [
    ("INSERT INTO replays VALUES ('rpl_x', 1, NULL, 'strict', '{}', NULL, NULL, NULL, NULL)",
     "settings has no member"),
    ("INSERT INTO replays VALUES ('rpl_x', 'soon', NULL, 'strict', '{}', NULL, NULL, NULL, "
     "NULL)", "its start is text"),
    ("INSERT INTO replays VALUES ('rpl_x', 1, NULL, 'lenient', '{}', NULL, NULL, NULL, NULL)",
     "its mode is 'lenient'"),
])
def test_an_old_in_file_replay_of_the_wrong_shape_is_one_line(run_path: Path, tmp_path: Path,
                                                              statement: str, said: str) -> None:
    edit(run_path, statement)
    refused(run_path, tmp_path / "replays", said)


# --- the property: whatever a hostile edit does, reading is a result or one line ------------


def test_any_single_value_overwritten_reads_or_is_one_line(run_path: Path,
                                                           tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    cells = []
    db = sqlite3.connect(run_path)
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        cells += [(table, c) for c in columns]
    db.close()
    pristine = run_path.read_bytes()
    values = st.one_of(st.none(), st.integers(min_value=-2**63, max_value=2**63 - 1),
                       st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20),
                       st.sampled_from(["[]", "{}", "[[\"a\"]]", "null", "1e999", "[" * 5000]))

    @settings(max_examples=150, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.sampled_from(cells), values)
    def check(cell: tuple[str, str], value: object) -> None:
        run_path.write_bytes(pristine)
        table, column = cell
        try:
            edit(run_path, f"UPDATE {table} SET {column} = ?", params=(value,))
        except sqlite3.IntegrityError:
            return  # SQLite itself refuses it: no file to read
        try:
            read_everything(run_path, tmp_path / "replays")
        except RunFileError as exc:
            assert "\n" not in str(exc)

    check()


# --- one transaction per exchange, really -----------------------------------------------------


def refuse_inserts_into(run: RunFile, table: str) -> None:
    def authorizer(action: int, arg1: str | None, *_: object) -> int:
        if action == sqlite3.SQLITE_INSERT and arg1 == table:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    run._db.set_authorizer(authorizer)


def test_an_exchange_whose_last_write_fails_leaves_nothing(tmp_path: Path) -> None:
    from wiretape.model import Redaction

    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    run.write_exchange(exchange(0))
    frames = tuple(Frame(i, bytes([65 + i % 26]) * 10) for i in range(50))
    big = Exchange(1, 1, "openai", 1, Request(b"POST", b"/v1/x", (), b"new body " * 50),
                   Response(200, b"OK", (), frames), Ending.COMPLETE, 1, 2)
    refuse_inserts_into(run, "redactions")  # the last statement of an exchange's write
    with pytest.raises(RunFileError, match=r"cannot write run file .*not authorized"):
        run.write_exchange(big, [Redaction("request-header", "authorization", "abcd1234")])
    run._db.set_authorizer(None)
    with open_run(path, replay_logs=tmp_path / "replays") as reader:
        assert [e.seq for e in reader.exchanges()] == [0]
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM frames WHERE seq = 1").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 2  # exchange 0's two
    db.close()
    # the file goes on: the next exchange is written whole
    run.write_exchange(exchange(2))
    run.close(compact=True)
    with open_run(path, replay_logs=tmp_path / "replays") as reader:
        assert [e.seq for e in reader.exchanges()] == [0, 2]
        assert reader.exchanges()[1] == exchange(2)


def add_snapshot(run: RunFile) -> object:
    return run.add_snapshot("/r", [Entry(f"f{i}", "file", 0o644, b"%d" % i) for i in range(20)])


def set_outcome(run: RunFile) -> object:
    from wiretape.snapshot.tree import Change

    change = Change("a", "added", None, blobs.blob_hash(b"made" * 40), None, 160, False, "")
    return run.set_outcome_changes(1, [change, change], {"a": b"made" * 40})


def set_origins(run: RunFile) -> object:
    return run.set_origins([Origin("a", "http://a", 1), Origin("b", "http://b", 2)])


@pytest.mark.parametrize(("table", "write"), [("snapshot_entries", add_snapshot),
                                              ("outcome_changes", set_outcome),
                                              ("origins", set_origins)])
def test_a_snapshot_outcome_or_metadata_write_that_fails_leaves_nothing(
        tmp_path: Path, table: str, write: Callable[[RunFile], object]) -> None:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = ("snapshots", "snapshot_entries", "blobs", "origins", "outcome_changes")
    counts = {t: reader.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    refuse_inserts_into(run, table)
    with pytest.raises(RunFileError, match="cannot write run file"):
        write(run)
    assert {t: reader.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables} == counts
    reader.close()
    run.close(compact=True)


def test_a_migration_that_fails_leaves_the_old_version(tmp_path: Path) -> None:
    path = tmp_path / "v1.wtape"
    RunFile.create(path, INFO).close(compact=True)
    edit(path, "DROP TABLE snapshots", "DROP TABLE snapshot_entries", "DROP TABLE outcome_changes",
         "DROP TABLE messages", "PRAGMA user_version = 1")
    db = sqlite3.connect(path, isolation_level=None)

    def no_outcome_changes(action: int, arg1: str | None, *_: object) -> int:
        refused = action == sqlite3.SQLITE_CREATE_TABLE and arg1 == "outcome_changes"
        return sqlite3.SQLITE_DENY if refused else sqlite3.SQLITE_OK

    db.set_authorizer(no_outcome_changes)  # the last table of version 2's step
    with pytest.raises(sqlite3.DatabaseError):
        schema.migrate(db, path)
    db.set_authorizer(None)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert not names & {"snapshots", "snapshot_entries", "outcome_changes"}
    db.close()
    with open_run(path, replay_logs=tmp_path / "replays") as run:  # still a readable version 1 file
        assert run.snapshots() == []


def test_a_run_is_never_seen_half_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating puts the file in place only with its schema and metadata: a
    failure before that leaves no file at the path, and no leftover."""
    from wiretape.store import runfile

    def fail(*_: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(runfile, "_write_origins", fail)
    with pytest.raises(RunFileError, match="disk I/O error"):
        RunFile.create(tmp_path / "r.wtape", INFO)
    assert list(tmp_path.iterdir()) == []
