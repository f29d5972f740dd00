"""``wiretape demo``: the main job on the built-in example, offline.

Starts the scripted fake provider, records the bundled example agent (the
real openai SDK in a tool loop), stops the provider, replays the run, and
reports the verdict and where the run file is; with ``--compare``, also
compares two scripted models from the first turn of a run (``fork``). The lines are said through
the caller (the command line), which also words the recording's summary.
"""

from __future__ import annotations

import asyncio
import io
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from wiretape.launch.fork import ForkResult, compare
from wiretape.launch.record import RecordResult, record
from wiretape.launch.replay import ReplaySettings, replay
from wiretape.playback.text import Style, plain
from wiretape.store.locate import runs_dir
from wiretape.store.runfile import RunFile
from wiretape.testing import FIXER_MODEL, IDLE_MODEL, FakeProvider, demo_script, fork_models

QUESTION = "How many pieces of fruit are listed in inventory.txt?"


def run_demo(keep_dir: Path | None, say: Callable[[str], None], *,
             summarise: Callable[[RecordResult], Sequence[str]],
             style: Style = plain,
             compare_table: Callable[[list[ForkResult]], Sequence[str]] | None = None) -> int:
    """Run the demo; return the replay's exit code (0 when it passes).
    ``say`` prints a line, ``summarise`` words the recording, ``style``
    colours the divergence report. With ``compare_table`` (which words a
    comparison), a fourth step compares two scripted models from the first
    turn of a run of the agent that may fix a file (:func:`compare_step`)."""
    t0 = time.monotonic()
    directory = keep_dir or runs_dir()
    argv = [sys.executable, "-m", "wiretape.examples.tool_agent", QUESTION]
    steps = 3 if compare_table is None else 4
    say(f"wiretape demo: 1/{steps} recording the example agent against the fake provider")
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
    say(f"wiretape demo: 2/{steps} fake provider stopped; replaying with no provider at all")
    verdict = asyncio.run(replay(recorded.path, argv, ReplaySettings(),
                                 echo_stdout=io.BytesIO(), echo_stderr=io.BytesIO()))
    say(f"wiretape demo: 3/{steps} verdict")
    say(verdict.line())
    for line in verdict.details(style):
        say(line)
    if compare_table is not None:
        compare_step(directory, say, compare_table)
    say(f"wiretape demo: run file {recorded.path} (try `wiretape show {recorded.path}`"
        + ("" if compare_table is not None else ", or `wiretape demo --compare`")
        + f"); {time.monotonic() - t0:.1f} s in all")
    return verdict.exit_code


COMPARE_QUESTION = "report.txt should hold the total number of fruit: fix it if it is wrong."
VERIFY = "grep -q 'total: 42' report.txt"


def compare_step(directory: Path, say: Callable[[str], None],
                 compare_table: Callable[[list[ForkResult]], Sequence[str]]) -> list[ForkResult]:
    """Record the example agent with its write tool in a scratch project
    (inventory.txt, and report.txt saying ``total: 40``), then fork it
    after its first turn onto the fake provider's two scripted models
    (``fake-fixer`` writes the right total, ``fake-idle`` does not), two at
    once, and check each sandbox with ``grep``: one pass, one fail."""
    say(f"wiretape demo: 4/4 compare: the agent with a write tool, forked after its first "
        f"turn onto two scripted models ({FIXER_MODEL}, {IDLE_MODEL}); verify: {VERIFY}")
    with tempfile.TemporaryDirectory(prefix="wiretape-demo-") as scratch:
        project = Path(scratch) / "project"
        project.mkdir()
        (project / "inventory.txt").write_text("apples: 17\npears: 25\n", encoding="utf-8")
        (project / "report.txt").write_text("total: 40\n", encoding="utf-8")
        argv = [sys.executable, "-m", "wiretape.examples.tool_agent", "--write",
                "--workspace", ".", COMPARE_QUESTION]
        with FakeProvider(demo_script(), models=fork_models(), port=0) as provider:
            upstream = provider.url + "/v1"
            parent = asyncio.run(record(
                argv, out=directory / time.strftime("compare-%Y%m%d-%H%M%S.wtape"),
                upstreams=[("openai", upstream)], cwd=str(project),
                echo_stdout=io.BytesIO(), echo_stderr=io.BytesIO()))
            results = asyncio.run(compare(parent.path, 1, [FIXER_MODEL, IDLE_MODEL], VERIFY,
                                          jobs=2, upstreams=(("openai", upstream),),
                                          out_dir=directory))
    for line in compare_table(results):
        say(line)
    return results


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
