"""Drive the wiretape CLI from tests: record, replay, verdict, and read a
run file back. The CLI always runs as ``[sys.executable, "-m", "wiretape"]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import child_env, parse_observation

WIRETAPE = [sys.executable, "-m", "wiretape"]


@dataclass
class Proc:
    """A finished wiretape command."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def observation(self, required: bool = True) -> dict[str, Any] | None:
        """The client's JSON line; None if absent and not ``required`` (a
        child stopped by a strict replay may never print it)."""
        try:
            return parse_observation(self.stdout)
        except AssertionError:
            if required:
                raise AssertionError(f"no client observation\n{self.describe()}") from None
            return None

    def describe(self) -> str:
        return (f"$ {' '.join(self.args)}\nexit {self.returncode}\n"
                f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}")


def wiretape(args: Sequence[str], *, cwd: str | Path, timeout: float = 120,
             env: dict[str, str] | None = None) -> Proc:
    argv = [*WIRETAPE, *map(str, args)]
    try:
        p = subprocess.run(argv, cwd=str(cwd), env=env or child_env(), capture_output=True,
                           timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace")
        err = (e.stderr or b"").decode("utf-8", "replace")
        raise AssertionError(f"timed out after {timeout}s: {' '.join(argv)}\n"
                             f"{out[-2000:]}\n{err[-2000:]}") from None
    return Proc(argv, p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))


def cli_unavailable() -> str | None:
    """Why the wiretape CLI cannot be used, or None when it can."""
    try:
        p = subprocess.run([*WIRETAPE, "record", "--help"], capture_output=True, timeout=60,
                           env=child_env(), check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"wiretape CLI not runnable: {e}"
    if p.returncode != 0:
        return f"`wiretape record --help` exited {p.returncode}: {p.stderr.decode()[-300:]}"
    return None


def record(run: str | Path, upstreams: dict[str, str], cmd: Sequence[str], *,
           cwd: str | Path, timeout: float = 120) -> Proc:
    # These tests are about the wire, and their clients leave timing files in
    # the working directory for the test to read: no snapshot, no sandbox.
    args: list[str] = ["record", "-o", str(run), "--no-snapshot"]
    for name, url in upstreams.items():
        args += ["--upstream", f"{name}={url}"]
    return wiretape([*args, "--", *cmd], cwd=cwd, timeout=timeout)


def replay(run: str | Path, cmd: Sequence[str], *, cwd: str | Path, mode: str = "diagnostic",
           pace: str = "fast", extra: Sequence[str] = (), timeout: float = 120) -> Proc:
    args = ["replay", f"--{mode}", "--pace", pace, *extra, str(run), "--", *cmd]
    return wiretape(args, cwd=cwd, timeout=timeout)


def verdict(run: str | Path, *, cwd: str | Path) -> dict[str, Any]:
    p = wiretape(["verdict", str(run), "--json"], cwd=cwd, timeout=60)
    start = p.stdout.find("{")
    assert start >= 0, p.describe()
    return json.loads(p.stdout[start:])


def verdict_line(stderr: str) -> str:
    """The one ``wiretape: verdict ...`` line of a replay's stderr."""
    found = [line for line in stderr.splitlines() if line.startswith("wiretape: verdict ")]
    assert len(found) == 1, stderr
    return found[0]


def stored_verdict(run: Path) -> dict[str, Any]:
    """``wiretape verdict RUN --json`` of a run, run beside it."""
    return verdict(run, cwd=run.parent)


def load_run(run: str | Path):
    """(RunInfo, [Exchange]) of a run file."""
    from wiretape.store import open_run

    with open_run(run) as r:
        return r.info(), list(r.exchanges())
