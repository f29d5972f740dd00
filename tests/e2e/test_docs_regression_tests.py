"""docs/regression-tests.md works as written: its files are written into an
empty project, its commands run in order (with this interpreter's scripts
first on PATH), and the failure it shows is the failure pytest prints.

Blocks are taken by their info string: ```python title="PATH"``` is a file,
```sh title="..."``` a list of commands, ```text title="check"``` and
```text title="failure"``` the output expected.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

DOC = Path(__file__).resolve().parents[2] / "docs" / "regression-tests.md"
FENCE = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
CHANGE = re.compile(r'question in `(?P<file>[^`]+)` to\s+`"(?P<new>[^"]+)"`')


def blocks(kind: str) -> dict[str, str]:
    return {title: body for lang, title, body in FENCE.findall(DOC.read_text())
            if lang == kind}


def run(command: str, project: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "PYTEST_ADDOPTS", "WIRETAPE_HOME"):
        env.pop(name, None)
    return subprocess.run(["bash", "-c", command], cwd=project, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def test_the_page_names_its_blocks() -> None:
    assert sorted(blocks("python")) == ["conftest.py", "record_and_replay.py",
                                        "tests/test_agent.py", "tests/test_nanobot_sdk.py"]
    assert sorted(blocks("sh")) == ["record", "replay"]
    assert sorted(blocks("text")) == ["check", "failure"]


@pytest.mark.slow  # a long scenario: `make test-slow`
def test_the_example_project_records_replays_and_fails_as_documented(tmp_path: Path) -> None:
    project = tmp_path / "project"
    for name, body in blocks("python").items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(body)
    commands = blocks("sh")

    for line in commands["record"].splitlines():
        done = run(line, project)
        assert done.returncode == 0, f"$ {line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if line.startswith("pytest"):
            assert "2 passed" in done.stdout
        else:
            assert done.stdout.splitlines() == [
                ("recorded 3 exchanges; the agent said: There are 42 pieces of fruit: "
                 "17 apples and 25 pears."),
                "replayed: exact 3 of 3, passed: True"]
    runs = sorted(p.relative_to(project).as_posix() for p in project.rglob("*.wtape"))
    assert runs == ["runs/fruit.wtape",
                    "tests/runs/test_agent/test_agent_counts_the_fruit.wtape",
                    "tests/runs/test_nanobot_sdk/test_nanobot_counts_the_fruit.wtape"]

    replay_lines = commands["replay"].splitlines()
    replayed = run(replay_lines[0], project)
    assert replayed.returncode == 0, replayed.stdout[-3000:]
    assert "2 passed" in replayed.stdout
    checked = run(replay_lines[1], project)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    # The table as the page shows it, but for the times.
    shown = [line for line in blocks("text")["check"].splitlines() if line]
    printed = [line for line in checked.stdout.splitlines() if line]
    assert [line.split()[:-2] for line in printed[:4]] == [
        line.split()[:-2] for line in shown[:4]]
    assert printed[4].split(" in ")[0] == shown[4].split(" in ")[0]
    assert printed[4].endswith("; JUnit XML in wiretape-junit.xml")
    scanned = run(replay_lines[2], project)
    assert scanned.returncode == 0, scanned.stdout[-3000:] + scanned.stderr[-3000:]
    assert scanned.stdout.count(": clean") == 3
    suite = ET.parse(project / "wiretape-junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "3", "failures": "0", "errors": "0", "skipped": "1"}

    # "When a replay fails": make the documented change, get the documented report.
    change = CHANGE.search(DOC.read_text())
    assert change is not None
    test_file = project / change["file"]
    test_file.write_text(re.sub(r'QUESTION = ".*"', f'QUESTION = "{change["new"]}"',
                                test_file.read_text()))
    failed = run(replay_lines[0], project)
    assert failed.returncode == 1
    assert "1 failed, 1 passed" in failed.stdout
    for line in blocks("text")["failure"].splitlines():
        assert line in failed.stdout.splitlines(), f"{line!r} not in\n{failed.stdout[-4000:]}"
