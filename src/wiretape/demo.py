"""``wiretape demo``: the main job on the built-in example, offline.

Starts the scripted fake provider, records the bundled example agent (the
real openai SDK in a tool loop), stops the provider, replays the run, and
reports the verdict and where the run file is. The lines are said through
the caller (the command line), which also words the recording's summary.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from wiretape.launch.record import RecordResult, record
from wiretape.launch.replay import ReplaySettings, replay
from wiretape.playback.text import Style, plain
from wiretape.store.locate import runs_dir
from wiretape.store.runfile import RunFile
from wiretape.testing import FakeProvider, demo_script

QUESTION = "How many pieces of fruit are listed in inventory.txt?"


def run_demo(keep_dir: Path | None, say: Callable[[str], None], *,
             summarise: Callable[[RecordResult], Sequence[str]],
             style: Style = plain) -> int:
    """Run the demo; return the replay's exit code (0 when it passes).
    ``say`` prints a line, ``summarise`` words the recording, ``style``
    colours the divergence report."""
    t0 = time.monotonic()
    directory = keep_dir or runs_dir()
    argv = [sys.executable, "-m", "wiretape.examples.tool_agent", QUESTION]
    say("wiretape demo: 1/3 recording the example agent against the fake provider")
    with FakeProvider(demo_script(), port=0) as provider:
        recorded = asyncio.run(
            record(
                argv,
                out=None
                if keep_dir is None
                else directory / time.strftime("demo-%Y%m%d-%H%M%S.wtape"),
                upstreams=[("openai", provider.url + "/v1")],
                snapshots=[],
                echo_stdout=io.BytesIO(),
                echo_stderr=io.BytesIO(),
            )
        )
    for line in summarise(recorded):
        say(line)
    if recorded.exit_status != 0 or recorded.exchanges == 0:
        # A demo whose agent never ran would replay "the same" failure and pass.
        say(f"wiretape demo: the example agent failed (exit status {recorded.exit_status}, "
            f"{recorded.exchanges} exchanges): {agent_error(recorded.path)}")
        return 1
    say(f"wiretape demo: the agent answered: {recorded_answer(recorded.path)}")
    say("wiretape demo: 2/3 fake provider stopped; replaying with no provider at all")
    verdict = asyncio.run(replay(recorded.path, argv, ReplaySettings(),
                                 echo_stdout=io.BytesIO(), echo_stderr=io.BytesIO()))
    say("wiretape demo: 3/3 verdict")
    say(verdict.line())
    for line in verdict.details(style):
        say(line)
    say(f"wiretape demo: run file {recorded.path} (try `wiretape show {recorded.path}`); "
        f"{time.monotonic() - t0:.1f} s in all")
    return verdict.exit_code


def recorded_answer(path: Path) -> str:
    with RunFile.open(path) as run:
        return run.info().stdout.decode("utf-8", "replace").strip()


def agent_error(path: Path) -> str:
    """The last line the example agent wrote to stderr, or a hint when none."""
    from wiretape.store.runfile import RunFile

    with RunFile.open(path) as run:
        lines = run.info().stderr.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return "it wrote nothing to stderr"
    hint = (
        " (the demo needs its extra: pip install 'wiretape[demo]')"
        if "No module named" in lines[-1]
        else ""
    )
    return lines[-1] + hint
