"""The run file: round trip, content-addressed delta storage, schema
versions and migrations, damaged input."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from wiretape.errors import RunFileError, SchemaTooNew
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.store import schema
from wiretape.store.runfile import RunFile, open_run

INFO = RunInfo(
    run_id="run_0123456789ab",
    wiretape_version="t",
    argv=("a", "b"),
    cwd="/x",
    env_names=("OPENAI_BASE_URL",),
    origins=(Origin("openai", "https://h/v1", 9, ("OPENAI_BASE_URL",)),),
    started_at_ns=5,
)


def exchange(
    seq: int, body: bytes, frames: tuple[Frame, ...] = (Frame(10, b"a"), Frame(20, b"bc"))
) -> Exchange:
    return Exchange(seq, 1, "openai", 100 + seq,
                    Request(b"POST", b"/v1/x", ((b"Content-Type", b"application/json"),), body),
                    Response(200, b"OK", ((b"X-A", b"1"), (b"x-a", b"2")), frames),
                    Ending.COMPLETE, 7, 30)


def test_round_trip(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    run.write_exchange(exchange(0, b"{}"))
    run.write_exchange(Exchange(1, 2, "openai", 1, Request(b"GET", b"/", (), b""), None,
                                Ending.ORIGIN_UNREACHABLE, None, 4, "refused"))
    run.finish(3, b"out", b"err")
    run.close(compact=True)
    assert not (tmp_path / "r.wtape-wal").exists()
    with open_run(tmp_path / "r.wtape") as again:
        info = again.info()
        assert (info.argv, info.exit_status, info.stdout, info.origins) == (
            ("a", "b"),
            3,
            b"out",
            INFO.origins,
        )
        first, second = again.exchanges()
    assert first == exchange(0, b"{}")
    assert second.response is None and second.ending is Ending.ORIGIN_UNREACHABLE


def test_reading_a_wal_mode_run_leaves_nothing_beside_it(tmp_path: Path) -> None:
    """A run left in WAL mode (its writer closed without folding it back):
    a read-only reader would make -shm and -wal files beside it that it
    cannot remove; with no WAL to read it reads the file as immutable."""
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    run.write_exchange(exchange(0, b"{}"))
    run.close()  # not compacted: the header stays in WAL mode
    assert path.read_bytes()[18:20] == b"\x02\x02"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.wtape"]
    before = path.read_bytes()
    with open_run(path, replay_logs=tmp_path / "logs") as again:
        assert [e.seq for e in again.exchanges()] == [0]
        assert again.replays() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.wtape"]
    assert path.read_bytes() == before


def test_a_wal_mode_run_with_its_wal_beside_it_is_read_through_it(tmp_path: Path) -> None:
    """While a writer holds it (or after one was killed), what is committed
    is partly in the -wal file: a reader reads through it."""
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    try:
        run.write_exchange(exchange(0, b"{}"))
        assert Path(f"{path}-wal").exists()
        with open_run(path, replay_logs=tmp_path / "logs") as again:
            assert [e.seq for e in again.exchanges()] == [0]
    finally:
        run.close(compact=True)


def test_growing_conversation_costs_about_its_new_bytes(tmp_path: Path) -> None:
    import os

    run = RunFile.create(tmp_path / "r.wtape", INFO)
    prefix = os.urandom(40_000).hex().encode()  # incompressible on its own: 80 kB
    run.write_exchange(exchange(0, prefix))
    before = run.stored_bytes()
    run.write_exchange(exchange(1, prefix + b"and one more message"))
    grown = run.stored_bytes() - before
    assert before > 40_000
    assert grown < 500, grown
    assert run.exchanges()[1].request.body == prefix + b"and one more message"
    run.close()


def test_newer_schema_is_refused_with_both_versions(tmp_path: Path) -> None:
    RunFile.create(tmp_path / "r.wtape", INFO).close(compact=True)
    db = sqlite3.connect(tmp_path / "r.wtape")
    db.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(SchemaTooNew) as err:
        open_run(tmp_path / "r.wtape")
    assert f"schema version {schema.SCHEMA_VERSION + 1}" in str(err.value)
    assert f"up to {schema.SCHEMA_VERSION}" in str(err.value)


def test_version_zero_file_with_tables_is_not_a_run(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "other.db")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(RunFileError, match="not a wiretape run"):
        open_run(tmp_path / "other.db")


def test_every_migration_step_reaches_the_current_schema(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "m.db")
    assert schema.migrate(db, tmp_path / "m.db") == 0
    assert db.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "meta",
        "exchanges",
        "frames",
        "blobs",
        "redactions",
        "replays",
        "replay_requests",
    } <= tables


@pytest.mark.parametrize(
    "content", [b"", b"not a database at all", b"SQLite format 3\x00" + b"\xff" * 200]
)
def test_damaged_files_give_a_clear_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.wtape"
    path.write_bytes(content)
    with pytest.raises(RunFileError) as err:
        open_run(path)
    assert str(path) in str(err.value)


def test_create_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "r.wtape").write_bytes(b"precious")
    with pytest.raises(RunFileError, match="already exists"):
        RunFile.create(tmp_path / "r.wtape", INFO)
    assert (tmp_path / "r.wtape").read_bytes() == b"precious"


def test_a_version_1_file_is_read_as_it_is_and_never_written(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "v1.wtape", INFO)
    run.write_exchange(exchange(0, b"{}"))
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "v1.wtape")  # make it what version 1 wrote
    db.executescript(
        "DROP TABLE snapshots; DROP TABLE snapshot_entries; DROP TABLE outcome_changes;"
        "DROP TABLE messages;"
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    before = (tmp_path / "v1.wtape").read_bytes()
    with open_run(tmp_path / "v1.wtape", replay_logs=tmp_path / "replays") as old:
        assert old.exchanges() == [exchange(0, b"{}")]
        assert old.snapshots() == [] and old.outcome_changes() == {}
        assert old.replays() == []
    assert (tmp_path / "v1.wtape").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1.wtape"]


def test_a_version_1_file_migrates_in_one_transaction(tmp_path: Path) -> None:
    """Migrating (a connection that writes) brings the file to the current
    version with its version bump in the same transaction."""
    run = RunFile.create(tmp_path / "v1.wtape", INFO)
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "v1.wtape", isolation_level=None)
    db.executescript(
        "DROP TABLE snapshots; DROP TABLE snapshot_entries; DROP TABLE outcome_changes;"
        "DROP TABLE messages;"
        "PRAGMA user_version = 1;"
    )
    assert schema.migrate(db, tmp_path / "v1.wtape") == 1
    assert db.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    db.close()
    with open_run(tmp_path / "v1.wtape") as migrated:
        assert migrated.snapshots() == []


def test_snapshots_round_trip(tmp_path: Path) -> None:
    from wiretape.snapshot.tree import Entry

    entries = [Entry("a.txt", "file", 0o644, b"hello"), Entry("d", "dir", 0o755),
               Entry("d/link", "symlink", 0o777, link="../a.txt")]
    run = RunFile.create(tmp_path / "s.wtape", INFO)
    sid = run.add_snapshot("/orig", entries)
    run.close(compact=True)
    with open_run(tmp_path / "s.wtape") as again:
        assert again.snapshots() == [(sid, "/orig", sorted(entries, key=lambda e: e.path))]


def test_an_answer_wiretape_made_is_told_from_the_providers(tmp_path: Path) -> None:
    """The 502/504 wiretape gives the agent when the origin never answered
    (no time to first byte) is its own, after a round trip through the file;
    a provider's 502, or a response that timed out once begun, is not."""
    request = Request(b"POST", b"/v1/x", (), b"{}")
    made = Response(502, b"Bad Gateway", ((b"x-wiretape-error", b"origin_unreachable"),),
                    (Frame(5, b'{"error": {}}'),))
    timed_out = Response(504, b"Gateway Timeout", (), (Frame(5, b"{}"),))
    provider = Response(502, b"Bad Gateway", (), (Frame(9, b"{}"),))
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    run.write_exchange(Exchange(0, 1, "openai", 1, request, made, Ending.ORIGIN_UNREACHABLE,
                                None, 6, "ConnectError: refused"))
    run.write_exchange(Exchange(1, 1, "openai", 2, request, timed_out, Ending.TIMEOUT,
                                None, 6, "ReadTimeout"))
    run.write_exchange(Exchange(2, 1, "openai", 3, request, provider, Ending.COMPLETE, 8, 9))
    run.write_exchange(Exchange(3, 1, "openai", 4, request, provider, Ending.TIMEOUT, 8, 9,
                                "ReadTimeout"))
    run.write_exchange(Exchange(4, 1, "openai", 5, request, None, Ending.ORIGIN_UNREACHABLE,
                                None, 6, "refused"))
    run.close(compact=True)
    with open_run(tmp_path / "r.wtape", replay_logs=tmp_path / "logs") as again:
        assert [e.answered_by_wiretape for e in again.exchanges()] == [
            True, True, False, False, False]


def test_websocket_messages_round_trip_in_the_exchanges_transaction(tmp_path: Path) -> None:
    from wiretape.model import Message, Opcode

    messages = (Message("client", Opcode.TEXT, b'{"type":"response.create"}', 5),
                Message("server", Opcode.BINARY, b"\x00\xff", 9),
                Message("server", Opcode.PING, b"", 10),
                Message("client", Opcode.CLOSE, b"bye", 12, 1000),
                Message("server", Opcode.CLOSE, b"", 13, None))
    handshake = Exchange(0, 1, "openai", 1, Request(b"GET", b"/v1/responses", (), b""),
                         Response(101, b"Switching Protocols", ((b"Upgrade", b"websocket"),), ()),
                         Ending.COMPLETE, 3, 14, None, messages)
    run = RunFile.create(tmp_path / "w.wtape", INFO)
    run.write_exchange(handshake)
    run.write_exchange(exchange(1, b"{}"))
    run.close(compact=True)
    with open_run(tmp_path / "w.wtape") as again:
        first, second = again.exchanges()
    assert first == handshake
    assert second.messages == ()


def test_a_version_2_file_reads_with_no_messages_and_migrates(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "v2.wtape", INFO)
    run.write_exchange(exchange(0, b"{}"))
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "v2.wtape", isolation_level=None)
    db.executescript("DROP TABLE messages; PRAGMA user_version = 2;")
    db.close()
    with open_run(tmp_path / "v2.wtape") as old:
        assert old.exchanges() == [exchange(0, b"{}")]
    db = sqlite3.connect(tmp_path / "v2.wtape", isolation_level=None)
    assert schema.migrate(db, tmp_path / "v2.wtape") == 2
    assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    db.close()


def test_a_damaged_message_row_is_one_clear_error(tmp_path: Path) -> None:
    from wiretape.model import Message, Opcode

    handshake = Exchange(0, 1, "openai", 1, Request(b"GET", b"/v1/responses", (), b""),
                         Response(101, b"", (), ()), Ending.COMPLETE, 3, 14, None,
                         (Message("client", Opcode.TEXT, b"x", 5),))
    run = RunFile.create(tmp_path / "d.wtape", INFO)
    run.write_exchange(handshake)
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "d.wtape", isolation_level=None)
    db.execute("UPDATE messages SET opcode = 'smoke'")
    db.close()
    with open_run(tmp_path / "d.wtape") as damaged, pytest.raises(RunFileError) as err:
        damaged.exchanges()
    assert "message 0 of exchange 0: its opcode is 'smoke'" in str(err.value)


def _session(*payloads: bytes) -> Exchange:
    from wiretape.model import Message, Opcode

    messages = tuple(Message("client" if i % 2 == 0 else "server", Opcode.TEXT, p, 10 + i)
                     for i, p in enumerate(payloads))
    return Exchange(0, 1, "openai", 1, Request(b"GET", b"/v1/responses", (), b""),
                    Response(101, b"Switching Protocols", ((b"Upgrade", b"websocket"),), ()),
                    Ending.COMPLETE, 3, 14, None, messages)


@pytest.mark.parametrize("compress_later", [False, True])
def test_large_message_payloads_are_stored_compressed_and_read_back_identical(
        tmp_path: Path, compress_later: bool) -> None:
    """Two 5 MB echo messages of one repeated byte (and a small one, kept in
    its row) give a file far smaller than the payloads, whether compressed
    by the commit or afterwards (as a recording does), read back
    byte-identical and counted in the run's bytes."""
    big, other, small = b"A" * (5 << 20), b"B" * (5 << 20) + b"!", b'{"type":"ping"}'
    session = _session(big, big, other, small)
    run = RunFile.create(tmp_path / "w.wtape", INFO)
    run.write_exchange(session, compress_later=compress_later)
    run.close(compact=True)
    assert (tmp_path / "w.wtape").stat().st_size < 256 * 1024
    with open_run(tmp_path / "w.wtape") as again:
        (read,) = again.exchanges()
        assert again.body_bytes() == 2 * len(big) + len(other) + len(small)
    assert read == session
    db = sqlite3.connect(tmp_path / "w.wtape")
    rows = db.execute("SELECT size, payload IS NULL, blob FROM messages ORDER BY idx").fetchall()
    db.close()
    assert [(size, held) for size, held, _ in rows] == [
        (len(big), True), (len(big), True), (len(other), True), (len(small), False)]
    assert rows[0][2] == rows[1][2] != rows[2][2] and rows[3][2] is None  # stored once


def test_a_session_s_payloads_are_read_when_its_exchange_is_reached(tmp_path: Path) -> None:
    """Reading exchanges one by one (as export does) reads each session's
    payloads when its exchange is built: a payload of the second session
    that is not stored stops the reading there, after the first."""
    first = _session(b"x" * 5120, b"ok")
    second = replace(_session(b"y" * 5120, b"ok"), seq=1)
    run = RunFile.create(tmp_path / "s.wtape", INFO)
    run.write_exchange(first)
    run.write_exchange(second)
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "s.wtape", isolation_level=None)
    db.execute("UPDATE messages SET blob = 'ab' || substr(blob, 3) WHERE seq = 1 AND idx = 0")
    db.close()
    with open_run(tmp_path / "s.wtape") as run_:
        read = run_.iter_exchanges()
        assert next(read) == first
        with pytest.raises(RunFileError) as err:
            next(read)
    assert "message 0 of exchange 1: its payload is in the body 'ab" in str(err.value)


@pytest.mark.parametrize(("edit", "said"), [
    ("UPDATE messages SET blob = 'ab' || substr(blob, 3) WHERE idx = 0",
     "message 0 of exchange 0: its payload is in the body 'ab"),
    ("UPDATE messages SET size = size + 1 WHERE idx = 0",
     "message 0 of exchange 0: it says its payload is 5121 bytes but 5120 are stored"),
    ("UPDATE messages SET size = 3 WHERE idx = 1",
     "message 1 of exchange 0: it says its payload is 3 bytes but 2 are stored"),
    ("UPDATE messages SET payload = x'00' WHERE idx = 0",
     "message 0 of exchange 0: it holds its payload and names a body too"),
    ("UPDATE blobs SET size = 7 WHERE hash = (SELECT blob FROM messages WHERE idx = 0)",
     "says it is 7 bytes"),
])
def test_a_hostile_message_row_is_one_clear_error(tmp_path: Path, edit: str, said: str) -> None:
    run = RunFile.create(tmp_path / "h.wtape", INFO)
    run.write_exchange(_session(b"x" * 5120, b"ok"))
    run.close(compact=True)
    db = sqlite3.connect(tmp_path / "h.wtape", isolation_level=None)
    db.execute(edit)
    db.close()
    with open_run(tmp_path / "h.wtape") as hostile, pytest.raises(RunFileError) as err:
        hostile.exchanges()
    message = str(err.value)
    assert said in message and "damaged or was edited" in message
    assert "\n" not in message and "Traceback" not in message
