"""Bad input: every case exits 2 with exactly one line on stderr that names
the input, no traceback, and leaves what was already recorded intact
(DESIGN.md, "CLI surface": errors are one line; exit code 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wiretape.testing import FakeProvider, TextTurn

PROBE = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")
RUN_ID = "run_0123456789ab"

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def env(store: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-bad-input-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1",
               WIRETAPE_HOME=str(store))
    return out


class Workspace:
    """A store holding one recorded run (two exchanges), and a way to run wiretape there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = root / "store"
        self.run = self.store / "runs" / f"{RUN_ID}.wtape"

    def wiretape(self, *args: str, timeout: float = 30,
                 extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=self.root,
                              env=env(self.store) | (extra_env or {}), capture_output=True,
                              text=True, timeout=timeout)

    def snapshot(self) -> dict[str, object]:
        """What is recorded: the files in the store (no new ones, no leftover
        journal), and the run's metadata and exchanges, bodies included, as
        the run file gives them back."""
        from wiretape.store.runfile import open_run

        files = sorted(str(p.relative_to(self.store)) for p in self.store.rglob("*") if p.is_file())
        with open_run(self.run, replay_logs=self.store / "replays") as run:
            info = run.info()
            exchanges = [(e.seq, e.request.method, e.request.target, e.request.headers,
                          hashlib.sha256(e.request.body).hexdigest(),
                          e.response.status if e.response else None,
                          e.response.headers if e.response else None,
                          hashlib.sha256(e.response.body).hexdigest() if e.response else None,
                          e.ending) for e in run.exchanges()]
            replays = len(run.replays())
        return {"files": files, "run_id": info.run_id, "argv": info.argv, "stdout": info.stdout,
                "exchanges": exchanges, "replays": replays}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    store = root / "store"
    (store / "runs").mkdir(parents=True)
    with FakeProvider([TextTurn("first answer"), TextTurn("second answer")]) as fp:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "wiretape",
                "record",
                "-o",
                str(store / "runs" / f"{RUN_ID}.wtape"),
                "--upstream",
                f"openai={fp.url}/v1",
                "--",
                sys.executable,
                PROBE,
                "hello",
                "--count",
                "2",
                "--raw",
            ],
            cwd=root,
            env=env(store),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    return store / "runs" / f"{RUN_ID}.wtape"


@pytest.fixture
def ws(recorded: Path, tmp_path: Path) -> Iterator[Workspace]:
    w = Workspace(tmp_path)
    w.run.parent.mkdir(parents=True)
    shutil.copy(recorded, w.run)
    before = w.snapshot()
    assert len(before["exchanges"]) == 2
    assert [e[5] for e in before["exchanges"]] == [200, 200]
    yield w
    # nothing already recorded was lost, and no half-made run file was left behind
    assert w.snapshot() == before


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def one_line_error(done: subprocess.CompletedProcess[str], *names: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("wiretape: error: "), line
    for name in names:
        assert name in line, (name, line)
    assert done.stdout == ""
    return line


# --- run files -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["replay", "run_000000000000", "--", "true"],
                                     ["verdict", "run_000000000000"],
                                     ["show", "run_000000000000"]])
def test_unknown_run_id(ws, command):
    line = one_line_error(ws.wiretape(*command), "run_000000000000")
    assert "wiretape ls" in line  # what to do


def damaged(ws: Workspace, name: str, data: bytes) -> Path:
    path = ws.root / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("command", ["replay", "verdict", "show"])
def test_run_file_that_is_not_sqlite(ws, command):
    path = damaged(ws, "notes.wtape", b"these are my notes, not a run\n" * 50)
    extra = ["--", "true"] if command == "replay" else []
    line = one_line_error(ws.wiretape(command, str(path), *extra), str(path))
    assert "not SQLite" in line


@pytest.mark.parametrize("command", ["replay", "verdict", "show"])
def test_truncated_run_file(ws, command):
    data = ws.run.read_bytes()
    path = damaged(ws, "truncated.wtape", data[: len(data) // 2])
    extra = ["--", "true"] if command == "replay" else []
    line = one_line_error(ws.wiretape(command, str(path), *extra), str(path))
    assert "damaged" in line


def page_of(path: Path, table: str) -> tuple[int, int]:
    db = sqlite3.connect(path)
    try:
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[
            0
        ]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    return (root - 1) * size, size


@pytest.mark.parametrize(("table", "command"), [("exchanges", "replay"), ("exchanges", "show")])
def test_garbage_over_a_table_page(ws, table, command):
    data = bytearray(ws.run.read_bytes())
    offset, size = page_of(ws.run, table)
    data[offset + 8 : offset + size] = (b"\xde\xad\xbe\xef" * size)[: size - 8]
    path = damaged(ws, "garbage.wtape", bytes(data))
    extra = ["--", "true"] if command == "replay" else []
    one_line_error(ws.wiretape(command, str(path), *extra), str(path))


@pytest.mark.parametrize("command", ["replay", "show"])
def test_garbage_in_a_stored_body(ws, command):
    path = ws.root / "bodies.wtape"
    shutil.copy(ws.run, path)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE blobs SET data = zeroblob(length(data)) WHERE codec != 'raw'")
    db.close()
    extra = ["--", "true"] if command == "replay" else []
    one_line_error(ws.wiretape(command, str(path), *extra), str(path))


def test_ls_skips_a_damaged_run_file(ws):
    data = bytearray(ws.run.read_bytes())
    offset, size = page_of(ws.run, "exchanges")
    data[offset : offset + size] = (b"\xde\xad\xbe\xef" * size)[:size]
    bad = ws.run.parent / "run_00000000dead.wtape"
    bad.write_bytes(bytes(data))
    try:
        done = ws.wiretape("ls", "--json")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert [r["path"] for r in json.loads(done.stdout)] == [str(ws.run)]
        assert "wiretape: skipped: " in done.stderr and bad.name in done.stderr
    finally:
        bad.unlink()


@pytest.mark.parametrize("command", ["replay", "verdict", "show"])
def test_run_file_from_a_newer_schema(ws, command):
    path = ws.root / "newer.wtape"
    shutil.copy(ws.run, path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 42")
    db.close()
    extra = ["--", "true"] if command == "replay" else []
    line = one_line_error(ws.wiretape(command, str(path), *extra), str(path))
    from wiretape.store.schema import SCHEMA_VERSION

    assert "42" in line and f"up to {SCHEMA_VERSION}" in line  # both versions named
    assert "upgrade" in line


def test_record_onto_an_existing_run_file(ws):
    line = one_line_error(ws.wiretape("record", "-o", str(ws.run), "--", "true"), str(ws.run))
    assert "exists" in line


# --- ports, upstreams, commands, flags -----------------------------------------------------


def test_record_port_in_use(ws, busy_port):
    line = one_line_error(ws.wiretape("record", "--port", str(busy_port), "--", "true"),
                          str(busy_port))
    assert "in use" in line


def test_replay_port_in_use(ws, busy_port):
    line = one_line_error(ws.wiretape("replay", RUN_ID, "--port", str(busy_port), "--", "true"),
                          str(busy_port))
    assert "in use" in line


@pytest.mark.slow  # a long scenario: make test-slow
def test_serve_port_in_use(ws, busy_port):
    one_line_error(ws.wiretape("serve", "--replay", RUN_ID, "--port", str(busy_port)),
                   str(busy_port))
    one_line_error(ws.wiretape("serve", "--record", "--upstream", "http://127.0.0.1:9/v1",
                               "--port", str(busy_port)), str(busy_port))


@pytest.mark.parametrize("value", ["openai=ftp://x", "openai=notaurl", "openai=http://",
                                   "openai=http://host:99999/v1"])
def test_invalid_upstream(ws, value):
    one_line_error(ws.wiretape("record", "--upstream", value, "--", "true"), value)


def test_invalid_upstream_hint_once(ws):
    line = one_line_error(ws.wiretape("record", "--upstream", "openai=ftp://x", "--", "true"))
    assert line.count("expected NAME=URL") == 1, line


def test_upstream_without_a_name(ws):
    one_line_error(ws.wiretape("record", "--upstream", "notaurl", "--", "true"), "notaurl")


def test_record_command_not_found(ws):
    one_line_error(ws.wiretape("record", "--", "wiretape-no-such-command", "--flag"),
                   "wiretape-no-such-command")


def test_record_command_not_executable(ws):
    script = ws.root / "agent.sh"
    script.write_text("echo hi\n")
    os.chmod(script, 0o644)
    one_line_error(ws.wiretape("record", "--", str(script)), str(script))


def test_replay_command_not_found(ws):
    one_line_error(ws.wiretape("replay", RUN_ID, "--", "wiretape-no-such-command"),
                   "wiretape-no-such-command")


@pytest.mark.parametrize("value", ["abc", "-5", "1e6", "8MiB", "65535", "1000", "0"])
@pytest.mark.parametrize("command", ["record", "serve"])
def test_bad_spool_bytes(ws, value, command):
    """A bad WIRETAPE_SPOOL_BYTES (not a whole number of bytes, or below the
    64 KiB floor) is refused at start-up, before any agent starts or any
    run file is made."""
    marker = ws.root / "agent-started"
    args = (["record", "--upstream", "openai=http://127.0.0.1:9/v1", "--", "sh", "-c",
             f"touch {marker}"] if command == "record" else
            ["serve", "--record", "--upstream", "http://127.0.0.1:9/v1"])
    line = one_line_error(ws.wiretape(*args, extra_env={"WIRETAPE_SPOOL_BYTES": value}),
                          "WIRETAPE_SPOOL_BYTES", value, "65536")
    assert ("below the least" in line) == value.isdigit(), line
    assert not marker.exists()  # (serve starts no agent: checked for record)
    # No run file: none beside the one the store already held.
    assert sorted(p.name for p in (ws.store / "runs").glob("*.wtape")) == [f"{RUN_ID}.wtape"]


def test_spool_bytes_at_the_floor_records(ws):
    done = ws.wiretape("record", "-o", str(ws.root / "floor.wtape"), "--upstream",
                       "openai=http://127.0.0.1:9/v1", "--", "true",
                       extra_env={"WIRETAPE_SPOOL_BYTES": "65536"})
    assert done.returncode == 0, done.stderr
    assert (ws.root / "floor.wtape").exists()
    (ws.root / "floor.wtape").unlink()


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "1e9"])
@pytest.mark.parametrize("command", ["record", "replay"])
def test_bad_ws_close_timeout(ws, value, command):
    """A bad WIRETAPE_WS_CLOSE_TIMEOUT (not seconds above 0, at most a day)
    is refused at start-up, before any agent starts or any run file is made."""
    marker = ws.root / "agent-started"
    agent = ["--", "sh", "-c", f"touch {marker}"]
    args = (["record", "--upstream", "openai=http://127.0.0.1:9/v1", *agent]
            if command == "record" else ["replay", RUN_ID, *agent])
    before = sorted(p.name for p in ws.root.glob("*.wtape"))
    one_line_error(ws.wiretape(*args, extra_env={"WIRETAPE_WS_CLOSE_TIMEOUT": value}),
                   "WIRETAPE_WS_CLOSE_TIMEOUT", repr(value), "seconds")
    assert not marker.exists()
    assert sorted(p.name for p in ws.root.glob("*.wtape")) == before


@pytest.mark.parametrize("command", [["replay", RUN_ID, "--strict", "--diagnostic", "--", "true"],
                                     ["serve", "--replay", RUN_ID, "--strict", "--diagnostic"]])
def test_strict_and_diagnostic_together(ws, command):
    one_line_error(ws.wiretape(*command), "--strict", "--diagnostic")


def test_verdict_of_a_run_with_no_replay(ws):
    one_line_error(ws.wiretape("verdict", RUN_ID), RUN_ID, "no replay")
    one_line_error(ws.wiretape("verdict", RUN_ID, "--json"), RUN_ID, "no replay")


# --- TLS interception --------------------------------------------------------------------


@pytest.mark.parametrize(("args", "names"), [
    (["--intercept", "--resolve", "api.openai.com"], ["--resolve", "HOST=IP:PORT"]),
    (["--intercept", "--resolve", "api.openai.com=127.0.0.1:0"], ["--resolve"]),
    (["--intercept", "--upstream-ca", "missing.pem"], ["--upstream-ca", "missing.pem"]),
    (["--intercept", "--upstream-ca", "not-a-pem.txt"], ["--upstream-ca", "not-a-pem.txt"]),
    (["--intercept", "--upstream", "openai=http://127.0.0.1:9/v1"], ["--upstream", "--intercept"]),
    (["--intercept-host", "api.example.com"], ["--intercept-host", "--intercept"]),
    (["--intercept", "--port", "openai=8089"], ["--port", "--intercept"]),
    (["--intercept", "--intercept-host", ""], ["--intercept-host"]),
    (["--intercept", "--intercept-host", "https://gw.example.com/"], ["--intercept-host"]),
])
def test_intercept_options(ws, args, names):
    (ws.root / "not-a-pem.txt").write_text("hello\n")
    one_line_error(ws.wiretape("record", *args, "--", "true"), *names)
