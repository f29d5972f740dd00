"""Real nanobot (nanobot-ai 0.3.5) recorded through wiretape against the
scripted fake provider, then replayed with the provider stopped.

nanobot pins its origin in config.json (``providers.custom.apiBase``), so
the recording uses a fixed ``--port`` and the config names it; the replay
reuses the recorded port, so the config needs no edit. nanobot exits 0 even
when a model call fails, so its stdout is checked, not only its status.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import nanobot_support as ns
import pytest

from wiretape.launch import isolate
from wiretape.store import open_run
from wiretape.testing import FakeProvider

pytestmark = pytest.mark.timeout(240)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wiretape(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def verdict(run: Path, env: dict[str, str], cwd: Path) -> dict[str, object]:
    out = wiretape("verdict", str(run), "--json", env=env, cwd=cwd)
    return json.loads(out.stdout)


def record_scene(
    tmp_path: Path, *snapshot: str
) -> tuple[ns.NanobotScene, Path, subprocess.CompletedProcess[str]]:
    port = free_port()
    run = tmp_path / "nanobot.wtape"
    with FakeProvider(ns.session_script()) as fp:
        scene = ns.make_scene(tmp_path / "scene", f"http://127.0.0.1:{port}/v1")
        # Only the workspace is snapshotted: nanobot's config directory holds
        # session files stamped with the time, which the scene resets itself.
        result = wiretape("record", "-o", str(run), "--upstream", f"custom={fp.url}/v1",
                          "--port", str(port),
                          *(snapshot or ("--snapshot", str(scene.workspace))), "--",
                          *scene.argv(), env=scene.env(), cwd=scene.root)
        assert len(fp.requests) == 4
    return scene, run, result


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[ns.NanobotScene, Path, subprocess.CompletedProcess[str]]:
    """A session recorded with its workspace snapshotted: replays restore it."""
    return record_scene(tmp_path)


@pytest.fixture
def recorded_live(tmp_path: Path) -> tuple[ns.NanobotScene, Path, subprocess.CompletedProcess[str]]:
    """A session recorded without a snapshot: replays run against the live
    workspace, so a file changed there reaches the agent's tool."""
    return record_scene(tmp_path, "--no-snapshot")


def test_nanobot_session_recorded_then_replayed_offline(recorded) -> None:  # type: ignore[no-untyped-def]
    scene, run, live = recorded
    assert live.returncode == 0, live.stderr
    assert ns.model_error(live.stdout) is None, live.stdout
    answer = ns.final_answer(live.stdout)
    assert ns.EXPECTED_QUOTE in answer
    assert ns.tool_hints(live.stdout) == ["read notes.txt", "ls docs", "read docs/plan.md"]
    assert "recorded run_" in live.stderr and "4 exchanges" in live.stderr

    # The provider is gone. Lay the scene out as it was before recording
    # (fresh config dir, so no session history is resent) and replay the
    # recorded command in the recorded directory.
    scene.reset()
    replayed = wiretape("replay", str(run), env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 0, replayed.stderr
    assert ns.model_error(replayed.stdout) is None, replayed.stdout
    assert ns.final_answer(replayed.stdout) == answer
    assert replayed.stdout == live.stdout
    v = verdict(run, scene.env(), scene.root)
    assert (v["recorded"], v["exact"], v["missing"], v["unused"], v["pass"]) == (4, 4, 0, 0, True)
    assert v["outcome"]["files"]["same"] is True
    assert v["outcome"]["sandbox"]["paths"] == ("same-paths" if same_paths_here() else "mapped")


@pytest.mark.slow  # a long scenario: make test-slow
def test_nanobot_replay_restores_the_workspace_and_leaves_the_original_alone(recorded) -> None:  # type: ignore[no-untyped-def]
    """The config names the workspace by absolute path; the replay restores
    the recorded workspace into a sandbox shown at that path, so the agent
    reads the recorded file, and the user's workspace is left byte-identical
    (here: changed after recording, and still changed afterwards)."""
    scene, run, live = recorded
    if not same_paths_here():
        pytest.skip(
            "mount namespaces are not available here: "
            + isolate.capabilities().reasons.get("mount_namespaces", "")
        )
    scene.reset()  # a fresh config directory: no session history is resent
    scene.notes.write_text("edited after recording\n")
    before = {p: p.read_bytes() for p in scene.workspace.rglob("*") if p.is_file()}
    replayed = wiretape("replay", str(run), env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 0, replayed.stderr
    assert ns.final_answer(replayed.stdout) == ns.final_answer(live.stdout)
    after = {p: p.read_bytes() for p in scene.workspace.rglob("*") if p.is_file()}
    assert after == before


def same_paths_here() -> bool:
    return isolate.capabilities().mount_namespaces


@pytest.mark.slow  # a long scenario: make test-slow
def test_nanobot_changed_workspace_file_is_caught_in_strict_mode(recorded_live) -> None:  # type: ignore[no-untyped-def]
    scene, run, live = recorded_live
    assert live.returncode == 0
    scene.reset()
    scene.notes.write_text(scene.notes.read_text().replace("PELICAN-42", "HERON-7"))
    replayed = wiretape("replay", str(run), env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 3, replayed.stderr
    # Strict mode stopped the agent at the mismatch: no final answer.
    assert ns.EXPECTED_QUOTE not in replayed.stdout
    assert "stopped at diverged request POST /v1/chat/completions" in replayed.stderr
    v = verdict(run, scene.env(), scene.root)
    assert (v["exact"], v["diverged"], v["pass"]) == (1, 1, False)
    assert v["outcome"]["stopped"]["reason"].startswith("diverged")
    assert v["requests"][1]["kind"] == "diverged"
    assert "body" in v["requests"][1]["detail"]["fields"]


@pytest.mark.slow  # a long scenario: make test-slow
def test_nanobot_diagnostic_names_the_tool_whose_result_changed(recorded_live) -> None:  # type: ignore[no-untyped-def]
    scene, run, live = recorded_live
    assert live.returncode == 0
    scene.reset()
    scene.notes.write_text(scene.notes.read_text().replace("PELICAN-42", "HERON-7"))
    replayed = wiretape("replay", str(run), "--diagnostic", env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 3, replayed.stderr
    v = verdict(run, scene.env(), scene.root)
    diverged = [r for r in v["requests"] if r["kind"] == "diverged"]
    assert diverged, v["requests"]
    explanation = diverged[0]["detail"]["explanation"]
    # The first request after read_file carries its result: messages are
    # [system, user, assistant(tool_calls), tool] -> the tool message is /messages/3.
    assert explanation["first_line"].startswith(
        "the result of read_file (call_fake_1_0) differs at /messages/3/content")
    span = explanation["spans"][0]
    assert span["tool"] == {"call_id": "call_fake_1_0", "name": "read_file",
                            "pointer": "/messages/3"}
    assert "PELICAN-42" in span["recorded"] and "HERON-7" in span["live"]
    assert (
        "the result of read_file (call_fake_1_0) differs at /messages/3/content" in replayed.stderr
    )


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_nanobot_writes_land_in_the_sandbox_and_in_its_outcome(tmp_path: Path) -> None:
    """The config names the workspace by absolute path; the agent writes a
    file there. The replay's sandbox takes the write (the outcome lists it,
    as the recording's did), and the user's workspace stays byte-identical."""
    if not same_paths_here():
        pytest.skip("mount namespaces are not available here")
    port = free_port()
    run = tmp_path / "write.wtape"
    with FakeProvider(ns.session_script(write_answer=True)) as fp:
        scene = ns.make_scene(tmp_path / "scene", f"http://127.0.0.1:{port}/v1")
        live = wiretape("record", "-o", str(run), "--upstream", f"custom={fp.url}/v1",
                        "--port", str(port), "--snapshot", str(scene.workspace), "--",
                        *scene.argv(), env=scene.env(), cwd=scene.root)
    assert live.returncode == 0 and ns.model_error(live.stdout) is None, live.stdout
    assert (scene.workspace / "answer.txt").read_text() == "PELICAN-42\n"
    scene.reset()
    before = {p: p.read_bytes() for p in scene.workspace.rglob("*") if p.is_file()}
    replayed = wiretape("replay", str(run), env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 0, replayed.stderr
    v = verdict(run, scene.env(), scene.root)
    assert (v["exact"], v["recorded"]) == (5, 5)
    assert v["outcome"]["files"]["same"] is True
    assert {p: p.read_bytes() for p in scene.workspace.rglob("*") if p.is_file()} == before
    assert not (scene.workspace / "answer.txt").exists()
    with open_run(run) as rf:
        (changes,) = rf.outcome_changes().values()
    assert {"path": "answer.txt", "change": "added"}.items() <= next(
        c for c in changes if c["path"] == "answer.txt").items()


def _tree_bytes(*roots: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for root in roots for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_nanobot_history_is_restored_from_the_snapshot_and_extra_history_is_named(
        tmp_path: Path) -> None:
    """nanobot keeps its session history next to its config file. Two
    recordings in a row with the same config directory: the second run
    resends the first's conversation. Replaying the second run restores the
    config directory and workspace as they were before it (exact, outcome
    same: the session file differs only in its timestamps and timings);
    replaying it against the state left after both runs sends a longer
    history, and the report names the extra messages."""
    if not same_paths_here():
        pytest.skip("mount namespaces are not available here: the config names the workspace "
                    "by absolute path, so only a same-paths sandbox keeps the original safe")
    port = free_port()
    scene = ns.make_scene(tmp_path / "scene", f"http://127.0.0.1:{port}/v1")
    runs = [tmp_path / "first.wtape", tmp_path / "second.wtape"]
    lives = []
    # One provider for both runs: its call ids go on numbering (nanobot
    # keeps one result per call id in its history).
    with FakeProvider(ns.session_script() + ns.session_script()) as fp:
        for run in runs:
            live = wiretape("record", "-o", str(run), "--upstream", f"custom={fp.url}/v1",
                            "--port", str(port), "--snapshot", str(scene.config_dir),
                            "--snapshot", str(scene.workspace), "--",
                            *scene.argv(), env=scene.env(), cwd=scene.root)
            assert live.returncode == 0 and ns.model_error(live.stdout) is None, live.stdout
            lives.append(live)
    with open_run(runs[0]) as first, open_run(runs[1]) as second:
        sent_first = json.loads(first.exchanges()[0].request.body)["messages"]
        sent_second = json.loads(second.exchanges()[0].request.body)["messages"]
    # system + the prompt; then system + the first run's 8 messages + the prompt.
    assert [m["role"] for m in sent_first] == ["system", "user"]
    assert len(sent_second) == 10 and sent_second[1] == sent_second[-1] == sent_first[-1]

    state_after_both = _tree_bytes(scene.config_dir, scene.workspace)
    history = next(scene.sessions_dir.glob("*.jsonl"))
    assert history.read_bytes().count(b'"role": "user"') == 2

    # The second run, from its own snapshot: the first run's history only.
    replayed = wiretape("replay", str(runs[1]), env=scene.env(), cwd=scene.root)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == lives[1].stdout
    v = verdict(runs[1], scene.env(), scene.root)
    assert (v["recorded"], v["exact"], v["diverged"], v["missing"], v["unused"]) == (4, 4, 0, 0, 0)
    assert v["pass"] is True
    files = v["outcome"]["files"]
    assert files["same"] is True and files["differing_count"] == 0
    # The session file was rewritten with this replay's own clock: the same
    # up to its timestamps and timings, and said so.
    (volatile,) = [f for f in files["volatile"] if f["path"].endswith(".jsonl")]
    assert "timestamp" in volatile["values"] and "duration" in volatile["values"]
    assert "files same up to timestamps and timings in 1 file(s)" in replayed.stderr, (
        replayed.stderr
    )
    assert _tree_bytes(scene.config_dir, scene.workspace) == state_after_both

    # The same run against the state both recordings left (no restore): the
    # history now holds both runs, so the first request carries 8 more messages.
    current = wiretape("replay", str(runs[1]), "--state", "current", "--diagnostic",
                       env=scene.env(), cwd=scene.root)
    assert current.returncode == 3, current.stderr
    v = verdict(runs[1], scene.env(), scene.root)
    assert v["pass"] is False and v["diverged"] >= 1
    first = v["requests"][0]
    assert first["kind"] == "diverged"
    explanation = first["detail"]["explanation"]
    added = [s for s in explanation["spans"] if s["change"] == "added"]
    assert [s["pointer"] for s in added] == [f"/messages/{i}" for i in range(10, 18)]
    assert explanation["first_line"].startswith(
        "8 messages added at /messages/10-/messages/17: assistant -> read_file; "
        'tool read_file "1| Launch notes')
    assert [s["element"] for s in added][-2:] == [
        'assistant "notes.txt says: The launch code\u2026"',
        'user "Read notes.txt, then look in th\u2026"']
    assert "8 messages added at /messages/10" in current.stderr
    assert _tree_bytes(scene.config_dir, scene.workspace) == state_after_both
