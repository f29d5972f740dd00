"""The replay sandbox end to end: the recorded state restored, the user's
directory untouched, same paths by default, mapped paths as a declared
substitution, the recorded clock, and --offline."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wiretape.launch import isolate
from wiretape.testing import FakeProvider, TextTurn

AGENT = Path(__file__).parent / "clients_sandbox" / "context_agent.py"
CAPS = isolate.capabilities()
needs_mount_ns = pytest.mark.skipif(not CAPS.mount_namespaces,
                                    reason=CAPS.reasons.get("mount_namespaces", ""))
needs_faketime = pytest.mark.skipif(CAPS.faketime is None, reason=CAPS.reasons.get("faketime", ""))
needs_net_ns = pytest.mark.skipif(not CAPS.network_namespaces,
                                  reason=CAPS.reasons.get("network_namespaces", ""))

pytestmark = pytest.mark.timeout(120)


def wiretape(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=90, stdin=subprocess.DEVNULL)


def checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def agent_clock() -> str | None:
    """The time the agent puts in its prompt (``CONTEXT_AGENT_NOW``), for
    recording and every replay; None: it reads its own clock. A test about
    paths pins it with ``@pytest.mark.parametrize("agent_clock", [...])``."""
    return None


@pytest.fixture
def project(tmp_path: Path, agent_clock: str | None,
            monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project directory with a file, recorded with the agent run in it."""
    if agent_clock is None:
        monkeypatch.delenv("CONTEXT_AGENT_NOW", raising=False)
    else:
        monkeypatch.setenv("CONTEXT_AGENT_NOW", agent_clock)
    work = tmp_path / "project"
    work.mkdir()
    (work / "notes.txt").write_text("state before the run\n")
    run = tmp_path / "run.wtape"
    with FakeProvider([TextTurn("the answer")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, str(AGENT), cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "answer.txt").read_text() == "the answer\n"
    return work, run


def verdict(run: Path, cwd: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(wiretape("verdict", str(run), "--json", cwd=cwd).stdout)


@needs_mount_ns
@needs_faketime
def test_same_paths_and_recorded_clock_give_exact_and_leave_the_project_alone(project) -> None:  # type: ignore[no-untyped-def]
    work, run = project
    (work / "answer.txt").unlink()  # the user moves on: the state is no longer the recorded one
    (work / "notes.txt").write_text("edited since\n")
    before = checksums(work)
    done = wiretape("replay", str(run), "--clock", "recorded", cwd=work.parent)
    v = verdict(run, work.parent)
    assert done.returncode == 0, done.stderr
    assert (v["exact"], v["recorded"], v["outcome"]["files"]["same"]) == (1, 1, True)
    assert v["outcome"]["sandbox"]["paths"] == "same-paths"
    assert checksums(work) == before  # the agent wrote answer.txt in the sandbox only


# The prompt's time is pinned: a minute turning over between the recording and
# the replay would add a timestamp difference and make the request diverged.
@pytest.mark.parametrize("agent_clock", ["2025-01-02T03:04Z"])
def test_mapped_paths_count_as_substituted_and_name_the_path(project) -> None:  # type: ignore[no-untyped-def]
    work, run = project
    done = wiretape("replay", str(run), "--no-same-paths", "--diagnostic", cwd=work.parent)
    v = verdict(run, work.parent)
    assert done.returncode == 3  # substituted is not exact
    assert (v["exact"], v["substituted"], v["diverged"], v["missing"]) == (0, 1, 0, 0)
    detail = v["requests"][0]["detail"]
    (old, new, count), = detail["substitutions"]
    assert old == str(work) and count == 1
    assert new != old and Path(new).name.endswith(work.name)  # the sandbox copy of the project
    assert [(s["kind"], s["pointer"]) for s in detail["explanation"]["spans"]] == [
        ("path", "/messages/0/content")]  # the path is the only difference, and it is named
    assert "paths are mapped into the sandbox" in done.stderr
    assert f"absolute path differs at /messages/0/content: \"{work}." in done.stderr
    assert "absolute paths in its own files" in done.stderr
    allowed = wiretape("replay", str(run), "--no-same-paths", "--allow-substitutions",
                       cwd=work.parent)
    assert allowed.returncode == 0, allowed.stderr  # exchanges pass and the outcome is the same


@needs_mount_ns
@needs_faketime
def test_another_clock_diverges_and_the_timestamp_is_named(project) -> None:  # type: ignore[no-untyped-def]
    work, run = project
    faketime = shutil.which("faketime")
    if faketime is None:
        pytest.skip("the faketime command is not installed")
    # The agent runs with its clock an hour ahead: the prompt's time differs.
    done = wiretape("replay", str(run), "--diagnostic", "--", faketime, "-f", "+1h",
                    sys.executable, str(AGENT), cwd=work)
    v = verdict(run, work)
    assert done.returncode == 3
    spans = v["requests"][0]["detail"]["explanation"]["spans"]
    assert [s["kind"] for s in spans] == ["timestamp"]
    assert "timestamp differs at /messages/0/content" in done.stderr


@needs_mount_ns
@needs_net_ns
def test_offline_a_tool_cannot_fetch_and_the_names_are_reported(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    run = tmp_path / "run.wtape"
    url = "http://wiretape-offline-check.example/"
    with FakeProvider([TextTurn("ok")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        sys.executable, str(AGENT), url, cwd=work)
    assert done.returncode == 0, done.stderr
    replayed = wiretape("replay", str(run), "--offline", cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith("fetch failed:")
    v = verdict(run, tmp_path)
    assert "wiretape-offline-check.example" in v["outcome"]["isolation"]["dns_queries"]
    assert "the agent tried to reach: wiretape-offline-check.example" in replayed.stderr
    assert "network: only loopback" in replayed.stderr


@needs_mount_ns
def test_a_virtualenv_left_out_of_the_snapshot_is_there_in_the_replay(tmp_path: Path) -> None:
    """The agent's own interpreter and packages live in ``.venv``, which
    snapshots leave out: a same-paths replay shows it read-only where it was,
    so the command that ran when recording runs again."""
    work = tmp_path / "project"
    (work / ".venv").mkdir(parents=True)
    shutil.copy(AGENT, work / ".venv" / "agent.py")
    run = tmp_path / "run.wtape"
    env_now = {"CONTEXT_AGENT_NOW": "a fixed time"}
    with FakeProvider([TextTurn("the answer")]) as fp:
        done = subprocess.run(
            [sys.executable, "-m", "wiretape", "record", "-o", str(run), "--upstream",
             f"openai={fp.url}/v1", "--", sys.executable, ".venv/agent.py"],
            cwd=work, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
            env={**os.environ, **env_now})
    assert done.returncode == 0, done.stderr
    before = checksums(work / ".venv")
    replayed = subprocess.run([sys.executable, "-m", "wiretape", "replay", str(run)], cwd=work,
                              capture_output=True, text=True, timeout=90,
                              stdin=subprocess.DEVNULL, env={**os.environ, **env_now})
    assert replayed.returncode == 0, replayed.stderr
    assert "verdict PASS" in replayed.stderr and "exact 1" in replayed.stderr
    assert checksums(work / ".venv") == before
