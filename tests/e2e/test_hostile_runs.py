"""A run file is untrusted input: a run crafted to restore outside the replay
sandbox, or to leave a link the agent could write through, is refused with
one line before anything is written, and the files it aimed at are untouched.
A run whose schema holds code (a trigger, a view), whose bodies would
decompress without bound, or whose values are of the wrong type is refused
the same way, before anything runs and in bounded time and memory.

The runs are recorded for real, then altered with sqlite3 the way an attacker
would hand-edit one."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import zstandard

from support import readonly
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


# --- the run file itself: what it may hold, what reading it may cost -----------------------
#
# Each case: exit code 2, exactly one line on stderr naming the file, no
# traceback; a replay runs nothing, writes nothing outside its sandbox (no
# replay log either) and leaves the run byte for byte as it was.


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(project, run): one recording, copied for each test."""
    base = tmp_path_factory.mktemp("template")
    project = base / "project"
    project.mkdir()
    (project / "notes.txt").write_text("state before the run\n")
    run = base / "run.wtape"
    with FakeProvider([TextTurn("the answer")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1",
                        "--snapshot", str(project), "--", sys.executable, str(AGENT), cwd=project)
    assert done.returncode == 0, done.stderr
    return project, run


@pytest.fixture
def hostile(template: tuple[Path, Path], tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(project, run): a copy of the template's run to alter, and a folder
    of replay logs of this test's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    project, run = template
    copy = tmp_path / "hostile.wtape"
    copy.write_bytes(run.read_bytes())
    return project, copy


def alter(run: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    db = sqlite3.connect(run, isolation_level=None)
    try:
        for i, statement in enumerate(statements):
            db.execute(statement, params if i == len(statements) - 1 else ())
    finally:
        db.close()


def one_line(done: subprocess.CompletedProcess[str], run: Path, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(run) in lines[0], lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def replay_refused(project: Path, run: Path, tmp_path: Path, *words: str) -> None:
    """``wiretape replay`` of ``run`` refuses with one line, before the agent
    runs, writing nothing: not the run, not the project, no replay log."""
    before = (checksums(project), hashlib.sha256(run.read_bytes()).hexdigest())
    marker = tmp_path / "the-agent-ran"
    done = wiretape("replay", str(run), "--", sys.executable, "-c",
                    f"open({str(marker)!r}, 'w').close()", cwd=tmp_path)
    one_line(done, run, *words)
    assert not marker.exists()
    assert (checksums(project), hashlib.sha256(run.read_bytes()).hexdigest()) == before
    assert not (tmp_path / "state").exists()


def shown_refused(run: Path, tmp_path: Path, *words: str, verdict: bool = True) -> None:
    """``show``, ``report`` (and ``verdict``, which reads only what opening
    checks when there is no replay) refuse with one line."""
    commands = [["show", str(run)], ["report", str(run), "-o", str(tmp_path / "r.html")]]
    for command in commands + ([["verdict", str(run)]] if verdict else []):
        one_line(wiretape(*command, cwd=tmp_path), run, *words)
    assert not (tmp_path / "r.html").exists()


def test_a_trigger_is_refused_and_cannot_make_a_replay_pass(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    project, run = hostile
    alter(run, "CREATE TRIGGER pass_everything AFTER INSERT ON replay_requests BEGIN "
               "UPDATE replay_requests SET kind = 'exact', served = 1; END")
    replay_refused(project, run, tmp_path, "trigger 'pass_everything'")
    shown_refused(run, tmp_path, "trigger 'pass_everything'")


def test_a_recursive_view_in_place_of_a_table_is_refused_at_once(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    project, run = hostile
    alter(run, "DROP TABLE exchanges",
          "CREATE VIEW exchanges AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
          "SELECT n + 1 FROM r) SELECT n AS seq FROM r")
    started = time.monotonic()
    shown_refused(run, tmp_path, "view 'exchanges'")
    replay_refused(project, run, tmp_path, "view 'exchanges'")
    # four processes, each refusing before it reads a row: no spin
    assert time.monotonic() - started < 30


def bomb(size: int, *, declared: bool) -> bytes:
    """``size`` zero bytes compressed, made a piece at a time (the test
    itself never holds them); ``declared``: the frame states its size."""
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=declared)
    stream = compressor.compressobj(size=size if declared else -1)
    piece = bytes(1 << 20)
    out = [stream.compress(piece) for _ in range(size >> 20)]
    return b"".join(out) + stream.flush()


PEAK_RSS = textwrap.dedent('''
    import resource, subprocess, sys
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + "\\n")
    sys.stdout.write(str(done.returncode) + "\\n" + done.stderr)
''')


def show_with_peak_rss(run: Path, tmp_path: Path) -> tuple[int, subprocess.CompletedProcess[str]]:
    """``wiretape show RUN`` run by a process of its own, so its peak RSS
    (kB) is that of the show alone."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, sys.executable, "-m", "wiretape",
                           "show", str(run)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    peak, code, stderr = done.stdout.split("\n", 2)
    return int(peak), subprocess.CompletedProcess(done.args, int(code), "", stderr)


@pytest.mark.parametrize(("declared_size", "frame_says", "said"), [
    (512 * 1024 * 1024, True, "more than the 268435456 bytes wiretape reads back"),
    (4 * 1024 ** 3, False, "more than the 268435456 bytes wiretape reads back"),
    (200, False, "decompresses to more"),
    (200, True, "its compressed frame says 536870912"),
])
def test_a_zstd_bomb_is_refused_in_bounded_memory(
        hostile: tuple[Path, Path], tmp_path: Path, declared_size: int, frame_says: bool,
        said: str) -> None:
    project, run = hostile
    payload = bomb(512 * 1024 * 1024, declared=frame_says)
    assert len(payload) < 200_000  # small on disk
    with sqlite3.connect(run) as db:
        (digest,) = db.execute("SELECT response_body FROM exchanges ORDER BY seq").fetchone()
    alter(run, "UPDATE blobs SET codec = 'zstd', size = ?, data = ? WHERE hash = ?",
          params=(declared_size, payload, digest))
    peak_kb, done = show_with_peak_rss(run, tmp_path)
    one_line(done, run, said)
    assert peak_kb < 200 * 1024, f"show peaked at {peak_kb // 1024} MB"
    replay_refused(project, run, tmp_path, said)


@pytest.mark.parametrize("lie", ["past its reference", "a loop", "a missing reference",
                                 "a newer codec"])
def test_a_body_spliced_from_a_lie_is_refused_with_one_line(
        hostile: tuple[Path, Path], tmp_path: Path, lie: str) -> None:
    """The response body made a ``splice`` of the request body (blobs'
    module docstring) that cannot hold: one line naming what is wrong."""
    project, run = hostile
    with sqlite3.connect(run) as db:
        req, resp = db.execute(
            "SELECT request_body, response_body FROM exchanges ORDER BY seq").fetchone()
        (req_size,) = db.execute("SELECT size FROM blobs WHERE hash = ?", (req,)).fetchone()
    header = struct.Struct(">4sBQQ")
    size, ref, codec = req_size + 10, req, "splice"
    payload = header.pack(b"WTS1", 0, req_size + 1, 0) + b"x" * 9
    said = f"keeps {req_size + 1} + 0 bytes of the body {req[:12]} it is spliced from"
    if lie == "a loop":
        ref, said = resp, "compressed against itself"
    elif lie == "a missing reference":
        ref, said = "f" * 64, "stored against the body ffffffffffff, which the file does not hold"
    elif lie == "a newer codec":
        codec, said = "splice2", "codec 'splice2', which this wiretape does not read"
    alter(run, "UPDATE blobs SET codec = ?, ref = ?, depth = 1, size = ?, data = ? WHERE hash = ?",
          params=(codec, ref, size, payload, resp))
    replay_refused(project, run, tmp_path, said)
    line = one_line(wiretape("show", str(run), cwd=tmp_path), run, said)
    assert ("damaged or was edited" in line) == (lie != "a newer codec")


@pytest.mark.parametrize(("statements", "said"), [
    (("CREATE TABLE notes (x)",), "a table 'notes' wiretape never makes"),
    (("ALTER TABLE exchanges ADD COLUMN note TEXT",),
     "its table 'exchanges' is not defined as wiretape defines it"),
    (("CREATE INDEX by_origin ON exchanges (origin)",), "an index 'by_origin'"),
])
@pytest.mark.slow  # a long scenario: make test-slow
def test_an_extra_table_column_or_index_is_refused(
        hostile: tuple[Path, Path], tmp_path: Path, statements: tuple[str, ...],
        said: str) -> None:
    project, run = hostile
    alter(run, *statements)
    replay_refused(project, run, tmp_path, said)
    shown_refused(run, tmp_path, said)


@pytest.mark.parametrize(("statement", "said"), [
    ("UPDATE exchanges SET started_at_ns = 'yesterday'", "its start is text, not an integer"),
    ("UPDATE exchanges SET method = 'POST'", "its method is text, not bytes"),
    ("UPDATE snapshot_entries SET mode = 9223372036854775807",
     "its mode is 9223372036854775807, outside 0..4095"),
    ("UPDATE exchanges SET response_headers = NULL", "its response headers is NULL"),
    ("UPDATE meta SET value = '{\"not\": \"a list\"}' WHERE key = 'argv'",
     "metadata 'argv' is an object, not a list"),
])
@pytest.mark.slow  # a long scenario: make test-slow
def test_a_stored_value_of_the_wrong_type_is_refused(
        hostile: tuple[Path, Path], tmp_path: Path, statement: str, said: str) -> None:
    project, run = hostile
    alter(run, statement)
    replay_refused(project, run, tmp_path, said)
    if "snapshot" not in statement:  # show and report do not read snapshots
        shown_refused(run, tmp_path, said, verdict="argv" in statement)


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_newer_schema_names_both_versions(hostile: tuple[Path, Path], tmp_path: Path) -> None:
    from wiretape.store.schema import SCHEMA_VERSION

    project, run = hostile
    alter(run, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    said = (f"schema version {SCHEMA_VERSION + 1}", f"reads up to {SCHEMA_VERSION}")
    replay_refused(project, run, tmp_path, *said)
    shown_refused(run, tmp_path, *said)


# --- snapshots a replay would restore: roots, names, depth, links, the outcome ----------------


def add_entry(run: Path, path: str, kind: str, *, data: bytes = b"", link: str = "",
              mode: int = 0o644) -> None:
    """An entry added to the run's (only) snapshot, as an attacker would."""
    with sqlite3.connect(run) as db:
        (sid,) = db.execute("SELECT id FROM snapshots").fetchone()
        digest = None
        if kind == "file":
            digest = hashlib.sha256(data).hexdigest()
            db.execute("INSERT OR IGNORE INTO blobs (hash, size, codec, ref, depth, data) "
                       "VALUES (?, ?, 'raw', NULL, 0, ?)", (digest, len(data), data))
        db.execute("INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link) "
                   "VALUES (?, ?, ?, ?, ?, ?)", (sid, path, kind, mode, digest, link))


def test_a_snapshot_over_a_system_folder_never_stands_in_for_the_users_programs(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    """A root of /usr/local/bin holding a ``true`` of its own: in a
    same-paths replay it would be the ``true`` the user's own command runs.
    Refused in one line naming the way out; mapped paths cover nothing."""
    _, run = hostile
    marker = tmp_path / "the-run-s-code-ran"
    alter(run, "UPDATE snapshots SET root = '/usr/local/bin'")
    add_entry(run, "true", "file", mode=0o755,
              data=f"#!/bin/sh\necho pwned > {marker}\n".encode())
    done = wiretape("replay", str(run), "--", "true", cwd=tmp_path)
    line = one_line(done, run, "its snapshot root /usr/local/bin is a system folder",
                    "replay with --no-same-paths")
    assert "/tmp/wiretape-sandbox" not in line
    assert not marker.exists()
    assert not (tmp_path / "state").exists()
    mapped = wiretape("replay", str(run), "--no-same-paths", "--", "true", cwd=tmp_path)
    assert mapped.returncode in (1, 3), mapped.stderr  # the user's own true ran
    assert not marker.exists()


@pytest.mark.parametrize(("roots", "said"), [
    (["/"], ("its snapshot root is the root folder '/'", "record the run again")),
    (["/etc"], ("its snapshot root /etc is a system folder", "--no-same-paths")),
    (["/var/lib/wiretape-test"], ("/var/lib/wiretape-test is a system folder",
                                  "--no-same-paths")),
    (["{project}", "{project}"], ("names the snapshot root '{project}' twice",
                                  "record the run again")),
])
def test_a_root_that_is_no_place_for_a_snapshot_is_refused(
        hostile: tuple[Path, Path], tmp_path: Path, roots: list[str],
        said: tuple[str, str]) -> None:
    project, run = hostile
    alter(run, "UPDATE snapshots SET root = ?", params=(roots[0].format(project=project),))
    for root in roots[1:]:
        alter(run, "INSERT INTO snapshots (root, taken_at_ns, files, bytes) VALUES (?, 0, 0, 0)",
              params=(root.format(project=project),))
    replay_refused(project, run, tmp_path, *(words.format(project=project) for words in said))


def test_two_links_that_escape_only_together_are_refused(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    """``sub/q -> ..`` and ``sub/p -> q/../..`` each stay inside, read alone;
    followed one through the other, ``sub/p`` is the project's parent."""
    project, run = hostile
    add_entry(run, "sub", "dir", mode=0o755)
    add_entry(run, "sub/q", "symlink", link="..", mode=0o777)
    add_entry(run, "sub/p", "symlink", link="q/../..", mode=0o777)
    escape = project.parent / f"escape-{tmp_path.name}"
    done = wiretape("replay", str(run), "--", sys.executable, "-c",
                    f"open({str(project / 'sub' / 'p' / escape.name)!r}, 'w').close()",
                    cwd=tmp_path)
    try:
        one_line(done, run, f"snapshot entry 'sub/p' of its snapshot of {project} is a link "
                            "that leads outside its tree ('q/../..')",
                 "record the run again")
        assert not escape.exists()
    finally:
        escape.unlink(missing_ok=True)


@pytest.mark.parametrize(("path", "said"), [
    ("/".join(["d"] * 2000), "holds an entry 2000 folders deep"),
    ("x" * 5000, "a name longer than 255 bytes"),
    ("/".join(["y" * 250] * 17), "whose path is longer than 4095 bytes"),
])
def test_an_entry_no_file_system_takes_is_refused_in_one_line(
        hostile: tuple[Path, Path], tmp_path: Path, path: str, said: str) -> None:
    project, run = hostile
    add_entry(run, path, "dir", mode=0o755)
    replay_refused(project, run, tmp_path, said, "record the run again")
    assert not list(Path(tempfile.gettempdir()).glob("wiretape-sandbox-*/*/d/d"))


@pytest.mark.parametrize(("statement", "said"), [
    ("UPDATE outcome_changes SET detail = 'not json'", "is not JSON"),
    ("UPDATE outcome_changes SET detail = json_set(detail, '$.path', '../../etc/hostname')",
     "a recorded change of snapshot 1 with an unsafe path '../../etc/hostname'"),
    ("UPDATE outcome_changes SET detail = json_set(detail, '$.path', '/etc/hostname')",
     "a recorded change of snapshot 1 with an unsafe path '/etc/hostname'"),
])
def test_a_bad_recorded_outcome_is_refused_before_the_agent_runs(
        hostile: tuple[Path, Path], tmp_path: Path, statement: str, said: str) -> None:
    project, run = hostile
    with sqlite3.connect(run) as db:
        assert db.execute("SELECT count(*) FROM outcome_changes").fetchone()[0] >= 1
    alter(run, statement)
    replay_refused(project, run, tmp_path, said)


def test_scan_and_scrub_refuse_what_a_replay_refuses(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = hostile
    add_entry(run, "sub", "dir", mode=0o755)
    add_entry(run, "sub/q", "symlink", link="..", mode=0o777)
    add_entry(run, "sub/p", "symlink", link="q/../..", mode=0o777)
    before = hashlib.sha256(run.read_bytes()).hexdigest()
    for command in (["scan", str(run)], ["scrub", str(run)]):
        one_line(wiretape(*command, cwd=tmp_path), run,
                 "snapshot entry 'sub/p' of its snapshot of", "is a link that leads outside")
    assert hashlib.sha256(run.read_bytes()).hexdigest() == before


@pytest.mark.skipif(not readonly.available(), reason="cannot mount a folder read-only here")
def test_scrub_of_a_run_on_a_read_only_mount_says_so_in_one_line(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    _, run = hostile
    folder = tmp_path / "mounted"
    folder.mkdir()
    copy = folder / "run.wtape"
    copy.write_bytes(run.read_bytes())
    done = subprocess.run(readonly.read_only_argv(folder, [
        sys.executable, "-m", "wiretape", "scrub", str(copy), "--match", "the answer"]),
        capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip() == (f"wiretape: error: cannot write run file {copy}: "
                                   "read-only file system"), done.stderr


# --- printing what a run holds ------------------------------------------------------------------

CONTROL = ("\x1b", "\x07", "\x9b", "\r")


@pytest.mark.slow  # a long scenario: make test-slow
def test_terminal_control_codes_from_a_run_are_printed_as_text(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                ) -> None:
    """A response and an argument holding escape sequences (a window title,
    a C1 CSI, a carriage return, a newline): ``show``, ``show --exchange``,
    ``ls`` and a replay's verdict print them as ``\\x1b`` text, and the
    ``ls`` table keeps one line per run."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    run = tmp_path / ".wiretape" / "runs" / "run_0123456789ab.wtape"
    argument = "X=\x1b]0;ARGV\x07g\nx\ry"
    with FakeProvider([TextTurn("\x1b]0;PWNED\x07 hi\x9b2J\nline2")]) as fp:
        done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                        f"openai={fp.url}/v1", "--", "env", argument, sys.executable,
                        str(AGENT), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    outputs = {}
    for command in (["show", str(run)], ["show", str(run), "--exchange", "0"],
                    ["show", str(run), "--json"], ["ls"]):
        shown = wiretape(*command, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        outputs[" ".join(command[:1] + command[2:])] = shown.stdout + shown.stderr
    replayed = wiretape("replay", str(run), "--", sys.executable, "-c", "print('other')",
                        cwd=tmp_path)
    assert replayed.returncode == 3, replayed.stderr  # its exchange unused
    outputs["replay"] = replayed.stderr
    for name, text in outputs.items():
        assert not [c for c in CONTROL if c in text], (name, text)
    assert "\\x1b]0;PWNED\\x07 hi\\x9b2J" in outputs["show --exchange 0"]
    assert "\\x1b]0;PWNED\\x07 hi\\x9b2J" in outputs["show"]
    assert "X=\\x1b]0;ARGV\\x07g\\nx\\ry" in outputs["show"]
    assert "\\x1b]0;PWNED\\x07 hi\\x9b2J" in outputs["replay"]
    assert json.loads(outputs["show --json"])["argv"][1] == argument
    table = outputs["ls"].strip().splitlines()
    assert len(table) == 2 and "env 'X=\\x1b]0;ARGV\\x07g\\nx" in table[1], table


def test_a_snapshot_over_a_folder_on_the_users_path_is_refused_at_the_original_paths(
        hostile: tuple[Path, Path], tmp_path: Path) -> None:
    """The project folder is on PATH and the run's snapshot holds a ``true``
    of its own: shown at the original paths it would be the ``true`` the
    user's command runs. Refused in one line that names the way out;
    mapped paths (which shadow nothing) replay."""
    project, run = hostile
    marker = tmp_path / "the-run-s-code-ran"
    add_entry(run, "true", "file", mode=0o755,
              data=f"#!/bin/sh\necho pwned > {marker}\n".encode())
    env = {**os.environ, "PATH": f"{project}{os.pathsep}{os.environ['PATH']}"}

    def replay(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wiretape", "replay", str(run), *options,
                               "--", "true"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=90, stdin=subprocess.DEVNULL, env=env)

    done = replay()
    one_line(done, run, f"the snapshot root {project} of run file", "a folder on your PATH",
             "--no-same-paths")
    assert not marker.exists()
    mapped = replay("--no-same-paths")
    assert mapped.returncode in (0, 1, 3), mapped.stderr
    assert not marker.exists()
