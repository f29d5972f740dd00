"""What a user's machine holds is never a traceback: file names and
arguments that are not UTF-8 round-trip through a run (recorded, shown,
listed, exported, reported, replayed), a damaged run file is one line in
``ls`` and ``check`` while the others are still reported (and the JUnit
file still written), and an agent the system refuses to start is one line.

Real processes, on a terminal encoding that is strict about UTF-8
(``LC_ALL=C.UTF-8``, where Python's stdout does not escape what it cannot
encode).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from wiretape.store.runfile import open_run

pytestmark = pytest.mark.timeout(120)

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME", "PYTHONUTF8",
          "PYTHONIOENCODING", "LANG", "LC_ALL", "LC_CTYPE")
LATIN1 = b"caf\xe9"  # "café" in Latin-1: not UTF-8


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1", LC_ALL="C.UTF-8", **extra)
    return out


def wiretape(*args: str | bytes, cwd: Path, **extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(**extra),
                          capture_output=True, timeout=90, stdin=subprocess.DEVNULL)


def no_traceback(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in done.stderr, err
    return err


# --- names and arguments that are not UTF-8 --------------------------------------------------


@pytest.fixture(scope="module")
def latin1_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, run): a project holding a file named in Latin-1, recorded
    with a command whose argument is Latin-1 too; the agent appends to the
    file and prints its argument."""
    base = tmp_path_factory.mktemp("latin1")
    project, store = base / "project", base / "store"
    project.mkdir()
    (store / "runs").mkdir(parents=True)
    with open(os.fsencode(project) + b"/" + LATIN1 + b".txt", "wb") as fh:
        fh.write(b"before\n")
    run = store / "runs" / "run_0000000000e9.wtape"
    done = wiretape("record", "-o", str(run), "--", "sh", "-c",
                    b'echo after >> ' + LATIN1 + b'.txt; printf "%s\\n" "$0"', LATIN1,
                    cwd=project)
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert done.stdout == LATIN1 + b"\n"
    done = wiretape("replay", str(run), cwd=project)
    assert done.returncode == 0, done.stderr
    return project, run


def test_a_latin1_file_name_is_snapshotted_and_restored_byte_for_byte(
        latin1_run: tuple[Path, Path]) -> None:
    project, run = latin1_run
    with open_run(run) as rf:
        info = rf.info()
        [(_, root, entries)] = rf.snapshots()
        changes = rf.outcome_changes()
    assert os.fsencode(info.argv[-1]) == LATIN1  # argv kept as bytes (PEP 383)
    assert os.fsencode(root) == os.fsencode(project)
    assert [os.fsencode(e.path) for e in entries] == [LATIN1 + b".txt"]
    assert [os.fsencode(c["path"]) for changed in changes.values() for c in changed] == [
        LATIN1 + b".txt"]
    for paths in ("--same-paths", "--no-same-paths"):
        done = wiretape("replay", paths, str(run), cwd=project)
        err = no_traceback(done)
        assert done.returncode == 0, err
        assert done.stdout == LATIN1 + b"\n"
        assert "verdict PASS" in err and "files same" in err, err


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_latin1_argument_is_shown_listed_exported_and_reported(
        latin1_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = latin1_run
    store = run.parent.parent
    shown = wiretape("show", str(run), cwd=tmp_path)
    no_traceback(shown)
    assert shown.returncode == 0
    assert b"  command: sh -c 'echo after >> caf\\xe9.txt; printf \"%s\\n\" \"$0\"' 'caf\\xe9'" \
        in shown.stdout.splitlines(), shown.stdout
    listed = wiretape("ls", cwd=tmp_path, WIRETAPE_HOME=str(store))
    no_traceback(listed)
    assert listed.returncode == 0
    assert b"sh -c 'echo after >> caf\\xe9.txt;" in listed.stdout, listed.stdout
    as_json = wiretape("ls", "--json", cwd=tmp_path, WIRETAPE_HOME=str(store))
    assert os.fsencode(json.loads(as_json.stdout)[0]["argv"][-1]) == LATIN1

    har = tmp_path / "run.har"
    done = wiretape("export", str(run), "--har", str(har), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0
    assert os.fsencode(json.loads(har.read_bytes())["log"]["_wiretape"]["argv"][-1]) == LATIN1
    back = tmp_path / "back.wtape"
    done = wiretape("import", "--har", str(har), "-o", str(back), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0
    with open_run(back) as rf:
        assert os.fsencode(rf.info().argv[-1]) == LATIN1
    done = wiretape("export", str(run), "--har", "-", cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0 and json.loads(done.stdout)["log"]["_wiretape"]["argv"]

    page = tmp_path / "run.html"
    done = wiretape("report", str(run), "-o", str(page), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0
    assert "caf\\xe9" in page.read_text(encoding="utf-8")

    done = wiretape("verdict", str(run), cwd=tmp_path)
    no_traceback(done)
    assert done.returncode == 0 and b"verdict PASS" in done.stdout


# --- damaged run files in ls and check -------------------------------------------------------


def _damage(run: Path, target: Path, statement: str) -> Path:
    target.write_bytes(run.read_bytes())
    db = sqlite3.connect(target)
    with db:
        db.executescript(statement)
    db.close()
    return target


DAMAGE = {
    "argv is a number": "UPDATE meta SET value = '5' WHERE key = 'argv'",
    "start is text": "UPDATE meta SET value = '\"yesterday\"' WHERE key = 'started_at_ns'",
    "no exchanges table": "DROP TABLE exchanges",
    "a view in place of a table": "DROP TABLE redactions; CREATE VIEW redactions AS SELECT 1",
}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, run): a run with one exchange and one replay."""
    from wiretape.testing import FakeProvider, TextTurn

    base = tmp_path_factory.mktemp("damaged")
    project = base / "project"
    project.mkdir()
    run = base / "good.wtape"
    probe = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")
    with FakeProvider([TextTurn("fine")]) as fp:
        done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                        f"openai={fp.url}/v1", "--", sys.executable, probe, "hi", "--raw",
                        cwd=project, OPENAI_API_KEY="sk-test")
    assert done.returncode == 0, done.stderr
    done = wiretape("replay", str(run), cwd=project, OPENAI_API_KEY="sk-test")
    assert done.returncode == 0, done.stderr
    return project, run


def test_ls_lists_the_good_runs_and_names_each_damaged_one_in_a_line(
        good_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = good_run
    runs = tmp_path / "store" / "runs"
    runs.mkdir(parents=True)
    (runs / "run_000000000001.wtape").write_bytes(run.read_bytes())
    # With WIRETAPE_HOME set, replay logs live in its replays folder too.
    shutil.copytree(Path(os.environ["XDG_STATE_HOME"]) / "wiretape" / "replays",
                    tmp_path / "store" / "replays")
    damaged = [_damage(run, runs / f"run_00000000dea{i}.wtape", statement)
               for i, statement in enumerate(DAMAGE.values())]
    done = wiretape("ls", cwd=tmp_path, WIRETAPE_HOME=str(tmp_path / "store"))
    err = no_traceback(done)
    assert done.returncode == 0
    skipped = [line for line in err.splitlines() if line.startswith("wiretape: skipped: ")]
    assert len(skipped) == len(DAMAGE), err
    for path in damaged:
        assert sum(str(path) in line for line in skipped) == 1, (path, err)
        # named once in its line
        assert [line.count(str(path)) for line in skipped if str(path) in line] == [1], err
    listed = done.stdout.decode().splitlines()
    assert listed[0].split() == ["run", "when", "command", "exchanges", "exit", "last",
                                 "verdict"]
    [row] = listed[1:]
    # The good run: its exit status and its latest verdict with the verdict's exit code.
    assert row.split()[-5:] == ["1", "0", "pass", "(exit", "0)"], row
    # Only damaged runs left: none is readable, which is not "no runs".
    (runs / "run_000000000001.wtape").unlink()
    done = wiretape("ls", cwd=tmp_path, WIRETAPE_HOME=str(tmp_path / "store"))
    no_traceback(done)
    assert done.stdout.decode().strip() == (
        f"no readable runs under {runs} ({len(DAMAGE)} skipped: see above)"), done.stdout


def test_check_reports_a_damaged_run_on_its_own_line_and_still_writes_junit(
        good_run: tuple[Path, Path], tmp_path: Path) -> None:
    project, run = good_run
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a-good.wtape").write_bytes(run.read_bytes())
    bad = _damage(run, suite / "b-bad.wtape", DAMAGE["argv is a number"])
    junit = tmp_path / "out" / "junit.xml"
    done = wiretape("check", str(suite), "--junit-xml", str(junit), cwd=project,
                    OPENAI_API_KEY="sk-test")
    err = no_traceback(done)
    assert done.returncode == 1, err
    assert f"ERROR {bad}" in err and f"PASS {suite / 'a-good.wtape'}" in err, err
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {str(suite / "a-good.wtape"), str(bad)}
    error = cases[str(bad)].find("error")
    assert error is not None and str(bad) in (error.get("message") or "")
    assert [p.name for p in junit.parent.iterdir()] == ["junit.xml"]  # no temporary left


# --- agents the system will not start ----------------------------------------------------------


def test_an_agent_without_a_shebang_is_one_line(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    agent.write_text("print('no #! line')\n")
    agent.chmod(0o755)
    done = wiretape("record", "-o", str(tmp_path / "run.wtape"), "--no-snapshot", "--",
                    "./agent", cwd=tmp_path)
    err = no_traceback(done)
    assert done.returncode == 2
    assert err.splitlines() == [
        "wiretape: error: cannot run command './agent': Exec format error: the system cannot "
        "start it (a script needs a first line such as #!/bin/sh naming its interpreter)"]


# --- files written whole or not at all ---------------------------------------------------------


def test_a_file_that_cannot_be_written_is_one_line_and_leaves_nothing(
        good_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = good_run
    (tmp_path / "a-file").write_text("")
    for args in (["export", str(run), "--har", "a-file/out.har"],
                 ["report", str(run), "-o", "a-file/out.html"]):
        done = wiretape(*args, cwd=tmp_path)
        err = no_traceback(done)
        assert done.returncode == 2, err
        assert err.splitlines()[-1].startswith("wiretape: error: cannot write a-file/out."), err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_file_for_a_folder_that_does_not_exist_is_one_line_and_makes_nothing(
        good_run: tuple[Path, Path], tmp_path: Path) -> None:
    """A typo in the folder of ``export --har`` or ``report -o`` makes no
    tree of folders: one line naming the folder and what to do, exit 2."""
    _, run = good_run
    for args, target in ((["export", str(run), "--har", "typo/dir/x.har"], "typo/dir/x.har"),
                         (["report", str(run), "-o", "typo/x.html"], "typo/x.html")):
        done = wiretape(*args, cwd=tmp_path)
        err = no_traceback(done)
        assert done.returncode == 2, err
        folder = target.rsplit("/", 1)[0]
        assert err.splitlines() == [
            f"wiretape: error: cannot write {target}: the folder {folder} does not exist; "
            f"create it first (mkdir -p {folder}) or name a file in a folder that exists"], err
        assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", [["replay"], ["show"], ["verdict"], ["report"],
                                     ["export", "--har", "x.har"], ["scrub"]])
def test_a_folder_or_a_fifo_given_as_a_run_says_what_it_is(tmp_path: Path,
                                                             command: list[str]) -> None:
    (tmp_path / "runs").mkdir()
    os.mkfifo(tmp_path / "pipe")
    for ref, said in (("runs", "runs is a folder, not a run file: give a .wtape file or a run "
                               "id"),
                      ("pipe", "pipe is not a regular file: give a .wtape file or a run id")):
        done = wiretape(command[0], ref, *command[1:], cwd=tmp_path)
        err = no_traceback(done)
        assert done.returncode == 2, err
        assert err.strip().splitlines() == [
            f"wiretape: error: {said} (list runs with `wiretape ls`)"], err
    done = wiretape("scan", "runs", cwd=tmp_path)
    assert done.returncode == 2
    assert no_traceback(done).strip() == ("wiretape: error: no run files (*.wtape) in runs: "
                                          "give run files, run ids or folders that hold run "
                                          "files")


@pytest.mark.parametrize(("version", "said"), [(0, "missing (0)"), (-1, "invalid (-1)")])
def test_a_run_without_its_schema_version_says_so(good_run: tuple[Path, Path], tmp_path: Path,
                                                   version: int, said: str) -> None:
    _, run = good_run
    copy = tmp_path / "copy.wtape"
    copy.write_bytes(run.read_bytes())
    db = sqlite3.connect(copy)
    db.execute(f"PRAGMA user_version = {version}")
    db.close()
    done = wiretape("show", str(copy), cwd=tmp_path)
    assert done.returncode == 2
    assert no_traceback(done).strip() == (
        f"wiretape: error: cannot read run file {copy}: it holds a run's tables but its schema "
        f"version is {said}: it was edited or damaged, and is not read (record the run again, "
        "or ask its author for the original)")
