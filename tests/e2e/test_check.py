"""``wiretape check``: a folder of runs replayed in parallel by the real CLI,
with the provider gone; a summary table, the divergence report of each
failure, JUnit XML, and exit 1 when any run fails.

Two of the runs come from an agent that reads its base URL from its own
config file and ignores the environment (as nanobot does), both recorded on
the same fixed port: replayed at the same time they would take each other's
requests, so check runs them one after the other.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sqlite3
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import wiretape
from wiretape.testing import FakeProvider, TextTurn

pytestmark = pytest.mark.timeout(150)

PINNED_AGENT = textwrap.dedent('''
    """Asks once; its base URL comes from config.json, never from the environment.
    argv: PROMPT (or @FILE to read it from FILE), and a file whose existence
    makes it wait a minute first. Standard library only, so it starts fast."""
    import json, os, sys, time, urllib.request

    if os.path.exists(sys.argv[2]):
        time.sleep(60)
    prompt = open(sys.argv[1][1:]).read() if sys.argv[1].startswith("@") else sys.argv[1]
    config = json.load(open("config.json"))
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": prompt}]})
    request = urllib.request.Request(
        config["api_base"] + "/chat/completions", data=body.encode(),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from env
    with opener.open(request) as response:
        print(json.load(response)["choices"][0]["message"]["content"])
''')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wiretape_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def record_pinned(root: Path, name: str, port: int, prompt: str, answer: str,
                  flag: Path) -> wiretape.Run:
    """Record the pinned agent in ``root/name`` on ``port``; the run goes to ``root/runs``."""
    home = root / name
    home.mkdir(parents=True)
    (home / "agent.py").write_text(PINNED_AGENT)
    (home / "config.json").write_text(json.dumps({"api_base": f"http://127.0.0.1:{port}/v1"}))
    with FakeProvider([TextTurn(answer)]) as provider:
        run = wiretape.record([sys.executable, "agent.py", prompt, str(flag)], cwd=home,
                              out=root / "runs" / f"{name}.wtape", port=port,
                              upstreams={"openai": provider.url + "/v1"})
    assert (run.exit_status, run.exchanges, run.stdout) == (0, 1, f"{answer}\n".encode())
    return run


def make_suite(root: Path, *names: str) -> Path:
    """Record runs into ``root/runs``: ``alpha`` and ``beta`` (same port),
    ``nested/changed`` (its prompt file, outside the recorded directory so
    no snapshot holds it, then changes), ``broken.wtape`` (not a run file),
    ``proxied`` (recorded through ``wiretape.recording``: no command)."""
    port = free_port()
    flag = root / "flags" / "hang"
    flag.parent.mkdir()
    for name in names:
        if name in ("alpha", "beta"):
            record_pinned(root, name, port, f"Say {name}.", f"{name.title()}!", flag)
        elif name == "changed":
            prompt = root / "prompt.txt"
            prompt.write_text("What is 6 x 7?")
            record_pinned(root, "nested/changed", free_port(), f"@{prompt}", "42.", flag)
            prompt.write_text("What is 6 x 8?")
        elif name == "broken":
            (root / "runs" / "broken.wtape").write_text("not a run\n")
        elif name == "proxied":  # no command: nothing for check to run again
            with wiretape.recording(upstream="http://127.0.0.1:9/v1",
                                    out=root / "runs" / "proxied.wtape"):
                pass
    return root


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.wtape"))}


def test_check_fails_when_every_run_was_skipped(tmp_path: Path) -> None:
    """A gate that replays nothing (every run recorded through a proxy
    only) does not pass."""
    suite = make_suite(tmp_path, "proxied")
    result = wiretape_cli("check", "runs", cwd=suite)
    assert result.returncode == 1, result.stderr
    assert result.stdout.rstrip().splitlines()[-1] == (
        "wiretape check: nothing was replayed: every run was recorded through a proxy only "
        "(no command), so the tests that made them replay them; give check runs recorded "
        "with `wiretape record -- CMD`")


def test_check_replays_a_folder_in_parallel_and_reports(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, "alpha", "beta", "changed", "broken", "proxied")
    before = digests(suite / "runs")
    result = wiretape_cli("check", "runs", "-j", "4", "--junit-xml", "out/junit.xml", cwd=suite)
    assert result.returncode == 1, result.stderr
    table = result.stdout.splitlines()
    assert table[0].split() == ["run", "result", "recorded", "exact", "substituted", "diverged",
                                "missing", "unused", "outcome", "time"]
    rows = {line.split()[0]: line.split() for line in table[1:6]}
    assert list(rows) == ["runs/alpha.wtape", "runs/beta.wtape", "runs/broken.wtape",
                          "runs/nested/changed.wtape", "runs/proxied.wtape"]  # sorted, as found
    assert rows["runs/alpha.wtape"][1:9] == ["PASS", "1", "1", "0", "0", "0", "0", "same"]
    assert rows["runs/beta.wtape"][1:9] == ["PASS", "1", "1", "0", "0", "0", "0", "same"]
    assert rows["runs/nested/changed.wtape"][1:8] == ["FAIL", "1", "0", "0", "1", "0", "0"]
    assert " differs: exit_status, stdout " in table[4]
    assert rows["runs/broken.wtape"][1:9] == ["ERROR", *["-"] * 7]
    assert rows["runs/proxied.wtape"][1:9] == ["SKIP", *["-"] * 7]
    out = result.stdout
    assert "--- runs/nested/changed.wtape (run_" in out
    assert ("wiretape: verdict FAIL (strict): recorded 1, exact 0, substituted 0, diverged 1, "
            "missing 0, unused 0") in out
    assert "request 0 POST /v1/chat/completions: diverged (recorded #0, rejected)" in out
    assert "at /messages/0/content" in out
    assert "--- runs/broken.wtape\nwiretape: error: cannot read run file runs/broken.wtape: " \
           "it is not a wiretape run file (not SQLite)" in out
    assert out.rstrip().splitlines()[-1].startswith(
        "wiretape check: 5 runs: 2 passed, 1 failed, 1 could not be replayed, 1 skipped "
        "(no command), in ")
    assert "--- runs/proxied.wtape" not in out
    assert "wiretape check: 5 runs, 4 at a time" in result.stderr
    assert result.stderr.count("wiretape check: [") == 5  # one progress line per run
    assert ("SKIP runs/proxied.wtape (0.0 s): recorded through a proxy only (serve, or the "
            "Python API's recording()), so it has no command to run") in result.stderr
    assert digests(suite / "runs") == before  # replays work on copies

    report = ET.parse(suite / "out" / "junit.xml").getroot()
    testsuite = report.find("testsuite")
    assert testsuite is not None
    assert {k: testsuite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5", "failures": "1", "errors": "1", "skipped": "1"}
    cases = {case.get("name"): case for case in testsuite.iter("testcase")}
    assert sorted(cases) == ["runs/alpha.wtape", "runs/beta.wtape", "runs/broken.wtape",
                             "runs/nested/changed.wtape", "runs/proxied.wtape"]
    assert cases["runs/proxied.wtape"].find("skipped") is not None
    assert list(cases["runs/alpha.wtape"]) == []
    failure = cases["runs/nested/changed.wtape"].find("failure")
    assert failure is not None and failure.get("message", "").startswith(
        "wiretape: verdict FAIL (strict): recorded 1, exact 0, substituted 0, diverged 1")
    assert "at /messages/0/content" in (failure.text or "")
    assert "\x1b[" not in (failure.text or "")  # no terminal colours in the report
    error = cases["runs/broken.wtape"].find("error")
    assert error is not None and "not a wiretape run file" in error.get("message", "")


def test_free_ports_suit_env_agents_and_break_pinned_ones(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, "alpha", "beta")
    # With --free-ports the pinned agent still calls its recorded port, where
    # nothing listens now: its replay fails. The listed files are checked alone.
    result = wiretape_cli("check", "runs/alpha.wtape", "runs/beta.wtape", "--free-ports",
                          cwd=suite)
    assert result.returncode == 1
    rows = [line.split() for line in result.stdout.splitlines()[1:3]]
    assert [r[:2] for r in rows] == [["runs/alpha.wtape", "FAIL"], ["runs/beta.wtape", "FAIL"]]
    assert all(r[3] == "0" and r[7] == "1" for r in rows)  # exact 0, unused 1


def test_a_replay_over_its_timeout_is_stopped_and_fails(tmp_path: Path) -> None:
    suite = make_suite(tmp_path, "alpha")
    (suite / "flags" / "hang").write_text("")
    result = wiretape_cli("check", "runs/alpha.wtape", "--timeout", "5", cwd=suite)
    assert result.returncode == 1
    row = result.stdout.splitlines()[1].split()
    assert row[:2] == ["runs/alpha.wtape", "FAIL"]
    assert "stopped after the 5 s timeout" in result.stderr
    assert "wiretape: stopped after the 5 s timeout" in result.stdout


def test_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    nothing = wiretape_cli("check", "empty", cwd=tmp_path)
    assert nothing.returncode == 2
    assert nothing.stderr.startswith("wiretape: error: no run files (*.wtape) in empty: ")
    missing = wiretape_cli("check", "nope", cwd=tmp_path)
    assert (missing.returncode, missing.stderr.strip()) == (
        2, ("wiretape: error: nope: no such file or folder (give run files or folders of "
           "*.wtape files)"))


def test_a_run_its_replay_refuses_is_named_by_the_users_path_in_one_line(
        tmp_path: Path) -> None:
    """A snapshot entry 2000 folders deep: the replay refuses it in one line,
    and check reports that line about the file it was given (not its own
    temporary copy), as a run that could not be replayed."""
    suite = make_suite(tmp_path, "alpha")
    deep = suite / "runs" / "deep.wtape"
    deep.write_bytes((suite / "runs" / "alpha.wtape").read_bytes())
    with sqlite3.connect(deep) as db:
        db.execute("INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link) "
                   "SELECT id, ?, 'dir', 493, NULL, '' FROM snapshots", ("/".join(["d"] * 2000),))
    result = wiretape_cli("check", "runs", cwd=suite)
    assert result.returncode == 1, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:3]}
    assert rows["runs/deep.wtape"][1] == "ERROR" and rows["runs/alpha.wtape"][1] == "PASS"
    said = [line for line in result.stdout.splitlines() if line.startswith("wiretape: error: ")]
    assert len(said) == 1, result.stdout
    assert said[0].startswith("wiretape: error: cannot read run file runs/deep.wtape: its "
                              f"snapshot of {suite / 'alpha'} holds an entry 2000 folders "
                              "deep"), said
    everything = result.stdout + result.stderr
    assert "wiretape-check-" not in everything and "RecursionError" not in everything
    assert "1 could not be replayed" in result.stdout
