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
@pytest.mark.slow  # a long scenario: make test-slow
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
@pytest.mark.slow  # a long scenario: make test-slow
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
def test_offline_a_tool_cannot_fetch_and_the_names_are_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A minute turning over between recording and replay would change the prompt.
    monkeypatch.setenv("CONTEXT_AGENT_NOW", "2025-01-02T03:04Z")
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
@pytest.mark.slow  # a long scenario: make test-slow
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


VENV_AGENT = '''\
"""An agent as a project keeps one: run by the project's own interpreter
(.venv/bin/python), with a package installed only there and a module of
its own beside it. It appends to a log inside .venv, which a replay must
not let it change."""
import json, os, urllib.request

import fruitbasket  # in .venv only
import helpers  # beside this file

try:
    with open(os.path.join(".venv", "agent-runs.log"), "a") as log:
        log.write("ran\\n")
except OSError:
    pass
body = json.dumps({"model": "gpt-4o-mini",
                   "messages": [{"role": "user", "content": helpers.prompt(fruitbasket.COUNT)}]})
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
    headers={"content-type": "application/json",
             "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "none")})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(request) as response:
    answer = json.load(response)["choices"][0]["message"]["content"]
print(answer)
with open("answer.txt", "w") as out:
    out.write(answer + "\\n")
'''


@pytest.fixture
def venv_project(tmp_path: Path) -> tuple[Path, Path]:
    """The README's layout: a project with its own ``.venv`` (made with
    ``python -m venv``), recorded as ``.venv/bin/python agent.py``."""
    work = tmp_path / "project"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / ".venv")],
                   check=True, timeout=60)
    packages = subprocess.run(
        [str(work / ".venv" / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    (Path(packages) / "fruitbasket").mkdir(parents=True)
    (Path(packages) / "fruitbasket" / "__init__.py").write_text("COUNT = 42\n")
    (work / "helpers.py").write_text("def prompt(n):\n    return f'How many? I see {n}.'\n")
    (work / "agent.py").write_text(VENV_AGENT)
    run = tmp_path / "run.wtape"
    with FakeProvider([TextTurn("forty-two")]) as fp:
        done = wiretape("record", "-o", str(run), "--upstream", f"openai={fp.url}/v1", "--",
                        ".venv/bin/python", "agent.py", cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "answer.txt").read_text() == "forty-two\n"
    assert (work / ".venv" / "agent-runs.log").read_text() == "ran\n"
    return work, run


@needs_mount_ns
def test_the_readme_layout_replays_with_its_virtualenv_read_only(venv_project) -> None:  # type: ignore[no-untyped-def]
    """``wiretape replay RUN`` with no flags passes: the project's .venv,
    left out of the snapshot, is shown read-only at its place; mapped
    paths show it read-only inside the sandbox copy."""
    work, run = venv_project
    before = checksums(work / ".venv")
    for flags in ([], ["--no-same-paths"]):
        done = wiretape("replay", str(run), *flags, cwd=work)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "forty-two\n"
        v = verdict(run, work)
        assert (v["recorded"], v["exact"], v["pass"]) == (1, 1, True), done.stderr
        assert v["outcome"]["files"]["same"] is True
        assert v["outcome"]["sandbox"]["paths"] == ("mapped" if flags else "same-paths")
        assert checksums(work / ".venv") == before  # the agent could not append to its log


@pytest.mark.slow  # a long scenario: make test-slow
def test_an_agent_that_fails_in_a_replay_is_named_with_its_stderr(venv_project) -> None:  # type: ignore[no-untyped-def]
    work, run = venv_project
    runs = work.parent / "runs"
    runs.mkdir()
    shutil.copy(run, runs / "run.wtape")
    # The package is gone from the project's .venv: the agent cannot start.
    shutil.rmtree(next((work / ".venv").rglob("fruitbasket")))
    done = wiretape("replay", str(run), cwd=work)
    assert done.returncode == 3, done.stderr  # its request never came
    lines = done.stderr.splitlines()
    at = lines.index("exit status: recorded 0, replay 1")
    assert lines[at + 1] == "  the agent exited with status 1: .venv/bin/python agent.py"
    assert lines[at + 2] == "  the agent's stderr:"
    assert "    ModuleNotFoundError: No module named 'fruitbasket'" in lines[at + 3:]
    checked = wiretape("check", "--yes", str(runs), cwd=work)
    assert checked.returncode == 1
    assert "  the agent exited with status 1: .venv/bin/python agent.py" in checked.stdout
    assert "    ModuleNotFoundError: No module named 'fruitbasket'" in checked.stdout
    # Without the .venv the command is not there at all: one line says why.
    shutil.rmtree(work / ".venv")
    done = wiretape("replay", str(run), cwd=work)
    assert done.returncode == 2
    why = (f"wiretape: error: cannot run command '.venv/bin/python': .venv is never "
           f"snapshotted, and {work / '.venv'} does not exist here: make it as it was when "
           "recording, or give the command after --")
    assert done.stderr.splitlines() == [why]
    checked = wiretape("check", "--yes", str(runs), cwd=work)
    assert checked.returncode == 1
    assert why.replace("wiretape: error: ", "") in checked.stdout
