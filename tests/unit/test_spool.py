"""A long response body staged in parts: the streaming redaction gives what
redaction of the whole gives, wherever the pieces are cut; a body made of
parts reads back as it was; staged parts of a body never committed are
invisible, left out of the stored bytes, and swept."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sqlite3
from pathlib import Path

import pytest

from wiretape.errors import RunFileWriteError
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.proxy.spool import Spool, StreamRedactor, may_spool
from wiretape.redaction import STANDARD, Facts, literal_rules, redact_text
from wiretape.store import blobs
from wiretape.store.runfile import RunFile, SpooledBody, open_run

INFO = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=(), cwd="/x",
               env_names=(), origins=(Origin("openai", "https://h/v1", 9, ()),), started_at_ns=5)

KEY = b"sk-proj-" + b"A1b2C3d4E5" * 4
PEM = (b"-----BEGIN RSA PRIVATE KEY-----\n"
       + b"MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n" * 3
       + b"-----END RSA PRIVATE KEY-----")


def body_with_secrets(size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += rng.choice([b"data: hello world\n\n", b"x" * rng.randrange(1, 90), b" ",
                           b"token=" + KEY + b" ", b"(" + PEM + b")", b"my-literal-value!",
                           b"_" + KEY])  # a key after "_" is no key (look-behind)
    return bytes(out)


def streamed(body: bytes, cuts: list[int], rules=STANDARD, reach: int = 300,
             ) -> tuple[bytes, list]:
    redactor = StreamRedactor(rules, "response-body", reach=reach)
    out, pos = [], 0
    for cut in [*cuts, len(body)]:
        out.append(redactor.feed([body[pos:cut]]))
        pos = cut
    out.append(redactor.flush())
    return b"".join(out), redactor.facts


@pytest.mark.parametrize("seed", range(6))
def test_streamed_redaction_is_that_of_the_whole_wherever_it_is_cut(seed: int) -> None:
    rules = literal_rules([("env:X", b"my-literal-value!")])
    body = body_with_secrets(20_000, seed)
    whole = Facts()
    expected = redact_text(body, "response-body", rules, whole)[0]
    assert expected != body and b"token=" + KEY not in expected
    rng = random.Random(seed)
    # cuts inside and around every secret, and pieces smaller than a secret
    cuts = sorted({rng.randrange(1, len(body)) for _ in range(60)}
                  | {body.find(KEY) + k for k in range(0, len(KEY) + 2, 3)}
                  | set(range(100, 400, 7)))
    got, facts = streamed(body, cuts, rules)
    assert got == expected
    assert len(facts) == len(set(facts)) and set(facts) == set(whole.items)  # one per secret


def test_a_secret_split_in_one_byte_pieces_is_still_masked() -> None:
    body = b"before " + KEY + b" after"
    got, facts = streamed(body, list(range(1, len(body))), reach=64)
    assert got == redact_text(body, "response-body")[0]
    assert KEY not in got and [f.name for f in facts] == ["openai-key"]


def spooled_run(tmp_path: Path, data: bytes, part: int) -> tuple[RunFile, Path, SpooledBody]:
    path = tmp_path / "r.wtape"
    run = RunFile.create(path, INFO)
    token = "0123456789abcdef" * 2
    sizes = []
    for i in range(0, len(data), part):
        codec, payload = blobs.compress_part(data[i:i + part])
        run.stage_part(token, len(sizes), len(data[i:i + part]), codec, payload)
        sizes.append(len(data[i:i + part]))
    return run, path, SpooledBody(token, tuple(sizes), hashlib.sha256(data).hexdigest())


def test_a_body_in_parts_reads_back_frame_for_frame(tmp_path: Path) -> None:
    data = bytes(random.Random(1).randbytes(300_000)) + b"\x00" * 200_000
    run, path, body = spooled_run(tmp_path, data, 64 * 1024 + 3)
    frames = [(10 + i, n) for i, n in enumerate([1, 4095, 100_000, 0, 395_904])]
    assert sum(n for _, n in frames) == len(data)
    response = Response(200, b"OK", ((b"content-type", b"text/event-stream"),), ())
    exchange = Exchange(0, 1, "openai", 1, Request(b"POST", b"/v1/x", (), b"{}"), response,
                        Ending.COMPLETE, 5, 50)
    run.write_spooled_exchange(exchange, (), body, iter(frames))
    run.close(compact=True)
    with open_run(path) as again:
        [stored] = again.exchanges()
        assert again.stored_bytes() > 0
    assert stored.response is not None and stored.response.body == data
    expected, pos = [], 0
    for offset, n in frames:
        expected.append(Frame(offset, data[pos:pos + n]))
        pos += n
    assert stored.response.frames == tuple(expected)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT codec, size, ref FROM blobs WHERE hash = ?",
                          (body.sha256,)).fetchone() == ("parts", len(data), body.token)
        assert db.execute("SELECT count(*) FROM blobs WHERE hash LIKE 'part:%'"
                          ).fetchone()[0] == len(body.sizes) == 8


def test_staged_parts_never_committed_are_invisible_and_swept(tmp_path: Path) -> None:
    run, path, body = spooled_run(tmp_path, b"y" * 100_000, 30_000)
    assert run.stored_bytes() == 0  # staged, reached from nothing
    assert run.exchange_count() == 0
    assert run.sweep(keep={body.token}) == 0  # still being spooled: kept
    run.close()  # closing a file being written sweeps
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0


def test_opening_for_writing_sweeps_what_a_killed_recording_staged(tmp_path: Path) -> None:
    run, path, _ = spooled_run(tmp_path, b"z" * 100_000, 30_000)
    # what a SIGKILL leaves: the connection gone without closing
    run.connection.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM blobs WHERE hash LIKE 'part:%'").fetchone()[0] == 4
    with open_run(path) as reader:
        assert reader.exchanges() == [] and reader.stored_bytes() == 0
    RunFile.open(path, write=True).close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0


def test_the_same_body_spooled_twice_is_stored_once(tmp_path: Path) -> None:
    data = b"same body " * 20_000
    run, path, body = spooled_run(tmp_path, data, 50_000)
    response = Response(200, b"OK", (), ())
    for seq in (0, 1):
        if seq:
            token = "f" * 32
            for i, n in enumerate(body.sizes):
                chunk = data[sum(body.sizes[:i]):sum(body.sizes[:i]) + n]
                run.stage_part(token, i, n, *blobs.compress_part(chunk))
            body = SpooledBody(token, body.sizes, body.sha256)
        run.write_spooled_exchange(
            Exchange(seq, 1, "openai", 1, Request(b"GET", b"/", (), b""), response,
                     Ending.COMPLETE, 1, 2), (), body, iter([(1, len(data))]))
    run.close()
    with open_run(path) as again:
        assert [e.response.body == data for e in again.exchanges() if e.response] == [True] * 2
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM blobs WHERE hash LIKE 'part:%'").fetchone()[0] == 4


def run_spool(run: RunFile, batches: list[list[bytes]]) -> tuple[SpooledBody, list]:
    """A Spool fed ``batches`` on an event loop of its own, then finished."""
    async def go() -> tuple[SpooledBody, list]:
        spool = Spool(run, STANDARD)
        for batch in batches[:-1]:
            await spool.put(batch)
        await spool.close(batches[-1])
        return await asyncio.to_thread(spool.finish)

    return asyncio.run(go())


def test_a_spool_stages_redacted_parts(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    data = body_with_secrets(3 * 1024 * 1024, 7)
    pieces = [data[i:i + 40_000] for i in range(0, len(data), 40_000)]
    plain, facts = run_spool(run, [pieces[:30], pieces[30:60], pieces[60:]])
    found = Facts()
    expected = redact_text(data, "response-body", facts=found)[0]
    assert plain.sha256 == hashlib.sha256(expected).hexdigest()
    assert plain.size == len(data) and len(plain.sizes) >= 2
    assert facts and set(facts) == set(found.items)
    run.close()


def test_a_coded_response_is_never_spooled() -> None:
    """A coded body is redacted decoded, and coded again whole when it held
    a secret: it is held whole, however long."""
    assert may_spool(((b"Content-Type", b"text/event-stream"),))
    assert may_spool(((b"Content-Encoding", b"identity"),))
    for coding in (b"gzip", b"deflate", b"zstd", b"br", b"gzip, br"):
        assert not may_spool(((b"Content-Encoding", coding),)), coding


def test_a_spool_whose_writes_fail_says_so_when_finished(tmp_path: Path) -> None:
    run = RunFile.create(tmp_path / "r.wtape", INFO)
    run.connection.close()  # every write now fails
    with pytest.raises(RunFileWriteError):
        run_spool(run, [[b"x" * 300_000], [b"y" * 300_000]])
