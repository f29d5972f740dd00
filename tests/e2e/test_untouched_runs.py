"""A replay never touches its run (DESIGN.md, "The run file"): a committed
run stays byte for byte what was committed after ``replay``, ``check``,
``verdict``, ``show`` and ``report``, and the working tree stays clean; a
run on a read-only mount replays; ``wiretape verdict`` finds the latest
replay from any directory; ``serve --replay`` stopped before any client
came stores nothing."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support import readonly
from wiretape.store.locate import replay_logs_dir
from wiretape.testing import FakeProvider, TextTurn

PROBE = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")

pytestmark = pytest.mark.timeout(180)

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-untouched-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path, read_only: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``wiretape ARGS`` in ``cwd`` (with the folder ``read_only`` mounted read-only)."""
    argv = [sys.executable, "-m", "wiretape", *args]
    return subprocess.run(readonly.read_only_argv(read_only, argv) if read_only else argv,
                          cwd=cwd, env=env(), capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env={**env(), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    return done.stdout


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def own_replay_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test its own folder of replay logs: the runs of this module
    share their bytes, so they would share their replays."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("rec")
    with FakeProvider([TextTurn("the only answer")]) as fp:
        done = wiretape("record", "-o", "one.wtape", "--no-snapshot", "--upstream",
                        f"openai={fp.url}/v1", "--", sys.executable, PROBE, "hello", "--raw",
                        cwd=base)
    assert done.returncode == 0, done.stderr
    return base / "one.wtape"


@pytest.fixture
def project(recorded: Path, tmp_path: Path) -> Path:
    """A git repository with the run committed under runs/."""
    root = tmp_path / "project"
    (root / "runs").mkdir(parents=True)
    (root / "runs" / "one.wtape").write_bytes(recorded.read_bytes())
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "a run", cwd=root)
    return root


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_committed_run_is_not_touched_by_anything_that_reads_or_replays_it(
        project: Path) -> None:
    run = project / "runs" / "one.wtape"
    before = sha(run)
    replayed = wiretape("replay", "runs/one.wtape", "--", sys.executable, PROBE, "hello", "--raw",
                        cwd=project)
    assert replayed.returncode == 0, replayed.stderr
    checked = wiretape("check", "runs", cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = wiretape("verdict", "runs/one.wtape", "--json", cwd=project)
    assert verdict.returncode == 0, verdict.stderr
    shown = wiretape("show", "runs/one.wtape", cwd=project)
    assert shown.returncode == 0, shown.stderr
    report = wiretape("report", "runs/one.wtape", "-o", str(project.parent / "report.html"),
                      cwd=project)
    assert report.returncode == 0, report.stderr
    assert sha(run) == before
    assert sorted(p.name for p in run.parent.iterdir()) == ["one.wtape"]
    assert git("status", "--porcelain", "--ignored", cwd=project) == ""


def test_a_run_on_a_read_only_mount_replays(project: Path) -> None:
    if not readonly.available():
        pytest.skip("no mount namespaces here to make a read-only mount")
    folder = project / "runs"
    run = folder / "one.wtape"
    run.chmod(0o444)
    folder.chmod(0o555)
    before = sha(run)
    try:
        done = wiretape("replay", str(run), "--json", "--", sys.executable, PROBE, "hello",
                        "--raw", cwd=project.parent, read_only=folder)
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout[done.stdout.index("{\n"):])["pass"] is True
    assert sha(run) == before
    again = wiretape("verdict", str(run), "--json", cwd=project)
    assert json.loads(again.stdout)["pass"] is True


def test_verdict_finds_the_latest_replay_from_any_directory(project: Path,
                                                            tmp_path: Path) -> None:
    first = wiretape("replay", "runs/one.wtape", "--json", "--", sys.executable, PROBE, "hello",
                     "--raw", cwd=project)
    assert first.returncode == 0, first.stderr
    second = wiretape("replay", "runs/one.wtape", "--diagnostic", "--json", "--",
                      sys.executable, PROBE, "goodbye", "--raw", cwd=project)
    assert second.returncode == 3, second.stderr
    latest = json.loads(second.stdout[second.stdout.index("{\n"):])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, ref in ((project, "runs/one.wtape"), (elsewhere, str(project / "runs" / "one.wtape"))):
        shown = wiretape("verdict", ref, "--json", cwd=cwd)
        assert shown.returncode == 3, shown.stderr
        verdict = json.loads(shown.stdout)
        assert (verdict["replay_id"], verdict["diverged"]) == (latest["replay_id"], 1)


def logs_of(run: Path) -> list[Path]:
    import sqlite3

    found = []
    for log in replay_logs_dir().glob("*.replays"):
        db = sqlite3.connect(f"file:{log}?mode=ro", uri=True)
        try:
            if db.execute("SELECT 1 FROM replays WHERE source = ?", (str(run),)).fetchone():
                found.append(log)
        finally:
            db.close()
    return found


def test_serve_replay_stopped_before_any_client_stores_nothing(project: Path) -> None:
    run = project / "runs" / "one.wtape"
    before = sha(run)
    with subprocess.Popen([sys.executable, "-m", "wiretape", "serve", "--replay", str(run),
                           "--port", "0"], cwd=project, env=env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as serve:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("openai: http://127.0.0.1:"), line
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=30)
    assert "Traceback" not in err
    assert sha(run) == before
    assert logs_of(run) == []
    assert not replay_logs_dir().exists()
    verdict = wiretape("verdict", str(run), cwd=project)
    assert verdict.returncode == 2 and "has no replay" in verdict.stderr
