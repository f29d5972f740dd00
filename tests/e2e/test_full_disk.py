"""A run file on a disk that fills up while recording: the recording stops
loudly. Later requests get an error in the provider's shape and are not
forwarded (nothing more is paid for that cannot be kept), the summary says
what was not saved and why, ``record`` exits 4, no asyncio traceback is
printed, and the exchanges committed before the disk filled open fine.

On a real full disk: a small tmpfs mounted in a private mount namespace
(``unshare -m``, as root), holding the run file, with a real client making
requests through ``wiretape record``.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

from support.readonly import why_no_private_mounts
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn

pytestmark = pytest.mark.timeout(180)

PROBE = str(Path(__file__).resolve().parent / "clients_modes" / "probe.py")
QUESTIONS = 12
#: Size of the small disk: the empty run file and a few answers fit, not all.
DISK = "520k"
_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")




def _answers() -> list[TextTurn]:
    # Letters at random compress little, so a few answers fill the disk.
    rnd = random.Random(7)
    return [TextTurn("".join(rnd.choice(string.ascii_letters) for _ in range(40_000)))
            for _ in range(QUESTIONS)]


def test_a_disk_that_fills_up_stops_the_recording_loudly(tmp_path: Path) -> None:
    why = why_no_private_mounts()
    if why is not None:
        pytest.skip(why)
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    run = disk / "run.wtape"
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(OPENAI_API_KEY="sk-full-disk-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    # In the namespace: mount the small disk, record onto it, then read the
    # run back while the disk is still full, and copy it out (with its WAL).
    script = f"""
mount -t tmpfs -o size={DISK} tmpfs "$DISK" || exit 97
"$@"
echo "RECORD-EXIT $?"
"$PY" -m wiretape show --json "$DISK/run.wtape" > "$KEPT/show.json" 2> "$KEPT/show.err"
echo "SHOW-EXIT $?"
cp -p "$DISK"/run.wtape* "$KEPT"/
"""
    with FakeProvider(_answers()) as fp:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
             sys.executable, "-m", "wiretape", "record", "-o", str(run), "--no-snapshot",
             "--upstream", f"openai={fp.url}/v1", "--",
             sys.executable, PROBE, "question", "--count", str(QUESTIONS), "--raw"],
            env={**env, "DISK": str(disk), "KEPT": str(kept), "PY": sys.executable},
            capture_output=True, text=True, timeout=150, check=False)
        forwarded = len(fp.requests)
    report = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}"
    assert "RECORD-EXIT 4" in done.stdout, report
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, report

    # The summary: what was not saved and why, and the agent's own status.
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("wiretape: error:")), "")
    found = re.fullmatch(
        rf"wiretape: error: disk full while writing {re.escape(str(run))}: (\d+) exchanges? "
        r"not saved, 1 later request refused without forwarding(, the run's end \(exit status, "
        r"output, changed files\) not saved)?; the (\d+) exchanges? saved earlier stays? "
        r"readable( \(partly in run\.wtape-wal beside it: keep the two files together\))? "
        r"\(exit status 4\)", line)
    assert found, report
    not_saved, end_lost, saved = int(found.group(1)), found.group(2), int(found.group(3))
    assert saved >= 2 and not_saved >= 1, report
    assert "wiretape: the agent exited with status 1" in done.stderr, report
    # Nothing was forwarded after the failure: every request the provider
    # answered was either saved or counted as not saved.
    assert forwarded == saved + not_saved < QUESTIONS, (forwarded, report)

    # The agent got an error it does not retry, naming wiretape and the reason.
    probe = json.loads(done.stdout.split("PROBE ", 1)[1].splitlines()[0])
    error = probe["error"]
    assert error["status"] == 503 and error["should_retry"] == "false", probe
    assert error["wiretape_error"] == "wiretape_cannot_write", probe
    assert "wiretape" in error["body"]["message"] and "disk full" in error["body"]["message"]
    assert len(probe["answers"]) == forwarded, probe

    # What was committed before opens fine: on the full disk itself ...
    assert "SHOW-EXIT 0" in done.stdout, (report, (kept / "show.err").read_text())
    shown = json.loads((kept / "show.json").read_text())
    assert [e["status"] for e in shown["exchanges"]] == [200] * saved
    # The run's end is stored when there is room for it, else the summary said so.
    assert shown["exit_status"] == (None if end_lost else 1), report
    # ... and elsewhere, each answer whole.
    with open_run(kept / "run.wtape") as copy:
        exchanges = copy.exchanges()
    assert [e.seq for e in exchanges] == list(range(saved))
    for exchange, answer in zip(exchanges, probe["answers"], strict=False):
        assert exchange.response is not None
        assert json.loads(exchange.response.body)["choices"][0]["message"]["content"] == answer


@pytest.mark.parametrize(("size", "while_"),
                         [("256k", ""), ("320k", " while storing the snapshot")],
                         ids=["the run file itself", "the snapshot"])
def test_a_run_file_that_does_not_fit_is_not_left_behind(tmp_path: Path, size: str,
                                                         while_: str) -> None:
    why = why_no_private_mounts()
    if why is not None:
        pytest.skip(why)
    disk, work = tmp_path / "disk", tmp_path / "work"
    disk.mkdir()
    work.mkdir()
    rnd = random.Random(3)  # text (a snapshot takes no binary file), compressing little
    (work / "big.txt").write_text("".join(rnd.choice(string.ascii_letters)
                                          for _ in range(600_000)))
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    script = f"""
mount -t tmpfs -o size={size} tmpfs "$DISK" || exit 97
"$@"
echo "RECORD-EXIT $?"
ls -A "$DISK"
"""
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
         sys.executable, "-m", "wiretape", "record", "-o", str(disk / "run.wtape"), "--", "true"],
        cwd=work, env={**env, "DISK": str(disk)}, capture_output=True, text=True, timeout=60,
        check=False)
    assert done.stdout.splitlines() == ["RECORD-EXIT 4"], (done.stdout, done.stderr)
    # Where the disk fills up depends on how much of the run the first write
    # holds; either way it is one line and no run file is left behind.
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(
        rf"wiretape: error: cannot write run file {re.escape(str(disk / 'run.wtape'))}: "
        rf"disk full({while_}|{' while storing the snapshot' if not while_ else ''}); "
        "nothing was recorded", line), done.stderr


def test_an_export_that_does_not_fit_leaves_the_old_file_whole(tmp_path: Path) -> None:
    """HAR (and report, JUnit) are written to a temporary name beside the
    target and renamed: a disk that fills up mid-way leaves the file that
    was there, and no half of the new one."""
    why = why_no_private_mounts()
    if why is not None:
        pytest.skip(why)
    disk, work = tmp_path / "disk", tmp_path / "work"
    disk.mkdir()
    work.mkdir()
    run = work / "run.wtape"
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(OPENAI_API_KEY="sk-full-disk-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    with FakeProvider(_answers()[:3]) as fp:
        done = subprocess.run(
            [sys.executable, "-m", "wiretape", "record", "-o", str(run), "--no-snapshot",
             "--upstream", f"openai={fp.url}/v1", "--", sys.executable, PROBE, "q", "--count",
             "3", "--raw"], cwd=work, env=env, capture_output=True, text=True, timeout=60,
            check=False)
    assert done.returncode == 0, done.stderr
    script = """
mount -t tmpfs -o size=64k tmpfs "$DISK" || exit 97
echo "the old export" > "$DISK/run.har"
"$@"
echo "EXPORT-EXIT $?"
ls -A "$DISK"
cat "$DISK/run.har"
"""
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
         sys.executable, "-m", "wiretape", "export", str(run), "--har", str(disk / "run.har")],
        env={**env, "DISK": str(disk)}, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.splitlines() == ["EXPORT-EXIT 2", "run.har", "the old export"], done
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"wiretape: error: cannot write {disk / 'run.har'}: No space left on device"), done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_from_python_a_disk_that_fills_up_raises_once_the_agent_ended(tmp_path: Path) -> None:
    why = why_no_private_mounts()
    if why is not None:
        pytest.skip(why)
    disk = tmp_path / "disk"
    disk.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(OPENAI_API_KEY="sk-full-disk-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    code = f"""
import sys, wiretape
try:
    run = wiretape.record([sys.executable, {PROBE!r}, "q", "--count", "{QUESTIONS}", "--raw"],
                          out={str(disk / "run.wtape")!r}, upstreams={{"openai": sys.argv[1]}},
                          snapshots=[])
except wiretape.RunFileWriteError as exc:
    print("RAISED", exc.exit_code, exc)
else:
    print("RETURNED", run)
"""
    script = f"""
mount -t tmpfs -o size={DISK} tmpfs "$DISK" || exit 97
"$@"
"""
    with FakeProvider(_answers()) as fp:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
             sys.executable, "-c", code, f"{fp.url}/v1"],
            env={**env, "DISK": str(disk)}, capture_output=True, text=True, timeout=120,
            check=False)
        forwarded = len(fp.requests)
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith(("RAISED", "RETURNED"))]
    assert re.fullmatch(
        rf"RAISED 4 cannot write run file {re.escape(str(disk / 'run.wtape'))}: disk full: "
        r"\d+ exchange\(s\) not saved, 1 later request\(s\) refused without forwarding"
        r"(, the run's end not saved)?; the \d+ exchange\(s\) saved before stay readable",
        line), line
    assert forwarded < QUESTIONS
