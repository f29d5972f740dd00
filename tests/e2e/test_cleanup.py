"""Every way out of a recording or a replay gives back what it took: the
sandbox directory (kept only with ``--keep``), the isolation scratch and
the interception CA in the temporary directory, the listening ports, the
agent's process group, and the run file, folded back into one file that
keeps the session's end. Normal ends, bad input found after something was
acquired, an agent that cannot be started, and cancellation.

On real processes and sockets. Each wiretape process gets a TMPDIR of the
test's own, so what is left there is what wiretape left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

import wiretape
from wiretape.launch.replay import ReplaySettings
from wiretape.launch.replay import replay as launch_replay
from wiretape.store.locate import replay_logs_dir
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn

pytestmark = pytest.mark.timeout(120)

PROBE = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")
#: How long the agents cancelled here would run on their own (s).
AGENT_SLEEP = 60
_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def wiretape_cli(*args: str, cwd: Path, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(OPENAI_API_KEY="sk-cleanup-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1",
               TMPDIR=str(tmpdir))
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


def left_in(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir())


def stands_alone(run: Path) -> bool:
    """``run`` is one file: no SQLite side file beside it, and its header
    back in rollback-journal mode (bytes 18-19, 2 while in WAL mode), which
    only closing it with compaction does."""
    sides = [s for s in ("-wal", "-shm", "-journal") if Path(f"{run}{s}").exists()]
    return not sides and run.read_bytes()[18:20] == b"\x01\x01"


def replay_rows(run: Path) -> list[tuple[str, int | None]]:
    """(id, ended_at_ns) of each replay of ``run``, read without wiretape's
    code from the replay logs (a replay never writes its run file)."""
    rows: list[tuple[str, int | None]] = []
    for log in sorted(replay_logs_dir().glob("*.replays")):
        db = sqlite3.connect(f"file:{log}?mode=ro", uri=True)
        try:
            rows += db.execute("SELECT id, ended_at_ns FROM replays WHERE source = ?"
                               " ORDER BY started_at_ns", (str(run.absolute()),))
        finally:
            db.close()
    return rows


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_port_free(port: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, run): a project snapshotted while the probe agent ran in it.
    The project holds ``notexec``, executable but no program (no ``#!``),
    which the operating system refuses to start."""
    base = tmp_path_factory.mktemp("cleanup")
    project, tmpdir = base / "project", base / "tmp"
    project.mkdir()
    tmpdir.mkdir()
    (project / "notes.txt").write_text("state before the run\n")
    (project / "notexec").write_text("this is not a program\n")
    (project / "notexec").chmod(0o755)
    run = base / "run.wtape"
    with FakeProvider([TextTurn("the answer")]) as fp:
        done = wiretape_cli("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                            sys.executable, PROBE, "hello", "--raw", cwd=project, tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    assert left_in(tmpdir) == []
    return project, run


@pytest.fixture
def ws(recorded: tuple[Path, Path], tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    """(project, a copy of the run, an empty TMPDIR) for one test."""
    project, run = recorded
    copy, tmpdir = tmp_path / "run.wtape", tmp_path / "tmp"
    shutil.copy(run, copy)
    tmpdir.mkdir()
    yield project, copy, tmpdir


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this process makes its temporary directories during the test."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    return tmpdir


@pytest.fixture
def agents() -> Iterator[list[Path]]:
    """Pid files of agents that must not outlive the test, whatever it asserts."""
    pidfiles: list[Path] = []
    yield pidfiles
    for pidfile in pidfiles:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError,
                                 PermissionError):
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)


# --- replay ------------------------------------------------------------------------------------


def test_a_replay_removes_its_sandbox_and_keep_keeps_it(ws: tuple[Path, Path, Path]) -> None:
    project, run, tmpdir = ws
    done = wiretape_cli("replay", str(run), cwd=project, tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    assert left_in(tmpdir) == []
    assert stands_alone(run)

    done = wiretape_cli("replay", str(run), "--keep", cwd=project, tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    with open_run(run) as rf:
        kept = Path(rf.replays()[-1]["outcome"]["sandbox"]["kept"])
    assert f"wiretape: sandbox kept at {kept}" in done.stderr.splitlines()
    assert left_in(tmpdir) == [kept.name]
    assert any(p.name == "notes.txt" for p in kept.rglob("*"))


def in_wal_mode(run: Path) -> bytes:
    """Put ``run`` in WAL mode, as a recording that could not fold it back
    leaves it (nothing beside it); its bytes then."""
    db = sqlite3.connect(run)
    try:
        assert db.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    finally:
        db.close()
    assert run.read_bytes()[18:20] == b"\x02\x02"
    assert sorted(p.name for p in run.parent.iterdir()) == ["run.wtape", "tmp"]
    return run.read_bytes()


def test_a_replay_of_a_wal_mode_run_leaves_nothing_beside_it(ws: tuple[Path, Path, Path]) -> None:
    project, run, tmpdir = ws
    before = in_wal_mode(run)
    done = wiretape_cli("replay", str(run), cwd=project, tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in run.parent.iterdir()) == ["run.wtape", "tmp"]
    assert run.read_bytes() == before


def test_serve_replay_of_a_wal_mode_run_stopped_by_sigint_leaves_nothing_beside_it(
        ws: tuple[Path, Path, Path]) -> None:
    project, run, tmpdir = ws
    before, port = in_wal_mode(run), free_port()
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1", TMPDIR=str(tmpdir))
    proc = subprocess.Popen([sys.executable, "-m", "wiretape", "serve", "--replay", str(run),
                             "--port", f"openai={port}"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith(f"openai: http://127.0.0.1:{port}/"), line
        # Answered: the run is open, and SIGINT is handled (set once listening).
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            assert conn.recv(12).startswith(b"HTTP/1.1 ")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # 3: the request was not in the recording, the recorded exchange unused
    assert proc.returncode == 3, err
    assert b"Traceback" not in err and b"interrupted" not in err, err
    assert sorted(p.name for p in run.parent.iterdir()) == ["run.wtape", "tmp"]
    assert run.read_bytes() == before


def test_a_replay_refused_after_its_sandbox_was_restored_leaves_nothing(
        ws: tuple[Path, Path, Path]) -> None:
    project, run, tmpdir = ws
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = wiretape_cli("replay", str(run), "--port", str(port), cwd=project, tmpdir=tmpdir)
    assert done.returncode == 2, done.stderr
    assert "in use" in done.stderr
    assert left_in(tmpdir) == []  # the sandbox, and the isolation's scratch where there was one
    assert stands_alone(run)
    assert replay_rows(run) == []  # it never began


def test_a_replay_whose_agent_cannot_be_started_still_ends_and_cleans_up(
        ws: tuple[Path, Path, Path]) -> None:
    project, run, tmpdir = ws
    # Mapped paths run the agent without a wrapper, so starting it is what fails.
    done = wiretape_cli("replay", str(run), "--no-same-paths", "--", "./notexec", cwd=project,
                        tmpdir=tmpdir)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [  # one line, no traceback
        "wiretape: error: cannot run command './notexec': Exec format error: the system cannot "
        "start it (a script needs a first line such as #!/bin/sh naming its interpreter)"]
    assert left_in(tmpdir) == []
    assert stands_alone(run)
    [(_, ended)] = replay_rows(run)
    assert ended is not None


def test_an_intercepting_replay_refused_after_its_ca_was_made_gives_everything_back(
        ws: tuple[Path, Path, Path], private_tmp: Path) -> None:
    """In this process, checked while the error is alive (see "record" below)."""
    _, run, _ = ws
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        settings = ReplaySettings(intercept=True, ports=((None, busy.getsockname()[1]),))
        with pytest.raises(wiretape.PortInUse) as caught:
            asyncio.run(launch_replay(run, None, settings))
    assert left_in(private_tmp) == []  # sandbox, isolation scratch, CA
    assert stands_alone(run)
    assert replay_rows(run) == []
    assert caught.value is not None


def test_a_replay_refused_after_it_bound_a_port_gives_it_back(
        ws: tuple[Path, Path, Path], private_tmp: Path) -> None:
    """In this process, checked while the error is alive (see "record" below)."""
    _, run, _ = ws
    first = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        settings = ReplaySettings(ports=(("openai", first), ("anthropic", busy.getsockname()[1])))
        with pytest.raises(wiretape.PortInUse) as caught:
            asyncio.run(launch_replay(run, None, settings))
    assert_port_free(first)
    assert left_in(private_tmp) == []
    assert stands_alone(run)
    assert caught.value is not None


def test_a_cancelled_replay_stops_its_agent_and_removes_its_sandbox(
        ws: tuple[Path, Path, Path], agents: list[Path]) -> None:
    project, run, tmpdir = ws
    pidfile = tmpdir.parent / "agent.pid"
    agents.append(pidfile)
    pid, took = cancelled(wiretape.replay_async(
        run, ["sh", "-c", f"echo $$ > {pidfile}; exec sleep {AGENT_SLEEP}"], cwd=project),
        pidfile)
    assert took < AGENT_SLEEP / 3, f"the cancellation waited {took:.1f}s for the agent"
    assert gone(pid), "the agent outlived its replay"
    [(replay_id, ended)] = replay_rows(run)
    assert ended is not None
    with open_run(run) as rf:
        [row] = [r for r in rf.replays() if r["id"] == replay_id]
    assert not Path(row["settings"]["sandbox"]).exists()
    assert stands_alone(run)


# --- record ------------------------------------------------------------------------------------
#
# In this process, and checked while the error is still alive: the CA also
# removes its directory when it is collected or at exit, and an open socket
# or run file would be closed then too, so only here does a missed release show.


@pytest.mark.parametrize("intercept", [False, True], ids=["base-urls", "intercept"])
def test_a_recording_whose_agent_cannot_be_started_keeps_its_end(
        recorded: tuple[Path, Path], private_tmp: Path, intercept: bool) -> None:
    project, _ = recorded
    run, port = private_tmp.parent / "new.wtape", free_port()
    with pytest.raises(wiretape.CommandNotFound, match=r"Exec format error.*#!") as caught:
        wiretape.record(["./notexec"], cwd=project, out=run, port=port, snapshots=[],
                        intercept=intercept)
    assert left_in(private_tmp) == []  # the interception CA is gone
    assert_port_free(port)
    assert stands_alone(run)
    with open_run(run) as rf:
        info = rf.info()
    assert info.ended_at_ns is not None and info.exit_status is None
    assert caught.value is not None


@pytest.mark.parametrize("intercept", [False, True], ids=["base-urls", "intercept"])
def test_a_recording_that_cannot_create_its_run_file_gives_back_its_port_and_ca(
        private_tmp: Path, intercept: bool) -> None:
    not_a_folder = private_tmp.parent / "a-file"
    not_a_folder.write_text("")
    port = free_port()
    with pytest.raises(wiretape.RunFileError) as caught:
        wiretape.record([sys.executable, "-c", "pass"], out=not_a_folder / "run.wtape",
                        port=port, snapshots=[], intercept=intercept)
    assert_port_free(port)
    assert left_in(private_tmp) == []
    assert "run.wtape" in str(caught.value)


def test_a_cancelled_recording_stops_its_agent_and_keeps_its_end(
        tmp_path: Path, agents: list[Path]) -> None:
    pidfile, run, port = tmp_path / "agent.pid", tmp_path / "run.wtape", free_port()
    agents.append(pidfile)
    pid, took = cancelled(wiretape.record_async(
        ["sh", "-c", f"echo $$ > {pidfile}; exec sleep {AGENT_SLEEP}"], out=run, port=port,
        snapshots=[]), pidfile)
    assert took < AGENT_SLEEP / 3, f"the cancellation waited {took:.1f}s for the agent"
    assert gone(pid), "the agent outlived its recording"
    assert_port_free(port)
    assert stands_alone(run)
    with open_run(run) as rf:
        info = rf.info()
    assert info.ended_at_ns is not None and info.exit_status is None


def cancelled(session: Coroutine[Any, Any, object], pidfile: Path) -> tuple[int, float]:
    """Run the coroutine ``session`` until its agent has written its pid,
    cancel it, and return the pid and the seconds from the cancellation
    until the event loop had ended."""
    cancelled_at = 0.0

    async def main() -> None:
        nonlocal cancelled_at
        task = asyncio.ensure_future(session)
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert not task.done(), task.result()
            assert time.monotonic() < deadline, "the agent never started"
            await asyncio.sleep(0.02)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return int(pidfile.read_text()), time.monotonic() - cancelled_at
