"""The places besides exchanges; scrub and scan on a run written without
redaction (as older versions, or an import, could leave one): every place is
found and rewritten, the rewritten run is whole and consistent, and the swap
is atomic."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.secrets import assert_nowhere, places_holding
from wiretape.cli.main import cli
from wiretape.errors import UsageError
from wiretape.model import Ending, Exchange, Frame, Request, Response, RunInfo
from wiretape.redaction import STANDARD, Facts, fingerprint
from wiretape.scrub.places import redact_entry, redact_info, rules_redactor, secrets_file_values
from wiretape.scrub.runs import rules_for, scan_run, scrub_run
from wiretape.snapshot.tree import Change, Entry, LeftOut
from wiretape.store.runfile import RunFile

KEY = b"sk-proj-" + b"K3yK3yK3y" * 5
NAME = b"acme-internal-77"


def _old_run(path: Path) -> None:
    """A run holding KEY and NAME in every place a run keeps text."""
    info = RunInfo(run_id="run_0123456789ab", wiretape_version="0.0.1",
                   argv=("agent", "--key", KEY.decode()), cwd="/tmp/project",
                   env_names=("OPENAI_BASE_URL",), origins=(), started_at_ns=1)
    run = RunFile.create(path, info)
    body = json.dumps({"messages": [{"content": f"{KEY.decode()} {NAME.decode()}"}]}).encode()
    coded = gzip.compress(body)
    request = Request(b"POST", b"/v1/chat/completions?key=" + KEY,
                      ((b"Authorization", b"Bearer " + KEY), (b"Content-Encoding", b"gzip"),
                       (b"Content-Length", str(len(coded)).encode())), coded)
    answer = gzip.compress(b'{"content": "' + NAME + b" " + KEY + b'"}')
    response = Response(200, b"OK", ((b"Content-Encoding", b"gzip"),
                                     (b"Content-Length", str(len(answer)).encode())),
                        (Frame(5, answer[:7]), Frame(9, answer[7:])))
    run.write_exchange(Exchange(0, 1, "openai", 1, request, response, Ending.COMPLETE, 5, 9))
    stream = (Frame(3, b"data: acme-inter"), Frame(4, b"nal-77 done\n\n"))
    run.write_exchange(Exchange(1, 1, "openai", 2, Request(b"GET", b"/v1/models", (), b""),
                                Response(200, b"OK", (), stream), Ending.ORIGIN_RESET, 3, 4,
                                "reset after " + NAME.decode()))
    run.finish(0, b"out " + KEY + b"\n", b"err " + NAME + b"\n")
    entries = [Entry(".env", "file", 0o600, b"OPENAI_API_KEY=" + KEY + b"\n"),
               Entry(".git", "dir", 0o755), Entry(".git/config", "file", 0o644, b"[core]\n"),
               Entry("logo.bin", "file", 0o644, b"\x00\x01" + KEY),
               Entry("notes.txt", "file", 0o644, b"name " + NAME + b" key " + KEY + b"\n")]
    sid = run.add_snapshot("/tmp/project", entries)
    after = entries[-1].data + b"more " + KEY + b"\n"
    change = Change("notes.txt", "modified", entries[-1].digest,
                    Entry("notes.txt", "file", 0o644, after).digest, len(entries[-1].data),
                    len(after), False,
                    f"+more {KEY.decode()}\n")
    run.set_outcome_changes(sid, [change], {"notes.txt": after})
    run.set_connect_report({"intercepted": {}, "rejected": {"h": f"bad {KEY.decode()}"},
                            "tunnels": [], "refused": {}})
    run.close(compact=True)
    # A replay kept inside the file, as wiretape did before replay logs.
    settings = {"pace": "fast", "argv": ["agent", KEY.decode()], "cwd": "/tmp/project",
                "allow_substitutions": False, "substitutions": [], "sandbox": None,
                "paths": "none", "ports": {}}
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO replays (id, started_at_ns, ended_at_ns, mode, settings,"
                   " exit_status, stdout, stderr, outcome) VALUES (?, 1, 2, 'strict', ?, 0, ?,"
                   " x'', '{}')", ("rpl_000000000001", json.dumps(settings), b"replayed " + KEY))
    db.close()


def test_scan_finds_every_place_without_changing_the_run(tmp_path: Path) -> None:
    run = tmp_path / "old.wtape"
    _old_run(run)
    before = run.read_bytes()
    report = scan_run(run)
    assert run.read_bytes() == before
    where = {(f.location.split(":")[0], f.name) for f in report.facts}
    for place in ("argv", "stdout", "request-header", "query", "request-body", "response-body",
                  "snapshot", "outcome", "replay", "connect"):
        assert (place, "openai-key") in where or any(p == place for p, _ in where), place
    assert report.dropped == {".env": "secrets", ".git": "repository"}
    assert report.binary == ["snapshot:logo.bin"]
    assert all(f.fingerprint == fingerprint(KEY) for f in report.facts
               if f.name == "openai-key")
    assert report.found


def test_scrub_rewrites_every_place_and_leaves_a_whole_run(tmp_path: Path) -> None:
    run = tmp_path / "old.wtape"
    _old_run(run)
    rules, labels = rules_for([NAME.decode()], None)
    report = scrub_run(run, rules, labels)
    assert report.counts["request bodies"] == 2  # the key and the name, decoded
    assert report.counts["response bodies"] == 3  # both in one, the name across two frames
    assert report.counts["exchange errors"] == 1 and report.counts["stderr"] == 1
    assert report.recoded == 2
    assert report.dropped == {".env": "secrets", ".git": "repository"}
    assert [p.name for p in tmp_path.iterdir()] == ["old.wtape"]  # no temporary file left
    # logo.bin is binary: not read, so its key stays (and scan says so); it
    # is the only blob holding it (small: stored raw, so in the file's bytes).
    logo = Entry("logo.bin", "file", 0o644, b"\x00\x01" + KEY).digest[:8]
    holding = {p.split(":")[0] for p in places_holding(run, [KEY])}
    assert holding == {"old.wtape", f"blob {logo}"}
    assert_nowhere(run, [NAME])
    with RunFile.open(run) as rf:
        info = rf.info()
        assert KEY.decode() not in " ".join(info.argv) and NAME not in info.stderr
        first, second = rf.exchanges()
        assert gzip.decompress(first.request.body).count(b"<redacted") == 2
        assert dict(first.request.headers)[b"Content-Length"] == \
            str(len(first.request.body)).encode()
        assert first.response is not None and len(first.response.frames) == 2
        assert gzip.decompress(first.response.body).startswith(b'{"content": "<redacted')
        assert second.response is not None
        assert [len(f.data) for f in second.response.frames] == [16, 13]  # lengths kept
        assert second.ending is Ending.ORIGIN_RESET and NAME.decode() not in (second.error or "")
        (_, root, entries), = rf.snapshots()
        paths = [e.path for e in entries]
        assert root == "/tmp/project" and paths == [".git", "logo.bin", "notes.txt"]  # emptied
        (change,), = rf.outcome_changes().values()
        content = rf.content(change["after_hash"])
        assert content is not None and NAME not in content and KEY not in content
        assert change["before_hash"] == entries[2].digest
        assert rf.snapshot_policy()[0] == {"include": [], "binary": True, "guarded": True}
        facts = rf.redactions()
    db = sqlite3.connect(run)
    (scrubs,), = db.execute("SELECT value FROM meta WHERE key = 'scrubbed'").fetchall()
    db.close()
    # the values of the .env it dropped were secrets too
    assert [s["rules"] for s in json.loads(scrubs)] == [["key shapes", "match 1", "secrets files"]]
    assert any(seq == 0 and f.name == "match 1" for seq, f in facts)
    assert any(seq is None and f.location == "stderr" for seq, f in facts)
    again = scan_run(run, rules)
    assert not again.facts and not again.dropped and not again.loose
    assert again.binary == ["snapshot:logo.bin"]
    assert [(f.location, f.name) for f in again.in_binary] == [("snapshot:logo.bin",
                                                                 "openai-key")]


def test_scrub_rewrites_a_conversation_stored_as_splices(tmp_path: Path) -> None:
    """A recorded conversation resent whole each turn: each request body is
    stored spliced from the one before. NAME in its first message is in
    every body; scrubbed, every body reads back without it, stored spliced
    again."""
    path = tmp_path / "grown.wtape"
    info = RunInfo(run_id="run_0123456789ab", wiretape_version="0.0.1", argv=("agent",),
                   cwd="/tmp/project", env_names=(), origins=(), started_at_ns=1)
    run = RunFile.create(path, info)
    messages = [{"role": "user", "content": f"we work for {NAME.decode()}. " + "more " * 4000}]
    for turn in range(4):
        messages.append({"role": "tool", "content": f"turn {turn}: " + "output " * 300})
        body = json.dumps({"messages": messages, "model": "m", "tools": ["grep"]}).encode()
        run.write_exchange(Exchange(turn, 1, "openai", turn + 1,
                                    Request(b"POST", b"/v1/chat/completions", (), body),
                                    Response(200, b"OK", (), (Frame(1, b'{"ok": true}'),)),
                                    Ending.COMPLETE, 1, 2), compress_later=True)
    run.close(compact=True)

    def request_codecs() -> list[str]:
        db = sqlite3.connect(path)
        try:
            return [c for (c,) in db.execute("SELECT codec FROM exchanges JOIN blobs ON "
                                             "hash = request_body ORDER BY seq")]
        finally:
            db.close()

    with RunFile.open(path) as rf:
        before = [e.request.body for e in rf.exchanges()]
    assert request_codecs() == ["zstd", "splice", "splice", "splice"]
    rules, labels = rules_for([NAME.decode()], None)
    report = scrub_run(path, rules, labels)
    assert report.counts["request bodies"] == 4
    assert_nowhere(path, [NAME])
    with RunFile.open(path) as rf:
        after = [e.request.body for e in rf.exchanges()]
    assert [b.count(b"<redacted") for b in after] == [1, 1, 1, 1]
    assert [b.split(b"<redacted", 1)[0] for b in after] == [
        b.split(NAME, 1)[0] for b in before]
    assert request_codecs() == ["zstd", "splice", "splice", "splice"]


def test_scrub_to_another_file_leaves_the_run_alone(tmp_path: Path) -> None:
    run, out = tmp_path / "old.wtape", tmp_path / "clean.wtape"
    _old_run(run)
    before = run.read_bytes()
    scrub_run(run, STANDARD, [], out=out, include=(".env",))
    assert run.read_bytes() == before
    with RunFile.open(out) as rf:
        assert ".env" in [e.path for e in rf.snapshots()[0][2]]  # kept, as asked
    with pytest.raises(UsageError, match="already exists"):
        scrub_run(run, STANDARD, [], out=out)


def test_rules_files_are_checked(tmp_path: Path) -> None:
    rules = tmp_path / "rules.txt"
    rules.write_text("# comment\n\nacme-[a-z]+-[0-9]+\n")
    parsed, labels = rules_for(["x1"], rules)
    assert labels == ["match 1", "rule 3"] and len(parsed.patterns) == 1
    rules.write_text("acme-(\n")
    with pytest.raises(UsageError, match="line 1 is not a regular expression"):
        rules_for([], rules)
    rules.write_text("a*\n")
    with pytest.raises(UsageError, match="matches empty text"):
        rules_for([], rules)


def test_scan_exits_1_on_findings_and_0_when_clean(tmp_path: Path) -> None:
    run = tmp_path / "old.wtape"
    _old_run(run)
    runner = CliRunner()
    found = runner.invoke(cli, ["scan", str(run)])
    assert found.exit_code == 1, found.output
    assert "openai-key " + fingerprint(KEY) in found.output
    assert KEY.decode() not in found.output
    done = runner.invoke(cli, ["scrub", str(run)])
    assert done.exit_code == 0, done.output
    assert "snapshot:logo.bin is binary and holds a secret" in done.output
    assert "--drop logo.bin" in done.output
    binary = runner.invoke(cli, ["scan", str(run)])
    assert binary.exit_code == 1, binary.output
    assert "snapshot files (logo.bin) (binary, cannot be rewritten" in binary.output
    assert runner.invoke(cli, ["scrub", str(run), "--drop", "logo.bin"]).exit_code == 0
    clean = runner.invoke(cli, ["scan", str(tmp_path), "--json"])  # a folder: its runs
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.stdout)[0]["found"] == []


def test_places_besides_exchanges_use_the_rules(tmp_path: Path) -> None:
    rules = STANDARD.with_literals([("env:MY_TOKEN", b"tok-12345678")])
    facts = Facts()
    redact = rules_redactor(rules, facts)
    info = RunInfo(run_id="run_0123456789ab", wiretape_version="x",
                   argv=("agent", f"--key={KEY.decode()}", "tok-12345678"), cwd="/w",
                   env_names=("OPENAI_BASE_URL",), origins=(), started_at_ns=1)
    redacted = redact_info(info, rules, facts)
    assert redacted.argv == ("agent", "--key=<redacted" + "*" * (len(KEY) - 10) + ">",
                             "<redacted**>")
    text = Entry("a.txt", "file", 0o644, b"x tok-12345678 y")
    binary = Entry("b.bin", "file", 0o644, b"\x00tok-12345678")
    assert redact_entry(text, redact).data == b"x <redacted**> y"
    assert redact_entry(binary, redact) is binary  # never read as text
    assert {(f.location, f.name) for f in facts.items} == {
        ("argv", "openai-key"), ("argv", "env:MY_TOKEN"), ("snapshot:a.txt", "env:MY_TOKEN")}
    (tmp_path / ".env").write_text("A_SECRET=abc123def456\nPLAIN=1\n")
    (tmp_path / ".npmrc").write_text("//r/:_authToken=npm_1234abcd5678\n")
    found = secrets_file_values(tmp_path, [LeftOut(".env", "secrets"), LeftOut(".npmrc", "secrets"),
                                           LeftOut(".git/", "repository")])
    assert found == [(".env:A_SECRET", b"abc123def456"), (".npmrc://r/:_authToken",
                                                          b"npm_1234abcd5678")]
