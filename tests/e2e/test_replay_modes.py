"""Strict and diagnostic replays end to end: what the agent gets back when
it goes off the recording, that a strict stop takes the agent's whole
process group down, and that the verdict counts exact, diverged, missing
and unused requests right (DESIGN.md, "Matching and the verdict").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support.wt import stored_verdict, verdict_line
from wiretape.store.runfile import open_run
from wiretape.testing import FakeProvider, TextTurn, demo_script

CLIENTS = Path(__file__).resolve().parent / "clients_modes"
PROBE = str(CLIENTS / "probe.py")
AGENT = [sys.executable, "-m", "wiretape.examples.tool_agent"]
QUESTION = "How many pieces of fruit are listed in inventory.txt?"
ANSWER = "There are 42 pieces of fruit: 17 apples and 25 pears."

_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY",
          "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-modes-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def json_tail(stdout: str) -> dict[str, Any]:
    """The indented JSON document ``--json`` prints after the child's own output."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


def probe_output(stdout: str) -> dict[str, Any]:
    found = [line[6:] for line in stdout.splitlines() if line.startswith("PROBE ")]
    assert len(found) == 1, stdout
    return json.loads(found[0])


def process_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return process_gone(pid)


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def record(base: Path, name: str, script: list, *command: str) -> Path:
    with FakeProvider(script) as fp:
        done = wiretape("record", "-o", name, "--upstream", f"openai={fp.url}/v1", "--", *command,
                        cwd=base)
    assert done.returncode == 0, done.stderr
    return base / name


@pytest.fixture(scope="module")
def agent_recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example agent: three exchanges."""
    base = tmp_path_factory.mktemp("agent")
    path = record(base, "agent.wtape", demo_script(), *AGENT, QUESTION)
    with open_run(path) as run:
        assert run.info().stdout.decode().strip() == ANSWER
        assert run.exchange_count() == 3
    return path


@pytest.fixture(scope="module")
def probe_recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe asking twice over plain httpx: two exchanges."""
    base = tmp_path_factory.mktemp("probe")
    return record(base, "probe.wtape", [TextTurn("first answer"), TextTurn("second answer")],
                  sys.executable, PROBE, "hello", "--count", "2", "--raw")


@pytest.fixture(scope="module")
def sdk_recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe asking once through the openai SDK: one exchange."""
    base = tmp_path_factory.mktemp("sdk")
    return record(base, "sdk.wtape", [TextTurn("only answer")], sys.executable, PROBE, "hello")


def fresh(path: Path, tmp_path: Path) -> Path:
    """A copy, so each test sees only its own replays."""
    return Path(shutil.copy(path, tmp_path / path.name))


@pytest.fixture
def agent_run(agent_recorded: Path, tmp_path: Path) -> Path:
    return fresh(agent_recorded, tmp_path)


@pytest.fixture
def probe_run(probe_recorded: Path, tmp_path: Path) -> Path:
    return fresh(probe_recorded, tmp_path)


@pytest.fixture
def sdk_run(sdk_recorded: Path, tmp_path: Path) -> Path:
    return fresh(sdk_recorded, tmp_path)


# --- strict --------------------------------------------------------------------------------


def test_strict_changed_prompt_example_agent_stops_at_first_request(agent_run, tmp_path):
    done = wiretape("replay", str(agent_run), "--json", "--", *AGENT, "How many pears are there?",
                    cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    verdict = json_tail(done.stdout)
    assert verdict["mode"] == "strict"
    assert (verdict["recorded"], verdict["exact"], verdict["diverged"], verdict["missing"],
            verdict["unused"]) == (3, 0, 1, 0, 2)
    assert verdict["unused_seqs"] == [1, 2]
    assert verdict["pass"] is False and verdict["exit_code"] == 3
    # the replay log: exactly one request, the first, rejected, on its body
    assert len(verdict["requests"]) == 1
    row = verdict["requests"][0]
    assert (row["index"], row["kind"], row["seq"], row["served"]) == (0, "diverged", 0, False)
    assert row["target"] == "/v1/chat/completions"
    assert row["detail"]["fields"] == ["body"]
    assert row["detail"]["body_bytes_differ"] > 0
    assert "diverged" in verdict["outcome"]["stopped"]["reason"]
    # the agent never got an answer: nothing on stdout (before the verdict
    # JSON, whose stdout diff quotes the recorded answer), a failing exit status
    assert ANSWER not in done.stdout[: done.stdout.index('{\n  "run_id"')]
    assert verdict["outcome"]["exit_status"]["replayed"] != 0
    assert verdict["outcome"]["stdout"]["same"] is False
    line = verdict_line(done.stderr)
    assert line.startswith("wiretape: verdict FAIL (strict)")
    assert "diverged 1" in line and "unused 2" in line
    # and what the run file says afterwards is the same verdict
    assert stored_verdict(agent_run)["requests"] == verdict["requests"]


@pytest.mark.slow  # a long scenario: make test-slow
def test_strict_divergence_gives_a_final_provider_error_and_stops_the_group(sdk_run, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    done = wiretape("replay", str(sdk_run), "--", sys.executable, PROBE, "a changed prompt",
                    "--grandchild", str(pidfile), "--wait-term", "10", cwd=tmp_path)
    grandchild = int(pidfile.read_text())
    try:
        assert done.returncode == 3, done.stderr
        seen = probe_output(done.stdout)
        error = seen["error"]
        # the SDK surfaced it as an ordinary API error: 4xx, OpenAI error shape, not retryable
        assert error["class"] == "BadRequestError"
        assert 400 <= error["status"] < 500
        assert error["should_retry"] == "false"
        assert error["wiretape_error"] == "replay_diverged"
        assert error["body"]["type"] == "wiretape_error"
        assert error["body"]["code"] == "replay_diverged"
        assert "wiretape" in error["body"]["message"]
        assert "does not match recorded exchange #0" in error["body"]["message"]
        # ... and did not retry: one attempt on the client, one row in the replay log
        assert seen["attempts"] == 1
        assert seen["answers"] == []
        verdict = stored_verdict(sdk_run)
        assert [(r["kind"], r["seq"], r["served"]) for r in verdict["requests"]] == [
            ("diverged", 0, False)]
        # the stop reached the agent, and the rest of its process group is gone
        assert seen["sigterm"] is True
        assert wait_gone(grandchild), f"grandchild {grandchild} survived the strict stop"
    finally:
        kill_quietly(grandchild)


def test_strict_one_request_more_than_recorded_is_missing_and_stops(probe_run, tmp_path):
    done = wiretape("replay", str(probe_run), "--json", "--", sys.executable, PROBE, "hello",
                    "--count", "3", "--raw", "--wait-term", "10", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    verdict = json_tail(done.stdout)
    assert (verdict["recorded"], verdict["exact"], verdict["diverged"], verdict["missing"],
            verdict["unused"], verdict["reused"]) == (2, 2, 0, 1, 0, 2)
    assert [(r["kind"], r["seq"], r["served"]) for r in verdict["requests"]] == [
        ("exact", 0, True), ("exact", 1, True), ("missing", None, False)]
    assert "missing" in verdict["outcome"]["stopped"]["reason"]
    seen = probe_output(done.stdout)
    assert seen["answers"] == ["first answer", "second answer"]
    assert seen["error"]["status"] == 400
    assert seen["error"]["should_retry"] == "false"
    assert seen["error"]["body"]["code"] == "replay_missing"
    assert seen["attempts"] == 3
    assert seen["sigterm"] is True
    assert "missing 1" in verdict_line(done.stderr)


def test_strict_one_request_fewer_than_recorded_leaves_one_unused(probe_run, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    done = wiretape("replay", str(probe_run), "--json", "--", sys.executable, PROBE, "hello",
                    "--count", "1", "--raw", "--grandchild", str(pidfile), cwd=tmp_path)
    grandchild = int(pidfile.read_text())
    try:
        assert done.returncode == 3, done.stderr
        verdict = json_tail(done.stdout)
        assert (verdict["recorded"], verdict["exact"], verdict["diverged"], verdict["missing"],
                verdict["unused"]) == (2, 1, 0, 0, 1)
        assert verdict["unused_seqs"] == [1]
        assert verdict["exchanges_pass"] is False
        assert "stopped" not in verdict["outcome"]
        assert probe_output(done.stdout) == {"answers": ["first answer"], "attempts": 1,
                                             "error": None}
        assert "unused 1" in verdict_line(done.stderr)
        # nothing was stopped, so the process group was left alone (the control
        # for the strict-stop test above)
        assert not process_gone(grandchild)
    finally:
        kill_quietly(grandchild)


def test_strict_same_requests_pass(probe_run, tmp_path):
    done = wiretape("replay", str(probe_run), "--json", "--", sys.executable, PROBE, "hello",
                    "--count", "2", "--raw", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    verdict = json_tail(done.stdout)
    assert (verdict["exact"], verdict["unused"], verdict["pass"]) == (2, 0, True)
    assert verdict_line(done.stderr).startswith("wiretape: verdict PASS (strict)")


# --- diagnostic ----------------------------------------------------------------------------


@pytest.mark.slow  # a long scenario: make test-slow
def test_diagnostic_changed_prompt_goes_on_and_labels_every_request(agent_run, tmp_path):
    done = wiretape("replay", "--diagnostic", str(agent_run), "--json", "--", *AGENT,
                    "How many pears are there?", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    verdict = json_tail(done.stdout)
    assert verdict["mode"] == "diagnostic"
    assert verdict["complete"] is True
    assert [(r["index"], r["kind"], r["seq"], r["served"]) for r in verdict["requests"]] == [
        (0, "diverged", 0, True), (1, "diverged", 1, True), (2, "diverged", 2, True)]
    assert all(r["detail"]["fields"] == ["body"] for r in verdict["requests"])
    assert (verdict["exact"], verdict["diverged"], verdict["missing"], verdict["unused"]) == (
        0,
        3,
        0,
        0,
    )
    assert "stopped" not in verdict["outcome"]
    # the agent was served the recording all the way to its answer
    assert ANSWER in done.stdout
    assert verdict["outcome"]["exit_status"]["same"] is True
    assert verdict["pass"] is False
    line = verdict_line(done.stderr)
    assert "PASS" not in line
    assert line.startswith("wiretape: verdict FAIL (diagnostic)")


def test_diagnostic_missing_request_is_answered_with_an_error_and_the_replay_goes_on(
    probe_run, tmp_path
):
    done = wiretape("replay", "--diagnostic", str(probe_run), "--json", "--", sys.executable,
                    PROBE, "hello", "--count", "3", "--raw", "--wait-term", "1", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    verdict = json_tail(done.stdout)
    assert [r["kind"] for r in verdict["requests"]] == ["exact", "exact", "missing"]
    assert (verdict["missing"], verdict["unused"]) == (1, 0)
    assert "stopped" not in verdict["outcome"]
    seen = probe_output(done.stdout)
    assert seen["error"]["body"]["code"] == "replay_missing"
    assert seen["sigterm"] is False  # diagnostic does not stop the agent
    assert "PASS" not in verdict_line(done.stderr)


def test_diagnostic_all_exact_is_a_pass(probe_run, tmp_path):
    done = wiretape("replay", "--diagnostic", str(probe_run), "--json", "--", sys.executable,
                    PROBE, "hello", "--count", "2", "--raw", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    verdict = json_tail(done.stdout)
    assert [r["kind"] for r in verdict["requests"]] == ["exact", "exact"]
    assert verdict["pass"] is True
    assert verdict_line(done.stderr).startswith("wiretape: verdict PASS (diagnostic)")
