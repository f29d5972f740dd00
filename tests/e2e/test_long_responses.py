"""A response too long to hold in memory while it is recorded (DESIGN.md,
"Long responses"): written to the run file in parts as it streams, it reads
back frame for frame and replays byte for byte, its keys masked; a SIGKILL
mid-stream leaves a sound file with no trace of it, whose staged parts the
next open for writing removes; a hostile list of parts is refused with one
line.

A low threshold (``WIRETAPE_SPOOL_BYTES``) makes a 48 MiB stream spool
from its first MiB, so the tests stay quick."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.big_stream import SECRET_EVERY, BigStream, stream_body
from support.readonly import why_no_private_mounts
from wiretape.redaction import Facts, redact_text
from wiretape.store.runfile import RunFile, open_run

pytestmark = pytest.mark.timeout(600)

MIB = 1024 * 1024
TOTAL = 48 * MIB
SMALL = 500  # bytes of the short stream recorded before the long one (no key in them)


def env(spool_at: int) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")
           and not k.startswith(("OPENAI_", "ANTHROPIC_", "WIRETAPE_"))}
    out["WIRETAPE_SPOOL_BYTES"] = str(spool_at)
    return out


class Serve:
    """``wiretape serve ARGS`` in the background; ``url``: its origin's URL."""

    def __init__(self, cwd: Path, *args: str, spool_at: int = MIB) -> None:
        self.err = cwd / f"serve-{time.monotonic_ns()}.err"
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "wiretape", "serve", *args],
                                         cwd=cwd, env=env(spool_at), stdout=subprocess.PIPE,
                                         stderr=err)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("openai: http://127.0.0.1:"), (line, self.err.read_text())
        self.url = line.split(": ", 1)[1].strip()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        self.proc.communicate(timeout=120)
        return self.proc.returncode

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def __enter__(self) -> Serve:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def fetch(url: str, size: int) -> bytes:
    with httpx.Client(timeout=120, trust_env=False) as client, client.stream(
            "POST", f"{url}/chat/completions", content=b'{"stream": true}',
            headers={"content-type": "application/json", "x-size": str(size)}) as resp:
        assert resp.status_code == 200
        return b"".join(resp.iter_raw())


def parts(run: Path) -> int:
    """Staged parts in the file, counted as an outsider would."""
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True, timeout=5)
    try:
        return int(db.execute("SELECT count(*) FROM blobs WHERE hash LIKE 'part:%'"
                              ).fetchone()[0])
    finally:
        db.close()


@pytest.fixture(scope="module")
def whole() -> bytes:
    return b"".join(stream_body(TOTAL))


@pytest.fixture(scope="module")
def spooled_run(tmp_path_factory: pytest.TempPathFactory, whole: bytes) -> Path:
    base = tmp_path_factory.mktemp("spooled")
    run = base / "long.wtape"
    with BigStream(TOTAL) as up, Serve(base, "--record", "--port", "0", "-o", str(run),
                                       "--upstream", f"openai={up.url}/v1") as serve:
        assert fetch(serve.url, SMALL) == whole[:SMALL]
        assert fetch(serve.url, TOTAL) == whole  # relayed as sent, secrets and all
        assert serve.stop() == 0, serve.err.read_text()
    return run


def test_a_long_stream_is_stored_in_parts_and_reads_back_frame_for_frame(
        spooled_run: Path, whole: bytes) -> None:
    facts = Facts()
    expected = redact_text(whole, "response-body", facts=facts)[0]
    keys = len(range(7, TOTAL // 128, SECRET_EVERY))  # events of 128 bytes, one key each
    assert whole.count(b"sk-proj-") == keys and expected.count(b"sk-proj-") == 0
    with open_run(spooled_run) as rf:
        small, long = rf.exchanges()
        redactions = rf.redactions()
    assert small.response is not None and small.response.body == whole[:SMALL]
    assert long.response is not None
    frames = long.response.frames
    assert b"".join(f.data for f in frames) == expected
    # frames as read off the wire: many, none empty, in time order
    assert len(frames) >= TOTAL // (256 * 1024)
    assert all(f.data for f in frames)
    assert [f.offset_ns for f in frames] == sorted(f.offset_ns for f in frames)
    assert frames[-1].offset_ns <= long.duration_ns
    assert {r for seq, r in redactions if seq == 1} == set(facts.items)
    assert len([r for seq, r in redactions if seq == 1]) == keys  # one fact per key
    # the long body is a list of parts; the short one is a body of its own
    db = sqlite3.connect(f"file:{spooled_run}?mode=ro", uri=True)
    try:
        codecs = dict(db.execute("SELECT e.seq, b.codec FROM exchanges e JOIN blobs b"
                                 " ON b.hash = e.response_body").fetchall())
        assert codecs == {0: "raw" if SMALL < 64 else "zstd", 1: "parts"}
        assert db.execute("SELECT count(*) FROM blobs WHERE hash LIKE 'part:%'"
                          ).fetchone()[0] >= TOTAL // (2 * MIB)
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()


def test_a_long_stream_replays_byte_for_byte(spooled_run: Path, tmp_path: Path,
                                             whole: bytes) -> None:
    expected = redact_text(whole, "response-body")[0]
    with Serve(tmp_path, "--replay", str(spooled_run), "--port", "0") as serve:
        assert fetch(serve.url, SMALL) == whole[:SMALL]
        got = fetch(serve.url, TOTAL)
        serve.stop()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest()


@pytest.fixture
def killed_mid_stream(tmp_path: Path) -> Iterator[Path]:
    """A run whose recording was SIGKILLed while a long response was being
    spooled: one short exchange committed before it."""
    run = tmp_path / "killed.wtape"
    with BigStream(TOTAL, pause_after=12 * MIB) as up, Serve(
            tmp_path, "--record", "--port", "0", "-o", str(run), "--upstream",
            f"openai={up.url}/v1") as serve:
        fetch(serve.url, SMALL)
        failed: list[BaseException] = []

        def long_fetch() -> None:
            try:
                fetch(serve.url, TOTAL)
            except httpx.HTTPError as exc:  # the proxy is killed under it
                failed.append(exc)

        client = threading.Thread(target=long_fetch)
        client.start()
        assert up.paused.wait(120), serve.err.read_text()
        deadline = time.monotonic() + 60
        while parts(run) < 4:  # the spool is writing: parts are in the file
            assert time.monotonic() < deadline, "no parts staged"
            time.sleep(0.05)
        serve.kill9()
        up.release.set()
        client.join(60)
        assert failed  # the client never saw this response end
    yield run


def test_a_kill_mid_stream_leaves_no_trace_and_the_next_writer_sweeps(
        killed_mid_stream: Path, tmp_path: Path) -> None:
    run = killed_mid_stream
    staged = parts(run)
    assert staged >= 4  # the killed stream's parts are there, reached from nothing
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    with open_run(run) as rf:
        [only] = rf.exchanges()
        assert only.response is not None and len(only.response.body) == SMALL
        assert rf.stored_bytes() < 10_000  # the staged parts are not counted
        assert [seq for seq, _ in rf.redactions() if seq is not None] == []
    shown = subprocess.run([sys.executable, "-m", "wiretape", "show", str(run), "--json"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert [(e["seq"], e["bytes"]) for e in json.loads(shown.stdout)["exchanges"]] == [
        (0, SMALL)]
    RunFile.open(run, write=True).close()
    assert parts(run) == 0
    with open_run(run) as rf:
        assert [len(e.response.body) for e in rf.exchanges() if e.response] == [SMALL]


# --- a hostile list of parts ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_spooled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose one response (1 MiB) was spooled in parts."""
    base = tmp_path_factory.mktemp("small")
    run = base / "small.wtape"
    with BigStream(MIB) as up, Serve(base, "--record", "--port", "0", "-o", str(run),
                                     "--upstream", f"openai={up.url}/v1",
                                     spool_at=64 * 1024) as serve:
        fetch(serve.url, MIB)
        assert serve.stop() == 0
    return run


def _size(n: int) -> bytes:
    return struct.pack(">Q", n)


@pytest.mark.parametrize(("statement", "params", "said"), [
    ("UPDATE blobs SET data = ? WHERE codec = 'parts'", (b"not a list",),
     "its list of parts is malformed"),
    ("UPDATE blobs SET data = ? WHERE codec = 'parts'", (b"WTP1" + _size(1),),
     "its parts' sizes do not add up to it"),
    ("UPDATE blobs SET data = ?, size = 70000 WHERE codec = 'parts'",
     (b"WTP1" + _size(1) * 70000,), "lists 70000 parts, more than the 65536"),
    ("UPDATE blobs SET ref = ? WHERE codec = 'parts'", ("../../etc",),
     "names no valid part set"),
    ("DELETE FROM blobs WHERE hash LIKE ?", ("part:%:1",), "lacks its part 1"),
    ("UPDATE blobs SET codec = ? WHERE hash LIKE 'part:%:0'", ("parts",),
     "part 0, has a codec a part cannot have"),
    ("UPDATE blobs SET data = ? WHERE hash LIKE 'part:%:2'", (b"x" * 40,),
     "is not zstd data"),
    ("UPDATE blobs SET size = size + 1 WHERE hash LIKE ?", ("part:%:0",),
     "part 0, is not stored as its list of parts says"),
])
def test_a_malformed_list_of_parts_is_refused_with_one_line(
        small_spooled: Path, tmp_path: Path, statement: str, params: tuple[object, ...],
        said: str) -> None:
    run = tmp_path / "hostile.wtape"
    run.write_bytes(small_spooled.read_bytes())
    db = sqlite3.connect(run, isolation_level=None)
    try:
        assert db.execute(statement, params).rowcount == 1
    finally:
        db.close()
    for command in (["show", str(run)], ["export", str(run), "--har", str(tmp_path / "o.har")]):
        done = subprocess.run([sys.executable, "-m", "wiretape", *command], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (command, done.returncode, done.stderr)
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert str(run) in lines[0] and said in lines[0], lines[0]


# --- a disk that fills up while a long response is spooled ------------------------------------




def test_a_disk_that_fills_up_while_spooling_stops_the_recording(tmp_path: Path,
                                                                  whole: bytes) -> None:
    """The run file on a small tmpfs that the spooled parts fill: the agent
    still gets the whole answer (already paid for), the next request is
    refused without being forwarded, and the file holds no trace of the
    exchange; its staged parts are gone once it is opened for writing."""
    why = why_no_private_mounts()
    if why is not None:
        pytest.skip(why)
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    script = """
mount -t tmpfs -o size=700k tmpfs "$DISK" || exit 97
"$@" &
echo "PID $!"
wait $!
echo "SERVE-EXIT $?"
cp -p "$DISK"/run.wtape* "$KEPT"/
"""
    with BigStream(TOTAL) as up:
        proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
             sys.executable, "-m", "wiretape", "serve", "--record", "--port", "0", "-o",
             str(disk / "run.wtape"), "--upstream", f"openai={up.url}/v1"],
            env={**env(MIB), "DISK": str(disk), "KEPT": str(kept)}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            assert proc.stdout is not None
            pid, url = 0, ""
            while not (pid and url):
                line = proc.stdout.readline().decode()
                assert line, proc.stderr.read().decode() if proc.stderr else ""
                if line.startswith("PID "):
                    pid = int(line.split()[1])
                elif line.startswith("openai: "):
                    url = line.split(": ", 1)[1].strip()
            assert fetch(url, TOTAL) == whole
            with httpx.Client(timeout=60, trust_env=False) as client:
                refused = client.post(f"{url}/chat/completions", content=b"{}",
                                      headers={"x-size": str(SMALL)})
            assert refused.status_code == 503
            assert "disk full" in refused.json()["error"]["message"]
            assert up.requests == 1  # not forwarded
            os.kill(pid, signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert b"SERVE-EXIT" in out and b"Traceback" not in err, err.decode()
    run = kept / "run.wtape"
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    with open_run(run) as rf:
        assert rf.exchanges() == [] and rf.redactions() == []
    RunFile.open(run, write=True).close()
    assert parts(run) == 0


def test_a_stop_mid_stream_keeps_what_the_agent_got_of_a_spooled_response(
        tmp_path: Path, whole: bytes) -> None:
    """``serve --record`` stopped (SIGINT) while a long response streams:
    the exchange is committed as cut off, its body what was relayed."""
    run = tmp_path / "stopped.wtape"
    cut = 12 * MIB
    with BigStream(TOTAL, pause_after=cut) as up, Serve(
            tmp_path, "--record", "--port", "0", "-o", str(run), "--upstream",
            f"openai={up.url}/v1") as serve:
        failed: list[BaseException] = []

        def long_fetch() -> None:
            try:
                fetch(serve.url, TOTAL)
            except httpx.HTTPError as exc:  # cut off when wiretape stops
                failed.append(exc)

        client = threading.Thread(target=long_fetch)
        client.start()
        assert up.paused.wait(120), serve.err.read_text()
        deadline = time.monotonic() + 60
        while parts(run) < 4:
            assert time.monotonic() < deadline, "no parts staged"
            time.sleep(0.05)
        serve.stop()
        up.release.set()
        client.join(60)
        assert failed
    with open_run(run) as rf:
        [stopped] = rf.exchanges()
    assert stopped.ending.value == "client_gone"
    assert stopped.error == "wiretape stopped while the response streamed"
    assert stopped.response is not None
    body = b"".join(f.data for f in stopped.response.frames)
    assert MIB < len(body) <= cut  # spooled; what was read before the stop
    assert body == redact_text(whole[:len(body)], "response-body")[0]
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    try:  # every part left is one of the body's
        (listed,) = db.execute("SELECT length(data) FROM blobs WHERE codec = 'parts'"
                               ).fetchone()
        assert parts(run) == (listed - 4) // 8
    finally:
        db.close()


def test_a_long_coded_response_is_held_whole_and_redacted_decoded(tmp_path: Path) -> None:
    """A gzip-coded stream far over the spool threshold: redaction reads a
    coded body decoded and codes it again whole, so it is not spooled, and
    no key reaches the run file in its decoded form either."""
    size = 14 * MIB  # three keys, one in each 6.4 MB of events
    run = tmp_path / "gzip.wtape"
    with BigStream(size) as up, Serve(tmp_path, "--record", "--port", "0", "-o", str(run),
                                      "--upstream", f"openai={up.url}/v1",
                                      spool_at=64 * 1024) as serve:
        with httpx.Client(timeout=120, trust_env=False) as client, client.stream(
                "POST", f"{serve.url}/chat/completions", content=b'{"stream": true}',
                headers={"x-size": str(size), "x-gzip": "1"}) as resp:
            assert resp.headers["content-encoding"] == "gzip"
            got = b"".join(resp.iter_bytes())
        assert serve.stop() == 0
    keys = got.count(b"sk-proj-")
    assert got == b"".join(stream_body(size)) and keys >= 2
    with open_run(run) as rf:
        (exchange,) = rf.exchanges()
    assert exchange.response is not None
    stored = gzip.decompress(exchange.response.body)
    assert len(exchange.response.body) > 4 * 64 * 1024  # coded, still far over the threshold
    assert len(stored) == size and b"sk-proj-" not in stored
    assert stored.count(b"<redacted") == keys
    assert parts(run) == 0


def test_show_says_no_command_ran_for_a_served_recording(small_spooled: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "wiretape", "show", str(small_spooled)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "exit status: none (no command ran)" in done.stdout
    assert "None" not in done.stdout
