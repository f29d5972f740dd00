"""A replay needs no key: a run recorded with ``OPENAI_API_KEY`` set replays
and passes where it is not set, through ``wiretape replay``, ``wiretape
check`` and ``wiretape.replay``.

The agent is the real openai SDK in a tool loop, which refuses to start
without a key. The recording keeps the variable's name (never its value);
a replay in an environment without it gives the agent a placeholder and
says so in one line, and the verdict is as exact as with the key.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import wiretape
from wiretape.origins import KNOWN_ORIGINS
from wiretape.store import open_run
from wiretape.testing import FakeProvider, TextTurn, ToolCall, ToolCallTurn

pytestmark = pytest.mark.timeout(150)

AGENT = [sys.executable, str(Path(__file__).resolve().parent / "clients" / "openai_client.py"),
         "chat"]
SCRIPT = [
    ToolCallTurn([ToolCall("add", {"a": 2, "b": 3})]),
    TextTurn("The sum is 5."),
]
NOTE = ("wiretape: OPENAI_API_KEY is not set here; the agent gets a placeholder: a replay "
        "needs no key")
# Variables that would send the agent elsewhere, or give it a key.
_SCRUB = ({var for spec in KNOWN_ORIGINS for var in (*spec.env_vars, *spec.key_vars)}
          | {"OPENAI_LOG", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
             "https_proxy", "all_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
             "AZURE_OPENAI_API_KEY"})


def keyless_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wiretape", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """(project, run, the key it was recorded with, the agent's stdout)."""
    root = tmp_path_factory.mktemp("keyless")
    project = root / "project"
    project.mkdir()
    key = "sk-proj-" + secrets.token_urlsafe(36)
    run = root / "runs" / "agent.wtape"
    with FakeProvider(SCRIPT) as provider:
        done = cli("record", "-o", str(run), "--upstream", f"openai={provider.url}/v1", "--",
                   *AGENT, cwd=project, env=keyless_env(OPENAI_API_KEY=key))
        sent = [r.header("authorization") for r in provider.requests]
    assert done.returncode == 0, done.stderr
    assert sent == [f"Bearer {key}"] * 2  # the provider got the key, twice
    return project, run, key, done.stdout


def test_the_run_keeps_the_key_s_name_and_never_its_value(recorded) -> None:  # type: ignore[no-untyped-def]
    _project, run, key, _stdout = recorded
    with open_run(run) as opened:
        info = opened.info()
    assert info.credential_env == ("OPENAI_API_KEY",)
    stored = b"".join(p.read_bytes() for p in run.parent.iterdir())  # with any -wal beside it
    assert key.encode() not in stored
    assert key[8:24].encode() not in stored  # not even a piece of it


def test_without_the_key_the_agent_refuses_to_start(recorded) -> None:  # type: ignore[no-untyped-def]
    """What a replay without the placeholder would meet: the SDK needs a key
    before it sends anything."""
    project, _run, _key, _stdout = recorded
    done = subprocess.run(AGENT, cwd=project, capture_output=True, text=True, timeout=60,
                          env=keyless_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1"))
    assert done.returncode != 0
    assert "OPENAI_API_KEY" in done.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_replay_without_the_key_passes_and_says_so_in_one_line(recorded) -> None:  # type: ignore[no-untyped-def]
    project, run, _key, stdout = recorded
    done = cli("replay", str(run), "--json", cwd=project, env=keyless_env())
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines().count(NOTE) == 1
    agent_line, verdict_json = done.stdout.split("\n", 1)
    assert agent_line + "\n" == stdout  # the agent observed what it did with the key
    verdict = json.loads(verdict_json)
    assert (verdict["recorded"], verdict["exact"], verdict["diverged"], verdict["missing"],
            verdict["unused"], verdict["pass"]) == (2, 2, 0, 0, 0, True)
    assert verdict["outcome"]["exit_status"] == {"same": True, "recorded": 0, "replayed": 0}
    # With a key of its own, the agent uses it: no placeholder, the same verdict.
    other = cli("replay", str(run), cwd=project,
                env=keyless_env(OPENAI_API_KEY="sk-proj-" + secrets.token_urlsafe(36)))
    assert other.returncode == 0, other.stderr
    assert "not set here" not in other.stderr and "exact 2" in other.stderr


@pytest.mark.slow  # a long scenario: make test-slow
def test_check_replays_without_the_key(recorded) -> None:  # type: ignore[no-untyped-def]
    project, run, _key, _stdout = recorded
    done = cli("check", "--yes", str(run.parent), cwd=project, env=keyless_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 0 failed" in done.stdout


@pytest.mark.slow  # a long scenario: make test-slow
def test_the_python_api_replays_without_the_key(recorded,  # type: ignore[no-untyped-def]
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _project, run, _key, _stdout = recorded
    for name in _SCRUB:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    verdict = wiretape.replay(run)
    assert verdict.passed, "\n".join(verdict.details())
    assert (verdict.recorded, verdict.exact) == (2, 2)
    assert verdict.details().count(NOTE) == 1
