"""A run file is untrusted input: a run crafted to restore outside the replay
sandbox, or to leave a link the agent could write through, is refused with
one line before anything is written, and the files it aimed at are untouched.

The runs are recorded for real, then altered with sqlite3 the way an attacker
would hand-edit one."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wiretape.testing import FakeProvider, TextTurn

AGENT = Path(__file__).parent / "clients_sandbox" / "context_agent.py"

pytestmark = pytest.mark.timeout(120)


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(project, run, victim): a run recorded with a snapshot of ``project``,
    and a directory beside it that a hostile edit of the run aims at."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("state before the run\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("the user's own file\n")
    run = tmp_path / "run.wtape"
    with FakeProvider([TextTurn("the answer")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1",
                        "--snapshot", str(project), "--", sys.executable, str(AGENT), cwd=project)
    assert done.returncode == 0, done.stderr
    return project, run, victim


def refused(run: Path, cwd: Path, match: str) -> None:
    done = wiretape("replay", str(run), "--", sys.executable, "-c", "pass", cwd=cwd)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0] and str(run) in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("root", ["{project}/../victim", "{project}/./../victim",
                                  "victim", "{project}//../victim"])
def test_a_snapshot_root_that_climbs_out_is_refused_and_nothing_is_written(
        recorded: tuple[Path, Path, Path], root: str) -> None:
    project, run, victim = recorded
    before = checksums(victim)
    with sqlite3.connect(run) as db:
        assert db.execute("UPDATE snapshots SET root = ?",
                          (root.format(project=project),)).rowcount == 1
    refused(run, project, "unsafe snapshot root")
    assert checksums(victim) == before


@pytest.mark.parametrize("link", ["{victim}/notes.txt", "../victim/notes.txt", "a/../../x"])
def test_a_link_leading_out_of_the_tree_is_refused(recorded: tuple[Path, Path, Path],
                                                    link: str) -> None:
    project, run, victim = recorded
    before = checksums(victim)
    with sqlite3.connect(run) as db:
        (sid,) = db.execute("SELECT id FROM snapshots").fetchone()
        db.execute("INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link) "
                   "VALUES (?, 'escape', 'symlink', 511, NULL, ?)",
                   (sid, link.format(victim=victim)))
    refused(run, project, "link that leads outside its tree")
    assert checksums(victim) == before
