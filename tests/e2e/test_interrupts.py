"""Ctrl-C and SIGTERM during a replay: the signal goes to the agent's group,
the verdict is stored and shown as interrupted (never an ordinary FAIL), and
wiretape exits 128 + the signal (130, 143). Whatever the phase the signal
arrives in, the sandbox is removed. A sandbox that a killed replay could not
remove is swept away by the next replay (its pid file names a dead
process); a kept one, or another live process's, is left alone.

Real processes, real signals; each wiretape gets a TMPDIR of the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")
#: The agent: at once when recorded; with $SLOW set it writes its pid there
#: and sleeps, so that a test can interrupt the replay while it runs.
AGENT = 'if [ -n "$SLOW" ]; then echo $$ > "$SLOW"; sleep 60; fi; echo done'


def env(tmpdir: Path, **extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1", TMPDIR=str(tmpdir), **extra)
    return out


def wiretape(*args: str, cwd: Path, tmpdir: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                          env=env(tmpdir, **extra), capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)


def start(*args: str, cwd: Path, tmpdir: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                            env=env(tmpdir, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def wait_for(condition, what: str, within: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def sleeping(pid_file: Path) -> bool:
    """True once the agent whose pid ``pid_file`` holds runs its ``sleep``
    (exec'd: its name is ``sleep``, no longer the shell's). A SIGINT sent
    between the shell's fork and that exec would be caught by the forked
    shell (dash catches SIGINT under -c) and so never reach the sleep."""
    try:
        shell = pid_file.read_text().strip()
    except OSError:
        return False
    if not shell:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if name == "sleep" and rest.split()[1] == shell:
            return True
    return False


def sandboxes(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("wiretape-sandbox-"))


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(project, run, tmpdir): a run of AGENT with a snapshot of the project."""
    project, tmpdir = tmp_path / "project", tmp_path / "tmp"
    project.mkdir()
    tmpdir.mkdir()
    (project / "notes.txt").write_text("notes\n")
    run = tmp_path / "run.wtape"
    done = wiretape("record", "-o", str(run), "--", "sh", "-c", AGENT, cwd=project,
                    tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    return project, run, tmpdir


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_agent_runs_is_an_interrupted_verdict(
        project: tuple[Path, Path, Path], tmp_path: Path, sig: signal.Signals,
        code: int) -> None:
    project_dir, run, tmpdir = project
    agent_pid = tmp_path / "agent.pid"
    replay = start("replay", str(run), cwd=project_dir, tmpdir=tmpdir, SLOW=str(agent_pid))
    try:
        wait_for(lambda: sleeping(agent_pid), "the agent")
        os.kill(replay.pid, sig)
        _, err = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGKILL)
    assert replay.returncode == code, err
    assert "Traceback" not in err
    name = sig.name
    line = next(ln for ln in err.splitlines() if ln.startswith("wiretape: verdict "))
    assert line.startswith(f"wiretape: verdict INTERRUPTED by {name} (strict): "), line
    assert f"exit_status differs (0 -> {code})" in line, line
    assert sandboxes(tmpdir) == []
    # Stored so: the verdict, and ls.
    shown = wiretape("verdict", str(run), "--json", cwd=project_dir, tmpdir=tmpdir)
    assert shown.returncode == code
    verdict = json.loads(shown.stdout)
    assert verdict["interrupted"] == name and verdict["pass"] is False
    assert verdict["exit_code"] == code and verdict["complete"] is True
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    (store / "runs" / run.name).write_bytes(run.read_bytes())
    # With WIRETAPE_HOME set, replay logs live in its replays folder too.
    shutil.copytree(Path(os.environ["XDG_STATE_HOME"]) / "wiretape" / "replays", store / "replays")
    listed = wiretape("ls", cwd=project_dir, tmpdir=tmpdir, WIRETAPE_HOME=str(store))
    assert listed.stdout.splitlines()[1].endswith(f"interrupted (exit {code})"), listed.stdout


def test_a_signal_in_any_phase_of_a_replay_leaves_no_sandbox(tmp_path: Path) -> None:
    """A snapshot large enough that restoring it takes a while: SIGTERM
    sent as soon as the sandbox appears, whichever phase the replay is in
    then (restoring, binding, or the agent already running), ends it with
    143 and the sandbox gone."""
    project, tmpdir = tmp_path / "project", tmp_path / "tmp"
    project.mkdir()
    tmpdir.mkdir()
    for i in range(40):
        (project / f"data-{i}.bin").write_bytes(os.urandom(1 << 20))
    run = tmp_path / "run.wtape"
    done = wiretape("record", "-o", str(run), "--", "sh", "-c", AGENT, cwd=project,
                    tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    agent_pid = tmp_path / "agent.pid"
    replay = start("replay", str(run), cwd=project, tmpdir=tmpdir, SLOW=str(agent_pid))
    try:
        wait_for(lambda: sandboxes(tmpdir), "the sandbox", within=60)
        os.kill(replay.pid, signal.SIGTERM)
        _, err = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGKILL)
    assert replay.returncode == 143, err
    assert "Traceback" not in err
    assert ("wiretape: error: interrupted by SIGTERM before the replay began" in err
            or "wiretape: verdict INTERRUPTED by SIGTERM" in err), err
    assert sandboxes(tmpdir) == []


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_killed_replays_sandbox_is_swept_by_the_next_one(
        project: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project_dir, run, tmpdir = project
    # Others that are not a killed replay's: one kept with --keep, one of a
    # live process (this one), one without a pid file (not wiretape's doing).
    kept = wiretape("replay", "--keep", str(run), cwd=project_dir, tmpdir=tmpdir)
    assert kept.returncode == 0, kept.stderr
    [kept_dir] = sandboxes(tmpdir)
    live = tmpdir / "wiretape-sandbox-live"
    live.mkdir()
    (live / "wiretape.pid").write_text(str(os.getpid()))
    (tmpdir / "wiretape-sandbox-unmarked").mkdir()
    others = sandboxes(tmpdir)

    agent_pid = tmp_path / "agent.pid"
    killed = start("replay", str(run), cwd=project_dir, tmpdir=tmpdir, SLOW=str(agent_pid))
    try:
        wait_for(lambda: agent_pid.exists() and agent_pid.read_text().strip(), "the agent")
        [left] = [name for name in sandboxes(tmpdir) if name not in others]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    finally:
        if agent_pid.exists() and agent_pid.read_text().strip():
            os.kill(int(agent_pid.read_text()), signal.SIGKILL)
    agent_pid.unlink()
    assert sandboxes(tmpdir) == sorted([*others, left])  # SIGKILL: nothing was given back
    # A sandbox the killed agent made read-only inside is swept all the same.
    locked = tmpdir / left / "locked"
    locked.mkdir()
    (locked / "file").write_text("x")
    locked.chmod(0o500)

    done = wiretape("replay", str(run), cwd=project_dir, tmpdir=tmpdir)
    assert done.returncode == 0, done.stderr
    assert sandboxes(tmpdir) == others
    assert kept_dir in others


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def test_sigterm_to_check_stops_its_replays_and_removes_its_copies(
        project: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """``wiretape check`` told to stop (SIGTERM, as a CI runner does) stops
    each replay it runs, which stops its agent, removes its temporary
    copies, and exits 143; no replay goes on to store a PASS."""
    _, run, tmpdir = project
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copyfile(run, suite / "run.wtape")
    agent_pid = tmp_path / "agent.pid"
    check = start("check", str(suite), cwd=tmp_path, tmpdir=tmpdir, SLOW=str(agent_pid))
    try:
        wait_for(lambda: agent_pid.exists() and agent_pid.read_text().strip(), "the agent")
        agent = int(agent_pid.read_text())
        os.kill(check.pid, signal.SIGTERM)
        _, err = check.communicate(timeout=60)
    finally:
        if check.poll() is None:
            os.killpg(check.pid, signal.SIGKILL)
    assert check.returncode == 143, err
    assert "Traceback" not in err
    assert "wiretape: error: interrupted by SIGTERM while checking" in err, err
    wait_for(lambda: not _running(agent), "the agent to end", within=15)
    assert [p.name for p in tmpdir.iterdir()
            if p.name.startswith(("wiretape-check-", "wiretape-sandbox-"))] == []
    shown = wiretape("verdict", str(suite / "run.wtape"), "--json", cwd=tmp_path, tmpdir=tmpdir)
    assert shown.returncode == 143, shown.stdout + shown.stderr
    assert json.loads(shown.stdout)["interrupted"] == "SIGTERM"
