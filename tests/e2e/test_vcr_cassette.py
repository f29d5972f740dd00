"""A cassette written by VCR.py itself (the example agent, the real openai
SDK over httpx, recorded by ``vcr.use_cassette``) is imported into a run,
shown with its tool calls, and replayed offline with every request exact;
the API key in the cassette never reaches the run file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wiretape.testing import FakeProvider, demo_script

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).parent / "clients_inspect" / "vcr_record.py"
QUESTION = "How many pieces of fruit are listed in inventory.txt?"
KEY = "sk-proj-" + "K" * 40


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_vcrpy_cassette_imports_shows_and_replays(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_BASE")}
    env["OPENAI_API_KEY"] = KEY
    cassette = tmp_path / "cassette.yaml"
    with FakeProvider(demo_script()) as fp:
        made = subprocess.run([sys.executable, str(CLIENT), str(cassette), QUESTION],
                              env={**env, "OPENAI_BASE_URL": fp.url + "/v1"}, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path,
                              check=False)
    assert made.returncode == 0, made.stderr
    assert made.stdout == "There are 42 pieces of fruit: 17 apples and 25 pears.\n"
    recorded = yaml.safe_load(cassette.read_text())
    assert len(recorded["interactions"]) == 3
    assert KEY in cassette.read_text()  # VCR.py keeps it; the import must not

    def wiretape(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
                              check=False)

    run = tmp_path / "imported.wtape"
    done = wiretape("import", "--vcr", str(cassette), "-o", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("run_")
    assert done.stderr.splitlines()[-1] == (
        f"wiretape: imported 3 exchanges into {done.stdout.strip()} -> {run}")
    assert KEY.encode() not in run.read_bytes()

    shown = json.loads(wiretape("show", str(run), "--json").stdout)
    assert [
        (r["model"], r["stop_reason"], r["tool_calls"], r["frames"]) for r in shown["exchanges"]
    ] == [
        ("gpt-4o-mini", "tool_calls", ["read_file"], 9),
        ("gpt-4o-mini", "tool_calls", ["add"], 8),
        ("gpt-4o-mini", "stop", [], 15),
    ]
    assert [(c["name"], c["status"], c["answered_in"]) for c in shown["ledger"]["calls"]] == [
        ("read_file", "completed", 1), ("add", "completed", 2)]
    assert shown["origins"] == [{"name": "openai", "upstream": fp.url + "/v1", "port": 0}]
    assert any("VCR stores no timing" in n for n in shown["import_notes"])

    # the provider is gone: the replay serves the cassette's answers
    replayed = wiretape("replay", str(run), "--", sys.executable, "-m",
                        "wiretape.examples.tool_agent", QUESTION)
    verdict = json.loads(wiretape("verdict", str(run), "--json").stdout)
    assert (verdict["recorded"], verdict["exact"], verdict["diverged"], verdict["missing"],
            verdict["unused"], verdict["exchanges_pass"]) == (3, 3, 0, 0, 0, True)
    assert [r["kind"] for r in verdict["requests"]] == ["exact"] * 3
    # a cassette records no exit status or output: the outcome is not
    # compared, so the exchanges decide and the replay passes
    assert verdict["outcome"]["exit_status"]["same"] is None
    assert replayed.returncode == 0, replayed.stderr
