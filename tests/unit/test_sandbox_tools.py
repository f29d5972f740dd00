"""The folders snapshots leave to the tools that make them (``.venv``,
``node_modules``) in a replay's sandbox: found at the originals, linked
where they cannot be bound read-only, their files found on this machine;
and a command the sandbox lacks named with why, in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wiretape.errors import CommandNotFound
from wiretape.launch.replay import LaunchPlan, resolve_in_sandbox
from wiretape.launch.sandbox import Sandbox
from wiretape.snapshot.tree import walk


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    (work / ".venv" / "bin").mkdir(parents=True)
    python = work / ".venv" / "bin" / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (work / "agent.py").write_text("print('hi')\n")
    (work / "node_modules").symlink_to(work / ".venv")  # a link is never shown
    return work


@pytest.fixture
def sandbox(project: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    box = Sandbox.restore([(1, str(project), list(walk(project)))], source=tmp_path / "r.wtape",
                          home=None)
    yield box
    box.remove()


def test_tool_folders_are_found_at_the_originals_and_linked_in_the_copy(
        project: Path, sandbox: Sandbox) -> None:
    copy = sandbox.copies[0].copy
    assert not (copy / ".venv").exists()  # never snapshotted
    assert sandbox.tool_folders() == [(str(project / ".venv"), str(copy / ".venv"))]
    assert sandbox.link_tools() == [str(project / ".venv")]
    assert os.readlink(copy / ".venv") == str(project / ".venv")
    assert (copy / ".venv" / "bin" / "python").read_text() == "#!/bin/sh\n"
    assert sandbox.link_tools() == []  # once


def test_a_tool_folder_s_files_are_the_original_s(project: Path, sandbox: Sandbox) -> None:
    copy = sandbox.copies[0].copy
    assert sandbox.on_host(str(copy / ".venv" / "bin" / "python")) == str(
        project / ".venv" / "bin" / "python")
    assert sandbox.on_host(str(copy / "agent.py")) == str(copy / "agent.py")
    assert sandbox.on_host(str(copy / ".venvx")) == str(copy / ".venvx")


@pytest.mark.parametrize("mode", ["same-paths", "mapped"])
def test_the_command_is_looked_for_where_the_agent_will_see_it(
        project: Path, sandbox: Sandbox, mode: str) -> None:
    copy = sandbox.copies[0].copy
    cwd = str(project if mode == "same-paths" else copy)
    sandbox.tool_binds()  # the places the originals are shown at: empty folders here
    plan = LaunchPlan([".venv/bin/python", "agent.py"], cwd, mode, sandbox=sandbox)  # type: ignore[arg-type]
    resolve_in_sandbox(plan, str(copy), {})
    absolute = LaunchPlan([f"{cwd}/.venv/bin/python"], cwd, mode, sandbox=sandbox)  # type: ignore[arg-type]
    resolve_in_sandbox(absolute, str(copy), {})


def test_a_command_in_a_tool_folder_missing_here_is_explained(
        project: Path, sandbox: Sandbox) -> None:
    copy = sandbox.copies[0].copy
    for path in sorted((project / ".venv").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (project / ".venv").rmdir()
    plan = LaunchPlan([".venv/bin/python", "agent.py"], str(project), "same-paths",
                      sandbox=sandbox)
    with pytest.raises(CommandNotFound) as raised:
        resolve_in_sandbox(plan, str(copy), {})
    assert str(raised.value) == (
        f"cannot run command '.venv/bin/python': .venv is never snapshotted, and "
        f"{project / '.venv'} does not exist here: make it as it was when recording, or give "
        "the command after --")


@pytest.mark.parametrize(("reason", "hint"), [("binary", "--snapshot-binary"),
                                              ("secrets", "--snapshot-include PATTERN")])
def test_a_command_the_snapshot_left_out_is_explained(
        project: Path, sandbox: Sandbox, reason: str, hint: str) -> None:
    copy = sandbox.copies[0].copy
    plan = LaunchPlan(["tools/agent-bin", "--go"], str(copy), "mapped", sandbox=sandbox)
    with pytest.raises(CommandNotFound) as raised:
        resolve_in_sandbox(plan, str(copy), {"1": [["tools/", reason]]})
    assert str(raised.value) == (
        f"cannot run command 'tools/agent-bin': the snapshot left it out ({reason}): record "
        f"again with {hint}, or give the command after --")
    with pytest.raises(CommandNotFound) as raised:
        resolve_in_sandbox(plan, str(copy), {"2": [["tools/", reason]]})  # another snapshot's
    assert str(raised.value) == "cannot run command 'tools/agent-bin': no such file"
