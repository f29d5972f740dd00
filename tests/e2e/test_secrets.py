"""Secrets nowhere: a real agent given a key on its command line and a token
in its environment, printing both, with a .env, a .git and keys in its
working directory, recorded with the default snapshot: none of it is in the
run file's bytes (every blob decompressed and decoded), nor in what show,
report and export print, and the replay still passes. Gzip bodies both
ways; scrub and scan after the fact."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from support.harness import child_env
from support.raw_upstream import RawUpstream, Reply, Write
from support.secrets import assert_nowhere, places_holding
from wiretape.testing import FakeProvider, TextTurn

CLIENTS = Path(__file__).parent / "clients_secrets"
KEY = "sk-proj-" + "Zz9Yy8Xx7" * 5  # on the agent's command line
TOKEN = "tok-7f3a9b2c4d5e6f"  # in its environment (a secret by its name)
DB_PASS = "s3cr3t-db-pass-77"  # in .env, and repeated in config.json
ANSWER_KEY = "sk-ant-api03-" + "Q1w2E3r4" * 5  # in the provider's answer
NPM_TOKEN = "npm_Ab12Cd34Ef56Gh78Ij90"  # in .npmrc
GIT_TOKEN = "ghp_" + "R5t6Y7u8" * 5  # in .git/config
PRIVATE = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
SECRETS = [s.encode() for s in (KEY, TOKEN, DB_PASS, ANSWER_KEY, NPM_TOKEN, GIT_TOKEN, PRIVATE)]

pytestmark = pytest.mark.timeout(180)


def wiretape(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env=child_env(MY_SERVICE_TOKEN=TOKEN, **env), stdin=subprocess.DEVNULL)


def lay_out(work: Path) -> None:
    work.mkdir()
    (work / ".env").write_text(f"DB_PASSWORD={DB_PASS}\nDEBUG=1\n")
    (work / "config.json").write_text(json.dumps({"password": DB_PASS, "model": "gpt-4o-mini"}))
    (work / ".npmrc").write_text(f"//registry.npmjs.org/:_authToken={NPM_TOKEN}\n")
    (work / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n"
                                     f"{PRIVATE}\n-----END OPENSSH PRIVATE KEY-----\n")
    (work / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (work / "notes.md").write_text("# notes\nnothing secret here\n")
    git = work / ".git"
    (git / "objects").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text(
        f'[remote "origin"]\n\turl = https://me:{GIT_TOKEN}@github.com/me/agent.git\n')


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The leaky agent recorded in its project: (project, run, record's stderr)."""
    base = tmp_path_factory.mktemp("leaky")
    work, run = base / "project", base / "run.wtape"
    lay_out(work)
    with FakeProvider([TextTurn(f"Noted. Your other key {ANSWER_KEY} works too.")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, str(CLIENTS / "leaky_agent.py"), "--api-key", KEY,
                        cwd=work)
    assert done.returncode == 0, done.stderr
    assert KEY in done.stdout and TOKEN in done.stderr  # the agent did leak them
    return work, run, done.stderr


def test_no_secret_reaches_the_run_file(recorded: tuple[Path, Path, str]) -> None:
    _, run, stderr = recorded
    assert_nowhere(run, SECRETS)
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    entries = {path for (path,) in db.execute("SELECT path FROM snapshot_entries")}
    assert entries == {".git", "config.json", "notes.md"}  # .git kept empty
    assert ("left out 5 path(s) (1 repository, 2 secrets, 1 private key, 1 binary)"
            in stderr), stderr
    for name in (".git/", ".env", ".npmrc", "id_ed25519", "logo.png"):
        assert name in stderr
    facts = {(loc.split(":")[0], name) for loc, name in
             db.execute("SELECT location, name FROM redactions")}
    for fact in [("argv", "openai-key"), ("stdout", "openai-key"),
                 ("stderr", "env:MY_SERVICE_TOKEN"), ("snapshot", ".env:DB_PASSWORD"),
                 ("request-body", "openai-key"),
                 ("request-body", "env:MY_SERVICE_TOKEN"), ("request-header", "authorization"),
                 ("response-body", "anthropic-key"), ("outcome", "anthropic-key")]:
        assert fact in facts, (fact, sorted(facts))
    argv = json.loads(db.execute("SELECT value FROM meta WHERE key = 'argv'").fetchone()[0])
    assert argv[-1].startswith("<redacted") and len(argv[-1]) == len(KEY)


def test_show_report_and_export_show_none(recorded: tuple[Path, Path, str],
                                          tmp_path: Path) -> None:
    work, run, _ = recorded
    page = tmp_path / "report.html"
    outputs = [wiretape("report", str(run), "-o", str(page), cwd=work.parent),
               wiretape("export", str(run), "--har", "-", cwd=work.parent),
               wiretape("show", str(run), cwd=work.parent),
               wiretape("show", str(run), "--exchange", "0", "--frames", cwd=work.parent),
               wiretape("show", str(run), "--json", cwd=work.parent)]
    for done in outputs:
        assert done.returncode == 0, done.stderr
    text = page.read_text() + "".join(d.stdout + d.stderr for d in outputs)
    assert "<redacted" in text
    for secret in SECRETS:
        assert secret.decode() not in text


def test_the_replay_passes_and_keeps_no_secret_either(recorded: tuple[Path, Path, str]) -> None:
    work, run, _ = recorded
    done = wiretape("replay", str(run), "--json", cwd=work.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout[done.stdout.index("\n{") + 1:])
    assert verdict["exact"] == verdict["recorded"] == 1
    files = verdict["outcome"]["files"]
    assert files["same"], files  # nothing left out is called deleted
    assert_nowhere(run, SECRETS)  # the replay's log and output are redacted too
    scan = wiretape("scan", str(run), cwd=work.parent)
    assert scan.returncode == 0 and "clean" in scan.stdout, scan.stdout + scan.stderr


# -- gzip both ways ------------------------------------------------------------------------------

LEAKED = "sk-proj-" + "Gz1pGz2pGz3p" * 3
ANSWERED = "sk-svcacct-" + "An5wEr6" * 4


def gzip_replies() -> list[Reply]:
    unary = gzip.compress(json.dumps({"choices": [{"message": {
        "role": "assistant", "content": f"stored it next to {ANSWERED}"}}]}).encode(), mtime=5)
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n" % len(unary))
    events = [b'data: {"delta": "part %d"}\n\n' % i for i in range(4)]
    events[1] = b'data: {"delta": "' + ANSWERED.encode() + b'"}\n\n'
    events.append(b"data: [DONE]\n\n")
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    chunks = [z.compress(e) + z.flush(zlib.Z_SYNC_FLUSH) for e in events]
    chunks[-1] += z.flush()
    stream_head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
    writes = [Write(0.0, stream_head, "head")]
    writes += [Write(0.02 * (i + 1), b"%x\r\n" % len(c) + c + b"\r\n", "chunk", c)
               for i, c in enumerate(chunks)]
    writes.append(Write(0.02 * len(chunks), b"0\r\n\r\n", "terminator"))
    return [Reply("unary", (Write(0.0, head + unary, "whole", unary),), status=200),
            Reply("stream", tuple(writes), status=200)]


def test_gzip_bodies_both_ways_are_redacted_decoded_and_replay_exactly(tmp_path: Path) -> None:
    run = tmp_path / "gzip.wtape"
    with RawUpstream(gzip_replies()) as upstream:
        done = wiretape("record", "-o", str(run), "--no-snapshot", "--upstream",
                        f"openai={upstream.url}/v1", "--", sys.executable,
                        str(CLIENTS / "gzip_client.py"), cwd=tmp_path, LEAKED_KEY=LEAKED)
        sent = [gzip.decompress(r.body) for r in upstream.received]
    assert done.returncode == 0, done.stderr
    assert ANSWERED in done.stdout and all(LEAKED.encode() in body for body in sent)
    secrets = [LEAKED.encode(), ANSWERED.encode()]
    assert_nowhere(run, secrets)
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    recoded = [loc for loc, name in db.execute("SELECT location, name FROM redactions")
               if name == "recoded:gzip"]
    assert sorted(recoded) == ["request-body", "request-body", "response-body", "response-body"]
    frames = db.execute("SELECT count(*) FROM frames WHERE seq = 1").fetchone()[0]
    assert frames >= 2  # the stream keeps its frames
    db.close()
    replay = wiretape("replay", str(run), "--json", cwd=tmp_path, LEAKED_KEY=LEAKED)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    verdict = json.loads(replay.stdout[replay.stdout.index("\n{") + 1:])
    assert (verdict["exact"], verdict["recorded"]) == (2, 2)
    # The replayed client read the stored (redacted, coded again) bodies.
    assert "stored it next to <redacted" in replay.stdout
    assert ANSWERED not in replay.stdout
    assert_nowhere(run, secrets)
    # show reads a gzip request decoded: its model and messages, not "N bytes".
    shown = wiretape("show", str(run), "--exchange", "0", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "request (openai-chat): model gpt-4o-mini, 1 message" in shown.stdout, shown.stdout
    assert "[user] my key <redacted" in shown.stdout and "not JSON" not in shown.stdout


# -- scrub and scan -------------------------------------------------------------------------------

GREETING = "the Blue Heron team (rooms 4-17)"


@pytest.mark.slow  # a long scenario: make test-slow
def test_scrub_replaces_a_value_everywhere_and_the_replay_still_matches(tmp_path: Path) -> None:
    run = tmp_path / "env.wtape"
    with FakeProvider([TextTurn(f"Hi {GREETING}!")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, str(CLIENTS / "env_agent.py"), cwd=tmp_path,
                        TEAM_GREETING=GREETING)
    assert done.returncode == 0, done.stderr
    assert places_holding(run, [GREETING.encode()])  # not a secret by any rule
    assert wiretape("scan", str(run), cwd=tmp_path).returncode == 0
    assert wiretape("scan", str(run), "--match", GREETING, cwd=tmp_path).returncode == 1
    scrubbed = wiretape("scrub", str(run), "--match", GREETING, "--json", cwd=tmp_path)
    assert scrubbed.returncode == 0, scrubbed.stderr
    report = json.loads(scrubbed.stdout)
    assert report["counts"] == {"request bodies": 1, "response bodies": 1, "stdout": 1}
    assert "3 replacements (" in scrubbed.stderr
    assert_nowhere(run, [GREETING.encode()])
    assert not list(tmp_path.glob(".env.wtape.scrub-*"))  # the temporary file is gone
    scan = wiretape("scan", str(run), "--match", GREETING, cwd=tmp_path)
    assert scan.returncode == 0, scan.stdout
    # The live agent still sends the value: learned by its fingerprint from
    # the environment, it is replaced as the scrub did, so the request is exact.
    replay = wiretape("replay", str(run), "--json", cwd=tmp_path, TEAM_GREETING=GREETING)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    verdict = json.loads(replay.stdout[replay.stdout.index("\n{") + 1:])
    assert verdict["exact"] == 1 and verdict["outcome"]["stdout"]["same"]
    assert_nowhere(run, [GREETING.encode()])


@pytest.mark.slow  # a long scenario: make test-slow
def test_scan_fails_a_run_holding_a_secrets_file_until_it_is_scrubbed(tmp_path: Path) -> None:
    work = tmp_path / "project"
    lay_out(work)
    (work / ".env").write_text(f"OPENAI_API_KEY={KEY}\nDB_PASSWORD={DB_PASS}\n")
    run = tmp_path / "taken.wtape"
    with FakeProvider([TextTurn("ok")]) as fp:
        done = wiretape("record", "-o", str(run), "--snapshot-include", ".env", "--upstream",
                        f"openai={fp.url}/v1", "--", sys.executable,
                        str(CLIENTS / "leaky_agent.py"), "--api-key", "sk-placeholder",
                        cwd=work)
    assert done.returncode == 0, done.stderr
    # Asked for: .env is stored, with its values masked as everywhere else.
    assert not places_holding(run, [DB_PASS.encode(), KEY.encode()])
    scan = wiretape("scan", str(run), cwd=tmp_path)
    assert scan.returncode == 1
    assert "snapshot holds .env (secrets" in scan.stdout, scan.stdout
    rules = tmp_path / "rules.txt"
    rules.write_text("# our database passwords\ns3cr3t-[a-z-]+[0-9]+\n")
    scrubbed = wiretape("scrub", str(run), "--rules", str(rules), cwd=tmp_path)
    assert scrubbed.returncode == 0, scrubbed.stderr
    assert "dropped from the snapshots: .env" in scrubbed.stderr
    assert_nowhere(run, [DB_PASS.encode(), KEY.encode()])
    again = wiretape("scan", str(run), cwd=tmp_path)
    assert again.returncode == 0 and "clean" in again.stdout, again.stdout


# -- secrets files taken on request, or stored by an older recording ------------------------------


def test_a_secrets_file_taken_on_request_keeps_its_values_secret_everywhere(
        tmp_path: Path) -> None:
    """``--snapshot-include .env`` stores the file, not its values: they are
    masked in it, and wherever else the run keeps them (a gzip request
    body, stdout)."""
    work = tmp_path / "project"
    work.mkdir()
    (work / ".env").write_text(f"DB_PASSWORD={DB_PASS}\nDEBUG=1\n")
    run = tmp_path / "included.wtape"
    with RawUpstream(gzip_replies()) as upstream:
        done = wiretape("record", "-o", str(run), "--snapshot-include", ".env", "--upstream",
                        f"openai={upstream.url}/v1", "--", sys.executable,
                        str(CLIENTS / "gzip_client.py"), ".env", "DB_PASSWORD", cwd=work)
        sent = [gzip.decompress(r.body) for r in upstream.received]
    assert done.returncode == 0, done.stderr
    assert f"using {DB_PASS}" in done.stdout and all(DB_PASS.encode() in b for b in sent)
    assert_nowhere(run, [DB_PASS.encode()])
    db = sqlite3.connect(f"file:{run}?mode=ro", uri=True)
    rules = {(loc.split(":")[0], name) for loc, name in
             db.execute("SELECT location, name FROM redactions")}
    paths = [p for (p,) in db.execute("SELECT path FROM snapshot_entries")]
    db.close()
    assert ".env" in paths  # taken, as asked
    assert {("request-body", ".env:DB_PASSWORD"), ("stdout", ".env:DB_PASSWORD"),
            ("snapshot", ".env:DB_PASSWORD")} <= rules, rules


@pytest.mark.slow  # a long scenario: make test-slow
def test_scrub_drops_a_stored_secrets_file_and_its_values_everywhere(tmp_path: Path) -> None:
    """A run holding a ``.env`` whose value is also in its gzip bodies (as
    an older recording kept it): ``scrub`` without --match drops the file
    and takes its values as secrets everywhere else, so ``scan`` is right
    to say clean afterwards."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "settings.txt").write_text(f"DB_PASSWORD={DB_PASS}\n")  # not a secrets file
    run = tmp_path / "older.wtape"
    with RawUpstream(gzip_replies()) as upstream:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={upstream.url}/v1",
                        "--", sys.executable, str(CLIENTS / "gzip_client.py"), "settings.txt",
                        "DB_PASSWORD", cwd=work)
    assert done.returncode == 0, done.stderr
    assert places_holding(run, [DB_PASS.encode()])
    with sqlite3.connect(run) as db:  # the .env an older recording stored
        db.execute("INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link) "
                   "SELECT snapshot_id, '.env', 'file', mode, blob, link FROM snapshot_entries "
                   "WHERE path = 'settings.txt'")
    scan = wiretape("scan", str(run), cwd=tmp_path)
    assert scan.returncode == 1, scan.stdout
    assert ".env:DB_PASSWORD" in scan.stdout  # its value, found in the bodies too
    scrubbed = wiretape("scrub", str(run), cwd=tmp_path)
    assert scrubbed.returncode == 0, scrubbed.stderr
    assert "dropped from the snapshots: .env" in scrubbed.stderr
    assert_nowhere(run, [DB_PASS.encode()])
    again = wiretape("scan", str(run), cwd=tmp_path)
    assert again.returncode == 0 and "clean" in again.stdout, again.stdout
