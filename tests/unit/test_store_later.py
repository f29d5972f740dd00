"""What waits for a recorded exchange's commit, and what is done after it.

The recorder commits an exchange's bodies raw (the cheapest write) and
compresses them afterwards, on the run file's own thread, under the same
hashes: every reader gets the same bytes at every moment, and a process
killed in between leaves a correct file, only bigger. The blob writer keeps
the previous request body it wrote (never decompressing it again). What the
forward proxy saw is written off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import zstandard
from test_proxy_handlers import CHAT, JSON, recording

from support.inproc import RawClient, in_loop, request_bytes
from wiretape.launch.record import ReportKeeper
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.proxy import record
from wiretape.proxy.connect import ConnectReport
from wiretape.proxy.record import Recorder
from wiretape.redaction import STANDARD, redact_text
from wiretape.store import blobs
from wiretape.store.runfile import RunFile, open_run
from wiretape.testing import AsyncFakeProvider, TextTurn

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=(), cwd="/x",
               env_names=(), origins=(Origin("openai", "https://h/v1", 9, ()),),
               started_at_ns=5)


def conversation(turns: int) -> list[bytes]:
    """Request bodies of a conversation resent whole each turn (over 16 KiB:
    smaller ones are compressed by the commit itself)."""
    messages = [{"role": "system", "content": os.urandom(9_000).hex()}]
    out = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"turn {turn}: " + os.urandom(600).hex()})
        out.append(json.dumps({"model": "m", "messages": messages}).encode())
    return out


def exchange(seq: int, body: bytes) -> Exchange:
    answer = json.dumps({"choices": [{"message": {"content": "ok " * 40 + str(seq)}}]}).encode()
    return Exchange(seq, 1, "openai", 100 + seq,
                    Request(b"POST", b"/v1/chat/completions", JSON_HEADERS, body),
                    Response(200, b"OK", JSON_HEADERS,
                             (Frame(10, answer[:20]), Frame(20, answer[20:]))),
                    Ending.COMPLETE, 7, 30)


JSON_HEADERS = ((b"Content-Type", b"application/json"),)


def stored_blobs(path: Path) -> dict[str, tuple[str, str | None, int, int]]:
    """hash -> (codec, ref, depth, stored length), read as an outsider would."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {h: (c, r, d, n) for h, c, r, d, n in db.execute(
            "SELECT hash, codec, ref, depth, length(data) FROM blobs")}
    finally:
        db.close()


def held_back(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Hold the run file's background compression until the event is set."""
    gate = threading.Event()
    compress = RunFile._compress

    def waiting(self: RunFile, *args: object) -> None:
        gate.wait(30)
        compress(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(RunFile, "_compress", waiting)
    return gate


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def record_turns(path: Path, bodies: list[bytes],
                       after: Callable[[bytes], Awaitable[None]] | None = None) -> Recorder:
    """Each body sent as a chat request through a recorder writing
    ``path`` in front of a fake provider, its answer read (a 200), then
    ``after(body)`` awaited; the recorder, once closed (every exchange
    committed)."""
    async with (AsyncFakeProvider([TextTurn(f"answer {i}") for i in range(len(bodies))]) as fp,
                recording(path, fp.url + "/v1") as rec,
                await RawClient.open(rec.port) as client):
        for body in bodies:
            await client.send(request_bytes("POST", CHAT, body, JSON))
            assert (await asyncio.wait_for(client.response(), 20)).status == 200
            if after is not None:
                await after(body)
    return rec.recorder


def test_a_body_committed_raw_reads_back_the_same_before_and_after_compression(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.wtape"
    gate = held_back(monkeypatch)
    bodies = conversation(3)
    written = [exchange(i, body) for i, body in enumerate(bodies)]
    run = RunFile.create(path, INFO)
    for ex in written:
        run.write_exchange(ex, compress_later=True, request_digest=sha(ex.request.body))

    # Committed: raw, under the bytes' own hashes, and read back whole.
    before = stored_blobs(path)
    requests = [sha(b) for b in bodies]
    assert [before[h][0] for h in requests] == ["raw"] * 3
    assert all(before[h][3] == len(b) for h, b in zip(requests, bodies, strict=True))
    assert run.exchanges() == written

    gate.set()
    run.settle()
    after = stored_blobs(path)
    assert set(after) == set(before)  # the same hashes: rows changed in place
    # Each request against the one before it; a response on its own.
    assert after[requests[0]][:3] == ("zstd", None, 0)
    assert after[requests[1]][:3] == ("splice", requests[0], 1)
    assert after[requests[2]][:3] == ("splice", requests[1], 2)
    assert after[requests[2]][3] < len(bodies[2]) - len(bodies[1])  # about its new bytes
    response = sha(written[0].response.body)  # type: ignore[union-attr]
    assert after[response][0] == "zstd"
    assert run.exchanges() == written
    run.close(compact=True)
    with open_run(path) as again:
        assert again.exchanges() == written
        for digest in after:
            assert sha(blobs.get(again.connection, digest)) == digest


def test_a_process_killed_before_the_compression_leaves_a_correct_file(tmp_path: Path) -> None:
    path = tmp_path / "r.wtape"
    bodies = conversation(3)
    (tmp_path / "bodies.json").write_text(json.dumps([b.decode() for b in bodies]))
    script = textwrap.dedent(f"""
        import json, os, signal, threading, sys
        sys.path[:0] = {sys.path!r}
        from test_store_later import INFO, exchange
        from wiretape.store.runfile import RunFile
        RunFile._compress = lambda self, *args: threading.Event().wait()  # never done
        run = RunFile.create({str(path)!r}, INFO)
        bodies = json.loads(open({str(tmp_path / "bodies.json")!r}).read())
        for i, body in enumerate(bodies):
            run.write_exchange(exchange(i, body.encode()), compress_later=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == -9, done.stderr
    assert Path(f"{path}-wal").exists()  # killed: nothing folded back
    kept = stored_blobs(path)
    assert [kept[sha(b)][0] for b in bodies] == ["raw"] * 3
    with open_run(path) as again:
        assert again.exchanges() == [exchange(i, body) for i, body in enumerate(bodies)]


def test_writing_against_the_previous_body_never_reads_it_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("a body was read back while writing")

    bodies = conversation(3)
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    with monkeypatch.context() as patched:
        patched.setattr(blobs, "get", refuse)
        for i, body in enumerate(bodies):
            run.write_exchange(exchange(i, body))  # compressed at once
    kept = stored_blobs(tmp_path / "r.wtape")
    assert kept[sha(bodies[2])][:3] == ("splice", sha(bodies[1]), 2)
    assert [e.request.body for e in run.exchanges()] == bodies
    run.close()


def test_the_dictionary_chain_stays_capped_when_compressed_later(tmp_path: Path) -> None:
    turns = blobs.MAX_REF_DEPTH + 8
    bodies = conversation(turns)
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    for i, body in enumerate(bodies):
        run.write_exchange(exchange(i, body), compress_later=True)
    run.close(compact=True)
    kept = stored_blobs(tmp_path / "r.wtape")
    depths = [kept[sha(b)][2] for b in bodies]
    assert max(depths) == blobs.MAX_REF_DEPTH
    assert depths[blobs.MAX_REF_DEPTH + 1] == 0  # the chain starts again
    with open_run(tmp_path / "r.wtape") as again:
        assert [e.request.body for e in again.exchanges()] == bodies
    # Kept small: each turn costs about its new bytes.
    assert sum(n for _, _, _, n in kept.values()) < sum(map(len, bodies)) / 10


def test_a_body_whose_dictionary_changed_meanwhile_stays_raw(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    first, second = conversation(2)
    db = run.connection
    db.execute("BEGIN IMMEDIATE")
    for body in (first, second):
        assert blobs.put_raw(db, body, sha(body))
    packed = blobs.Packer().pack(second, blobs.Reference(sha(first), first, 0))
    assert packed[:3] == ("splice", sha(first), 1)
    db.execute("UPDATE blobs SET depth = 5 WHERE hash = ?", (sha(first),))
    assert not blobs.recompress(db, sha(second), len(second), packed)
    db.execute("UPDATE blobs SET depth = 0 WHERE hash = ?", (sha(first),))
    assert blobs.recompress(db, sha(second), len(second), packed)
    assert not blobs.recompress(db, sha(second), len(second), packed)  # no longer raw
    db.execute("COMMIT")
    assert blobs.get(db, sha(second)) == second
    run.close()


@in_loop
async def test_the_recorder_commits_then_compresses_and_aclose_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "sk-proj-" + "q" * 40
    bodies = [body.replace(b'"turn ', f'"{key} turn '.encode()) for body in conversation(3)]
    await record_turns(tmp_path / "r.wtape", bodies)
    kept = stored_blobs(tmp_path / "r.wtape")
    with open_run(tmp_path / "r.wtape") as again:
        exchanges = again.exchanges()
        facts = again.redactions()
    assert [e.request.body for e in exchanges] == [redact_text(b, "request-body")[0]
                                                   for b in bodies]
    assert not any(key.encode() in e.request.body for e in exchanges)
    assert [seq for seq, f in facts if f.location == "request-body"] == [0, 1, 1, 2, 2, 2]
    stored = [sha(e.request.body) for e in exchanges]
    assert [kept[h][:3] for h in stored[:2]] == [("zstd", None, 0), ("splice", stored[0], 1)]
    # The third is spliced from the one before it, or (packed ahead while
    # the second was still being committed) from the first: both hold.
    assert kept[stored[2]][:3] in (("splice", stored[1], 2), ("splice", stored[0], 1))


@in_loop
async def test_the_connect_report_is_written_off_the_loop_while_a_store_holds_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    writers: list[threading.Thread] = []
    set_report: Callable[..., None] = run.set_connect_report

    def noting(report: object) -> None:
        writers.append(threading.current_thread())
        set_report(report)

    monkeypatch.setattr(run, "set_connect_report", noting)
    held, release = threading.Event(), threading.Event()

    def store() -> None:  # a store thread in the middle of a commit
        with run._lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=store)
    holder.start()
    held.wait(30)
    keeper = ReportKeeper(STANDARD)
    report = ConnectReport()
    report.intercepted["api.openai.com"] = 1
    keeper.keep(run, report)  # returns at once: the loop goes on
    report.intercepted["api.openai.com"] = 2
    report.rejected["api.openai.com"] = "sk-proj-" + "z" * 40
    keeper.keep(run, report)
    await asyncio.sleep(0.05)
    assert not writers or writers[0] is not threading.current_thread()
    release.set()
    await keeper.settle()
    holder.join()
    assert writers and all(t is not threading.current_thread() for t in writers)
    assert len(writers) <= 2  # the latest report, not one write per change
    saved = run.connect_report()
    assert saved is not None and saved["intercepted"] == {"api.openai.com": 2}
    assert "zzzz" not in saved["rejected"]["api.openai.com"]
    run.close()


def test_a_request_packed_ahead_is_committed_compressed_when_its_dictionary_holds(
        tmp_path: Path) -> None:
    path = tmp_path / "r.wtape"
    system = os.urandom(20_000).hex().encode()  # what each turn resends: far more than it adds
    bodies = [system + body for body in conversation(3)]
    run = RunFile.create(path, INFO)
    assert run.pack_request(bodies[0], sha(bodies[0])) is None  # nothing to compress against
    run.write_exchange(exchange(0, bodies[0]), compress_later=True)
    run.settle()  # compressed, and its dictionary made ready for the next body
    packed = run.pack_request(bodies[1], sha(bodies[1]))
    assert packed is not None and (packed.ref, packed.depth) == (sha(bodies[0]), 1)
    run.write_exchange(exchange(1, bodies[1]), compress_later=True, request_packed=packed)
    # Stored compressed by the commit itself (nothing was handed to the
    # background thread yet).
    assert stored_blobs(path)[sha(bodies[1])][:3] == ("splice", sha(bodies[0]), 1)
    run.settle()

    # A dictionary no longer as it was packed against: the body goes raw,
    # then is compressed afterwards; either way it reads back the same.
    packed = run.pack_request(bodies[2], sha(bodies[2]))
    assert packed is not None and packed.ref == sha(bodies[1])
    with run._write() as db:
        db.execute("UPDATE blobs SET depth = 9 WHERE hash = ?", (sha(bodies[1]),))
    run.write_exchange(exchange(2, bodies[2]), compress_later=True, request_packed=packed)
    assert stored_blobs(path)[sha(bodies[2])][0] == "raw"
    assert run.exchanges()[2].request.body == bodies[2]
    run.settle()
    assert stored_blobs(path)[sha(bodies[2])][:3] == ("splice", sha(bodies[1]), 10)
    run.close(compact=True)
    with open_run(path) as again:
        assert [e.request.body for e in again.exchanges()] == bodies


def test_the_wal_is_folded_back_by_the_background_thread_not_by_a_commit(
        tmp_path: Path) -> None:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    answer = os.urandom(1 << 20)
    for i in range(6):
        ex = exchange(i, b"{}")
        assert ex.response is not None
        big = Response(200, b"OK", (), (Frame(1, answer[:-i - 1]),))
        run.write_exchange(Exchange(i, 1, "openai", 1, ex.request, big, Ending.COMPLETE, 1, 2),
                           compress_later=True)
    # A commit never checkpoints: everything is still in the WAL ...
    assert run.connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert path.stat().st_size < 1 << 20 < Path(f"{path}-wal").stat().st_size
    run.settle()
    # ... until the background thread folded it into the file.
    assert path.stat().st_size > 4 << 20
    run.close(compact=True)
    with open_run(path) as again:
        assert [len(e.response.body) for e in again.exchanges() if e.response] == [
            len(answer) - i - 1 for i in range(6)]


def test_small_bodies_are_compressed_by_the_commit_itself(tmp_path: Path) -> None:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 300}]})
    ex = exchange(0, body.encode())
    run.write_exchange(ex, compress_later=True)
    kept = stored_blobs(path)  # nothing handed to the background thread yet
    assert ex.response is not None
    assert kept[sha(ex.request.body)][0] == kept[sha(ex.response.body)][0] == "zstd"
    assert kept[sha(ex.request.body)][3] < len(body) / 4
    assert run.exchanges() == [ex]
    run.close()


def test_a_request_whose_chain_is_at_its_limit_is_packed_ahead_alone(tmp_path: Path) -> None:
    """A reference chain at ``MAX_REF_DEPTH`` gives nothing to pack
    against: the body is packed ahead with zstd alone (depth 0, a new chain),
    not left for the commit to store raw."""
    packer = blobs.Packer()
    system = os.urandom(20_000).hex().encode()  # what each turn resends
    bodies = [system + body for body in conversation(2)]
    assert packer.pack_ahead(bodies[1], sha(bodies[1])) is None  # no reference yet: later
    packer.prepare(sha(bodies[0]), bodies[0], blobs.MAX_REF_DEPTH - 1)
    below = packer.pack_ahead(bodies[1], sha(bodies[1]))
    assert below is not None and (below.codec, below.ref, below.depth) == (
        "splice", sha(bodies[0]), blobs.MAX_REF_DEPTH)
    packer.prepare(sha(bodies[0]), bodies[0], blobs.MAX_REF_DEPTH)
    alone = packer.pack_ahead(bodies[1], sha(bodies[1]))
    assert alone is not None and (alone.codec, alone.ref, alone.depth) == ("zstd", None, 0)
    assert zstandard.ZstdDecompressor().decompress(alone.payload) == bodies[1]
    assert packer.pack_ahead(b"x" * 10, sha(b"x" * 10)) is None  # too small to pack


@in_loop
async def test_the_commit_waits_for_a_request_body_compressed_within_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request body whose compression ahead ends within its budget
    (``PACK_WAIT_PER_BYTE``, here made long) goes into the commit
    compressed: written once, never raw and again afterwards."""
    pack, put_raw = RunFile.pack_request, blobs.put_raw
    raw: list[str] = []  # the bodies written raw, by hash

    def slow(self: RunFile, body: bytes, digest: str) -> blobs.Packed | None:
        threading.Event().wait(0.3)  # (longer than the answer takes)
        return pack(self, body, digest)

    def spied(db: sqlite3.Connection, data: bytes, digest: str) -> bool:
        raw.append(digest)
        return put_raw(db, data, digest)

    monkeypatch.setattr(RunFile, "pack_request", slow)
    monkeypatch.setattr(blobs, "put_raw", spied)
    monkeypatch.setattr(record, "PACK_WAIT_PER_BYTE", 1e-3)  # (a second per KB)
    bodies = conversation(2)

    async def compressed(body: bytes) -> None:  # (the first: afterwards, to be the reference)
        for _ in range(200):
            if stored_blobs(tmp_path / "r.wtape")[sha(body)][0] != "raw":
                return
            await asyncio.sleep(0.05)

    assert (await record_turns(tmp_path / "r.wtape", bodies, compressed)).stats.exchanges == 2
    # the first had nothing to be compressed against ahead: raw, then
    # compressed; the second was spliced against it before its commit
    assert raw == [sha(bodies[0])]
    assert stored_blobs(tmp_path / "r.wtape")[sha(bodies[1])][:3] == (
        "splice", sha(bodies[0]), 1)
    with open_run(tmp_path / "r.wtape") as again:
        assert [e.request.body for e in again.exchanges()] == bodies


@in_loop
async def test_the_commit_never_waits_for_a_request_body_to_be_compressed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request body whose compression ahead is not done when the answer
    ends, nor within its budget, is committed raw (compressed afterwards):
    the agent gets its answer while that compression is still held."""
    packing = threading.Event()
    entered: list[int] = []  # the bodies whose compression ahead began
    pack = RunFile.pack_request

    def slow(self: RunFile, body: bytes, digest: str) -> blobs.Packed | None:
        entered.append(len(body))
        packing.wait(30)
        return pack(self, body, digest)

    monkeypatch.setattr(RunFile, "pack_request", slow)
    later = held_back(monkeypatch)  # (so what the commit stored is seen as it was)
    bodies = conversation(2)
    async with (AsyncFakeProvider([TextTurn("one"), TextTurn("two")]) as fp,
                recording(tmp_path / "r.wtape", fp.url + "/v1") as rec,
                await RawClient.open(rec.port) as client):
        for body in bodies:
            await client.send(request_bytes("POST", CHAT, body, JSON))
            assert (await asyncio.wait_for(client.response(), 20)).status == 200
        assert rec.recorder.stats.exchanges == 2
        for _ in range(200):  # (each began on a worker thread of its own accord)
            if len(entered) == 2:
                break
            await asyncio.sleep(0.05)
        assert sorted(entered) == sorted(len(b) for b in bodies)  # both held meanwhile
        committed = stored_blobs(tmp_path / "r.wtape")
        assert [committed[sha(b)][0] for b in bodies] == ["raw", "raw"]
        packing.set()
        later.set()
    kept = stored_blobs(tmp_path / "r.wtape")
    with open_run(tmp_path / "r.wtape") as again:
        assert [e.request.body for e in again.exchanges()] == bodies
    assert [kept[sha(b)][:3] for b in bodies] == [
        ("zstd", None, 0), ("splice", sha(bodies[0]), 1)]  # compressed afterwards
