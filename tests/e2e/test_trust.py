"""A shared run is not a script: replaying a run recorded by another user or
on another host shows its command and asks before running it (on a
terminal), or refuses in one line (without one), unless ``--yes`` or an
explicit ``-- CMD``. ``check`` runs such runs only with ``--yes``; the
others, and its JUnit report, are unaffected.

Real processes; the terminal is a real pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from wiretape.launch.trust import here
from wiretape.store.runfile import open_run

pytestmark = pytest.mark.timeout(120)

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(project, run, marker): a run whose recorded command appends a line
    to ``marker``, a file outside the snapshotted project, so a test sees
    whether the command ran."""
    base = tmp_path_factory.mktemp("trust")
    project, marker = base / "project", base / "marker"
    project.mkdir()
    (project / "notes.txt").write_text("notes\n")
    run = base / "run.wtape"
    done = wiretape("record", "-o", str(run), "--", "sh", "-c", f"echo ran >> {marker}",
                    cwd=project)
    assert done.returncode == 0, done.stderr
    marker.unlink()
    return project, run, marker


def recorded_by(source: Path, target: Path, extra: dict[str, str] | None) -> Path:
    """A copy of ``source`` claiming to be recorded as ``extra`` says (None:
    by an older wiretape, which did not note where)."""
    target.write_bytes(source.read_bytes())
    db = sqlite3.connect(target)
    with db:
        if extra is None:
            db.execute("UPDATE meta SET value = '{}' WHERE key = 'extra'")
        else:
            db.execute("UPDATE meta SET value = ? WHERE key = 'extra'", (json.dumps(extra),))
    db.close()
    return target


def ran(marker: Path) -> int:
    """How many times the recorded command ran (and start counting afresh)."""
    if not marker.exists():
        return 0
    count = len(marker.read_text().splitlines())
    marker.unlink()
    return count


def test_a_run_records_who_and_where(project: tuple[Path, Path, Path]) -> None:
    _, run, _ = project
    with open_run(run) as rf:
        info = rf.info()
    assert info.extra["recorded_user"] == here()["recorded_user"]
    assert info.extra["recorded_host"] == here()["recorded_host"]
    shown = wiretape("show", str(run), cwd=run.parent)
    user, host = here()["recorded_user"], here()["recorded_host"]
    assert f"  recorded by: {user} on {host}" in shown.stdout.splitlines()


def test_your_own_run_replays_without_asking(project: tuple[Path, Path, Path]) -> None:
    project_dir, run, marker = project
    done = wiretape("replay", str(run), cwd=project_dir)
    assert done.returncode == 0, done.stderr
    assert ran(marker) == 1


@pytest.mark.parametrize(("extra", "who"), [
    ({"recorded_user": "mallory", "recorded_host": "elsewhere.example"},
     "by mallory on elsewhere.example"),
    ({"recorded_user": "mallory", "recorded_host": here()["recorded_host"]},
     f"by mallory on {here()['recorded_host']}"),
    (None, "by an unknown user on an unknown host (the run does not say)"),
], ids=["another host", "another user", "not said"])
def test_without_a_terminal_a_strangers_command_is_refused_in_one_line(
        project: tuple[Path, Path, Path], tmp_path: Path, extra: dict[str, str] | None,
        who: str) -> None:
    project_dir, run, marker = project
    theirs = recorded_by(run, tmp_path / "theirs.wtape", extra)
    with open_run(theirs) as rf:
        info, replays = rf.info(), len(rf.replays())
    done = wiretape("replay", str(theirs), cwd=project_dir)
    assert done.returncode == 2
    command = shlex.join(info.argv)
    assert done.stderr.splitlines() == [
        f"wiretape: error: run {info.run_id} was recorded {who}, not here: its command "
        f"({command}, in {info.cwd}) is not run without asking; pass --yes to run it, or give "
        "the command to run after --"]
    assert ran(marker) == 0
    with open_run(theirs) as rf:
        assert len(rf.replays()) == replays  # nothing began

    done = wiretape("replay", "--yes", str(theirs), cwd=project_dir)
    assert done.returncode == 0, done.stderr
    assert ran(marker) == 1
    # A command given after -- is the user's own: no question.
    done = wiretape("replay", str(theirs), "--", "sh", "-c", f"echo ran >> {marker}",
                    cwd=project_dir)
    assert done.returncode == 0, done.stderr
    assert ran(marker) == 1


def on_terminal(args: list[str], cwd: Path, answer: bytes) -> tuple[int, str]:
    """Run wiretape with a pseudo-terminal as its stdin, stdout and stderr;
    answer its question with ``answer``. Returns (exit status, all it wrote)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                               stdin=follower, stdout=follower, stderr=follower,
                               start_new_session=True)
    os.close(follower)
    said, answered = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            said += chunk
        if not answered and b"[y/N]" in said:
            os.write(leader, answer)
            answered = True
        if process.poll() is not None and not ready:
            break
    os.close(leader)
    status = process.wait(timeout=30)
    return status, said.decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.parametrize(("answer", "runs"), [(b"n\n", 0), (b"\n", 0), (b"y\n", 1)],
                         ids=["no", "default", "yes"])
def test_on_a_terminal_a_strangers_command_is_shown_and_asked_about(
        project: tuple[Path, Path, Path], tmp_path: Path, answer: bytes, runs: int) -> None:
    project_dir, run, marker = project
    theirs = recorded_by(run, tmp_path / "theirs.wtape",
                         {"recorded_user": "mallory", "recorded_host": "elsewhere.example"})
    status, said = on_terminal(["replay", str(theirs)], project_dir, answer)
    assert "was recorded by mallory on elsewhere.example, not by you here" in said, said
    assert f"    sh -c 'echo ran >> {marker}'" in said.splitlines(), said
    assert "Run this command? [y/N]" in said, said
    assert ran(marker) == runs, said
    if runs:
        assert status == 0, said
        assert "verdict PASS" in said
    else:
        assert status == 2, said
        assert "wiretape: not replayed (give the command to run after --, or pass --yes)" in said


@pytest.mark.slow  # a long scenario: make test-slow
def test_check_runs_a_strangers_command_only_with_yes(
        project: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project_dir, run, marker = project
    suite = tmp_path / "suite"
    suite.mkdir()
    mine = suite / "mine.wtape"
    mine.write_bytes(run.read_bytes())
    theirs = recorded_by(run, suite / "theirs.wtape",
                         {"recorded_user": "mallory", "recorded_host": "elsewhere.example"})
    junit = tmp_path / "junit.xml"
    done = wiretape("check", str(suite), "--junit-xml", str(junit), cwd=project_dir)
    assert done.returncode == 1, done.stderr
    assert ran(marker) == 1  # only mine
    assert (f"wiretape check: [1/2] ERROR {theirs}" in done.stderr
            or f"wiretape check: [2/2] ERROR {theirs}" in done.stderr), done.stderr
    assert "recorded by mallory on elsewhere.example, not here: its command is not run " \
           "without --yes" in done.stderr
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases[str(mine)].find("failure") is None and cases[str(mine)].find("error") is None
    error = cases[str(theirs)].find("error")
    assert error is not None and "--yes" in (error.get("message") or "")

    done = wiretape("check", "--yes", str(suite), cwd=project_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ran(marker) == 2
