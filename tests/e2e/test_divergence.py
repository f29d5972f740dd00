"""Divergences explain themselves end to end: a path and a timestamp are
named as such, a declared substitution counts as substituted (never exact),
concurrent streams in another order still match exactly, and `wiretape diff`
compares two recordings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wiretape.testing import FakeProvider, TextTurn

CLIENTS = Path(__file__).parent / "clients_divergence"
PATH_A, PATH_B = "/home/alice/project", "/srv/sandbox/project"
TIME_A, TIME_B = "2026-11-29T10:00:00Z", "2026-11-29T10:05:13Z"

pytestmark = pytest.mark.timeout(120)


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def verdict(run: Path, cwd: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(wiretape("verdict", str(run), "--json", cwd=cwd).stdout)


@pytest.fixture
def prompt_run(tmp_path: Path) -> Path:
    run = tmp_path / "prompt.wtape"
    with FakeProvider([TextTurn("hi there")]) as fp:
        done = wiretape(
            "record",
            "-o",
            str(run),
            "--upstream",
            f"openai={fp.url}/v1",
            "--",
            sys.executable,
            str(CLIENTS / "prompt_client.py"),
            PATH_A,
            TIME_A,
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "200 hi there\n"
    return run


def replay_prompt(
    run: Path, cwd: Path, path: str, moment: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    return wiretape("replay", str(run), *flags, "--", sys.executable,
                    str(CLIENTS / "prompt_client.py"), path, moment, cwd=cwd)


def only_span(v: dict) -> dict:  # type: ignore[type-arg]
    (row,) = v["requests"]
    spans = row["detail"]["explanation"]["spans"]
    assert len(spans) == 1, spans
    return spans[0]


def test_a_changed_absolute_path_is_kind_path(prompt_run: Path, tmp_path: Path) -> None:
    done = replay_prompt(prompt_run, tmp_path, PATH_B, TIME_A, "--diagnostic")
    assert done.returncode == 3
    span = only_span(verdict(prompt_run, tmp_path))
    assert (span["kind"], span["pointer"]) == ("path", "/messages/0/content")
    assert span["recorded"] == PATH_A and span["live"] == PATH_B
    assert "path differs at /messages/0/content" in done.stderr


def test_a_changed_timestamp_is_kind_timestamp(prompt_run: Path, tmp_path: Path) -> None:
    done = replay_prompt(prompt_run, tmp_path, PATH_A, TIME_B, "--diagnostic")
    assert done.returncode == 3
    span = only_span(verdict(prompt_run, tmp_path))
    assert (span["kind"], span["pointer"]) == ("timestamp", "/messages/0/content")
    assert span["recorded"] == TIME_A and span["live"] == TIME_B


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_declared_substitution_is_substituted_not_exact(prompt_run: Path, tmp_path: Path) -> None:
    sub = f"--substitute={PATH_A}={PATH_B}"
    strict = replay_prompt(prompt_run, tmp_path, PATH_B, TIME_A, sub)
    assert strict.returncode == 3  # strict accepts substitutions only when allowed
    v = verdict(prompt_run, tmp_path)
    assert (v["exact"], v["substituted"], v["pass"]) == (0, 1, False)
    allowed = replay_prompt(prompt_run, tmp_path, PATH_B, TIME_A, sub, "--allow-substitutions")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout == "200 hi there\n"
    v = verdict(prompt_run, tmp_path)
    assert (v["exact"], v["substituted"], v["pass"]) == (0, 1, True)
    (row,) = v["requests"]
    assert row["detail"]["substitutions"] == [[PATH_A, PATH_B, 1]]
    assert "substitution" in allowed.stderr and "fired 1 time" in allowed.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_concurrent_streams_in_swapped_order_are_both_exact(tmp_path: Path) -> None:
    run = tmp_path / "two.wtape"
    client = [sys.executable, str(CLIENTS / "two_streams.py")]
    with FakeProvider([TextTurn("one two three"), TextTurn("four five six")], delay=0.05) as fp:
        live = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        *client, "a", "b", cwd=tmp_path)
    assert live.returncode == 0, live.stderr
    assert live.stdout == "['a:one two three', 'b:four five six']\n"
    replayed = wiretape("replay", str(run), "--", *client, "b", "a", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == live.stdout
    v = verdict(run, tmp_path)
    assert (v["recorded"], v["exact"], v["pass"]) == (2, 2, True)
    assert [r["seq"] for r in v["requests"]] == [1, 0]  # b arrived first and got b's answer


@pytest.mark.slow  # a long scenario: make test-slow
def test_diff_of_two_recordings_names_what_changed(prompt_run: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.wtape"
    with FakeProvider([TextTurn("hi there")]) as fp:
        assert wiretape("record", "-o", str(other), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, str(CLIENTS / "prompt_client.py"), PATH_A, TIME_B,
                        cwd=tmp_path).returncode == 0
    same = wiretape("diff", str(prompt_run), str(prompt_run), cwd=tmp_path)
    assert same.returncode == 0 and "1 same, 0 differ" in same.stdout
    changed = wiretape("diff", str(prompt_run), str(other), "--json", cwd=tmp_path)
    assert changed.returncode == 1
    result = json.loads(changed.stdout)
    assert result["summary"] == {"pairs": 1, "same": 0, "differ": 1, "only_a": 0, "only_b": 0}
    (span,) = result["pairs"][0]["explanation"]["spans"]
    assert (span["kind"], span["recorded"], span["live"]) == ("timestamp", TIME_A, TIME_B)
