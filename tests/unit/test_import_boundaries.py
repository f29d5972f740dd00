"""What each entry point loads, checked in a fresh interpreter: the replay
path loads no upstream client (DESIGN.md, "No provider fallback in
replay"), and ``wiretape --help`` loads none of the engine.

The import contracts in pyproject.toml say the same of the import graph;
these tests watch ``sys.modules`` of a real process, lazy imports included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: No module of these may be loaded by a replay.
UPSTREAM_CLIENT = ("httpx", "httpcore", "wiretape.proxy.upstream", "wiretape.proxy.record",
                   "wiretape.launch.record")

#: No module of these may be loaded by ``wiretape --help``: the commands
#: import the engine when they run.
ENGINE = ("httpx", "httpcore", "h11", "cryptography", "rapidfuzz", "zstandard", "yaml",
          "asyncio", "wiretape.launch", "wiretape.proxy", "wiretape.store", "wiretape.matching",
          "wiretape.inspect", "wiretape.intercept", "wiretape.suite.runner", "wiretape.api",
          "wiretape.attach", "wiretape.demo", "wiretape.model", "wiretape.snapshot",
          "wiretape.playback", "sqlite3", "tempfile", "json")

def _loaded(names: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def _modules_after(code: str, *args: str) -> list[str]:
    """The modules loaded once ``code`` ran in a new interpreter (its last
    line of output is their JSON list)."""
    code += "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    names: list[str] = json.loads(done.stdout.splitlines()[-1])
    return names


def test_the_replay_modules_load_no_upstream_client() -> None:
    code = """
import importlib, pkgutil
import wiretape.matching, wiretape.playback
for package in (wiretape.matching, wiretape.playback):
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        importlib.import_module(module.name)
import wiretape.api, wiretape.attach, wiretape.inspect.verdicts
import wiretape.launch.replay, wiretape.proxy.replay
"""
    names = _modules_after(code)
    assert "wiretape.launch.replay" in names and "wiretape.playback.decide" in names
    assert _loaded(names, UPSTREAM_CLIENT) == []


REPLAY = """
import sys, urllib.request
from pathlib import Path

import wiretape
from wiretape.model import Ending, Exchange, Frame, Origin, Request, Response, RunInfo
from wiretape.store.runfile import RunFile

path = Path(sys.argv[1])
origin = Origin("openai", "https://api.openai.com/v1", 0, ("OPENAI_BASE_URL",))
info = RunInfo(run_id="run_0123456789ab", wiretape_version="t", argv=(), cwd=str(path.parent),
               env_names=(), origins=(origin,), started_at_ns=1, mode="serve")
head = ((b"Content-Type", b"application/json"),)
answer = b'{"ok": true}'
run = RunFile.create(path, info)
run.write_exchange(Exchange(
    0, 1, "openai", 1, Request(b"POST", b"/v1/chat/completions", head, b"{}"),
    Response(200, b"OK", (*head, (b"Content-Length", str(len(answer)).encode())),
             (Frame(5, answer),)),
    Ending.COMPLETE, 5, 6))
run.finish(None, b"", b"")
run.close(compact=True)

with wiretape.replaying(path) as proxy:
    request = urllib.request.Request(proxy.url + "/chat/completions", data=b"{}",
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read() == answer
verdict = proxy.verdict
assert (verdict.recorded, verdict.exact, verdict.passed) == (1, 1, True), verdict.line()
"""


def test_a_replay_from_python_loads_no_upstream_client(tmp_path: Path) -> None:
    # The whole path, lazy imports included: a run served by
    # wiretape.replaying() to a request, and its verdict.
    names = _modules_after(REPLAY, str(tmp_path / "run.wtape"))
    assert "wiretape.proxy.replay" in names
    assert _loaded(names, UPSTREAM_CLIENT) == []


@pytest.mark.parametrize("args", [["--help"], ["record", "--help"], ["replay", "--help"],
                                  ["check", "--help"], ["show", "--help"], ["fork", "--help"],
                                  ["compare", "--help"]])
def test_help_loads_none_of_the_engine(args: list[str]) -> None:
    # `python -X importtime` names every module the process imported.
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "wiretape", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: wiretape")
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and "|" in line]
    assert "wiretape.cli.main" in names
    assert _loaded(names, ENGINE) == []


def test_a_recorder_loads_its_machinery_before_the_first_exchange(tmp_path: Path) -> None:
    """``Recorder.warm_up`` (run before the proxy listens) loads what the
    first connection upstream would otherwise load on the event loop while
    the agent waits: the worker threads (names are resolved on one) and the
    IDNA codec a host name is encoded with. Without it none of these is
    loaded at that point."""
    code = f"""
import asyncio, json, sys
from pathlib import Path
from wiretape.model import RunInfo
from wiretape.proxy.record import Recorder
from wiretape.store.runfile import RunFile

async def main():
    run = RunFile.create(Path({str(tmp_path / 'run.wtape')!r}), RunInfo(
        run_id="run_warm", wiretape_version="0", argv=(), cwd="/", env_names=(), origins=(),
        started_at_ns=0))
    recorder = Recorder(run)
    await recorder.warm_up()
    print(json.dumps(sorted(sys.modules)))
    await recorder.aclose()
    run.close()

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert _loaded(loaded, ("concurrent.futures.thread", "encodings.idna")) == [
        "concurrent.futures.thread", "encodings.idna"]
