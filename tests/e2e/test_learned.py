"""Learned correspondences end to end (issue: agents that stamp each run
with their own ids, clock readings and key orders): a real agent process
recorded against the fake provider, replayed with the provider gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wiretape.testing import FakeProvider, TextTurn

AGENT = str(Path(__file__).resolve().parent / "clients_learned" / "stamping_agent.py")
_SCRUB = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
          "http_proxy", "https_proxy", "all_proxy", "WIRETAPE_HOME")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update(OPENAI_API_KEY="sk-learned-test", PYTHONUNBUFFERED="1", NO_PROXY="127.0.0.1")
    return out


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=120)


def verdict_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("wiretape: verdict "))


def verdict_json(stdout: str) -> dict[str, Any]:
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    parsed: dict[str, Any] = json.loads("\n".join(lines[start:]))
    return parsed


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("project")
    with FakeProvider([TextTurn("hello one"), TextTurn("hello two")]) as fp:
        done = wiretape("record", "-o", "run.wtape", "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, AGENT, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello one\nhello two\n"
    return project


def test_without_allowances_strict_fails_naming_the_first_divergence(recorded: Path) -> None:
    done = wiretape("replay", "--yes", "run.wtape", cwd=recorded)
    assert done.returncode == 3, done.stderr
    line = verdict_line(done.stderr)
    assert "FAIL (strict)" in line and "diverged 1" in line and "equivalent" not in line
    assert "equal up to clock,ids" in done.stderr
    assert "/metadata/user_id#/session_id" in done.stderr


def test_with_allowances_strict_passes_and_names_every_rule(recorded: Path) -> None:
    done = wiretape("replay", "--yes", "--json", "--allow", "ids,clock", "--allow", "key-order",
                    "run.wtape", cwd=recorded)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hello one\nhello two\n")
    verdict = verdict_json(done.stdout)
    assert (verdict["exact"], verdict["equivalent"], verdict["diverged"], verdict["pass"]) == (
        0, 2, 0, True)
    rules = {entry["rule"]: entry for entry in verdict["rules"]}
    assert {"ids", "clock"} <= set(rules)
    assert "/metadata/user_id#/session_id" in rules["ids"]["pointers"]
    assert "target" in rules["ids"]["pointers"]
    assert rules["clock"]["pointers"] == ["/metadata/sent_at"] and "shift_s" in rules["clock"]
    assert "equivalent 2 (ids, clock" in verdict_line(done.stderr)
    # The outcome by the same rules: the session log, named by the session
    # id and full of fresh ids and times, is the recorded one.
    files = verdict["outcome"]["files"]
    assert files["same"] is True and len(files["paired"]) == 1
    recorded_name, replayed_name = files["paired"][0]
    assert recorded_name.startswith("sessions/") and recorded_name != replayed_name
    assert "ids" in files["volatile"][0]["values"]
    assert verdict["outcome"]["stdout"]["same"] is True


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_broken_correspondence_fails_even_when_allowed(tmp_path: Path) -> None:
    with FakeProvider([TextTurn("hello one"), TextTurn("hello two")]) as fp:
        done = wiretape("record", "-o", "run.wtape", "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, AGENT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = wiretape("replay", "--yes", "--allow", "ids,clock,key-order", "run.wtape", "--",
                    sys.executable, AGENT, "break", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    line = verdict_line(done.stderr)
    assert "equivalent 1" in line and "diverged 1" in line


def test_allowances_from_the_project_config_and_outcome_ignore(recorded: Path) -> None:
    config = recorded / "wiretape.toml"
    config.write_text('allow = ["ids", "clock", "key-order"]\noutcome-ignore = ["sessions/*"]\n')
    try:
        done = wiretape("replay", "--yes", "--json", "run.wtape", cwd=recorded)
    finally:
        config.unlink()
    assert done.returncode == 0, done.stderr
    verdict = verdict_json(done.stdout)
    assert verdict["allow"] == ["clock", "ids", "key-order"] and verdict["pass"] is True
    assert all(path.startswith("sessions") for path in verdict["outcome"]["files"]["ignored"])
    assert f"settings from {config}" in done.stderr
    assert "files left out of the outcome (outcome-ignore): sessions" in done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_allowances_recorded_with_the_run(tmp_path: Path) -> None:
    with FakeProvider([TextTurn("hello one"), TextTurn("hello two")]) as fp:
        done = wiretape("record", "--allow", "ids,clock,key-order", "-o", "run.wtape",
                        "--upstream", f"openai={fp.url}/v1", "--", sys.executable, AGENT,
                        cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = wiretape("replay", "--yes", "run.wtape", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "PASS (strict)" in verdict_line(done.stderr)


@pytest.mark.parametrize(("files", "args", "message"), [
    ({}, ("--allow", "ids,uuids"),
     "wiretape: error: unknown allowance 'uuids' in --allow: expected some of ids, clock, "
     "key-order, durations, paths"),
    ({"wiretape.toml": "allow = [ids"}, (), "wiretape.toml is not valid TOML"),
    ({"pyproject.toml": '[tool.wiretape]\nallow = "ids"\n'}, (),
     "allow in [tool.wiretape] of "),
    ({"pyproject.toml": '[tool.wiretape]\nallowed = ["ids"]\n'}, (),
     "unknown key 'allowed' in [tool.wiretape] of "),
])
def test_bad_settings_are_one_line(recorded: Path, tmp_path: Path, files: dict[str, str],
                                   args: tuple[str, ...], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = wiretape("replay", "--yes", *args, str(recorded / "run.wtape"), "--", "true",
                    cwd=tmp_path)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("wiretape: error")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_an_outcome_ignore_that_matches_nothing_is_said(recorded: Path) -> None:
    done = wiretape("replay", "--yes", "--allow", "ids,clock,key-order", "--outcome-ignore",
                    "nothing/*", "run.wtape", cwd=recorded)
    assert done.returncode == 0, done.stderr
    assert ("wiretape: --outcome-ignore 'nothing/*' matched no file the agent changed"
            in done.stderr)


def test_wiretapes_own_redirected_output_is_not_the_agents_change(tmp_path: Path) -> None:
    # `wiretape record -- agent > log.txt` in the project: the shell made
    # log.txt and wiretape wrote it; the agent changed only its session log.
    from wiretape.store.runfile import open_run

    (tmp_path / "notes.txt").write_text("kept\n")
    with FakeProvider([TextTurn("hello one"), TextTurn("hello two")]) as fp, \
            (tmp_path / "log.txt").open("w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "wiretape", "record", "-o", "run.wtape", "--upstream",
             f"openai={fp.url}/v1", "--", sys.executable, AGENT],
            cwd=tmp_path, env=env(), stdout=log, stderr=log, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "log.txt").read_text().startswith("hello one\nhello two\n")
    run = open_run(tmp_path / "run.wtape")
    snapshotted = [e.path for _, _, entries in run.snapshots() for e in entries]
    changed = [c["path"] for rows in run.outcome_changes().values() for c in rows]
    run.close()
    assert snapshotted == ["notes.txt"]
    assert "log.txt" not in changed and any(p.startswith("sessions/") for p in changed)


def test_an_agent_that_ends_mid_line_on_stderr_does_not_run_into_the_verdict(
        recorded: Path) -> None:
    done = wiretape("replay", "--yes", "run.wtape", "--", sys.executable, "-c",
                    "import sys; sys.stderr.write('half a line'); sys.exit(1)", cwd=recorded)
    assert done.returncode == 3
    assert "half a line\nwiretape: verdict FAIL" in done.stderr
