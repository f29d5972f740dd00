"""``wiretape check PATH...``: replay a suite of runs for CI, print a table
and the divergence report of each failure, write JUnit XML, and exit 1 when
any run fails.

Owns the command's options and its text. The finding, scheduling and
replaying are ``wiretape.suite``'s; the verdict text is ``render``'s.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wiretape.cli import render
from wiretape.cli.files import write_whole
from wiretape.errors import UsageError
from wiretape.suite import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import Sequence

    from wiretape.launch.trust import Elsewhere
    from wiretape.suite.runner import CheckResult

HEADER = ["run", "result", "recorded", "exact", "substituted", "diverged", "missing", "unused",
          "outcome", "time"]
#: The column of learned correspondences, shown when some replay allowed them.
EQUIVALENT_AT = HEADER.index("diverged")


def display(path: Path) -> str:
    """A run's path as the user would type it: relative to here when inside."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def outcome_text(result: CheckResult) -> str:
    """``same``, ``differs: stdout, …``, or ``-`` when nothing was compared."""
    if result.verdict is None:
        return "-"
    from wiretape.model import facets

    compared = {name: facet for name, facet in facets(result.verdict.outcome)
                if isinstance(facet, dict) and facet.get("same") is not None}
    differs = [name for name, facet in compared.items() if facet.get("same") is False]
    if differs:
        return "differs: " + ", ".join(differs)
    return "same" if compared else "-"


def learned(results: Sequence[CheckResult]) -> bool:
    """Whether a replay allowed or used learned correspondences (then the
    table has an ``equivalent`` column)."""
    return any(r.verdict is not None and (r.verdict.equivalent or r.verdict.allow)
               for r in results)


def extra_columns(results: Sequence[CheckResult]) -> tuple[bool, bool]:
    """Whether some run has tool exchanges (a ``tools`` column) and stdio
    MCP sessions (an ``mcp`` column)."""
    verdicts = [r.verdict for r in results if r.verdict is not None]
    return (any(v.tools is not None for v in verdicts),
            any(v.mcp is not None for v in verdicts))


def header(results: Sequence[CheckResult]) -> list[str]:
    with_tools, with_mcp = extra_columns(results)
    counts = HEADER[:HEADER.index("outcome")]
    if learned(results):
        counts = [*HEADER[:EQUIVALENT_AT], "equivalent", *HEADER[EQUIVALENT_AT:len(counts)]]
    return [*counts, *(["tools"] if with_tools else []), *(["mcp"] if with_mcp else []),
            "outcome", "time"]


def tools_text(result: CheckResult) -> str:
    """The tool exchanges matched of those recorded (``2/2``), and what
    else happened (``1/2, 1 missing``); ``-`` when the run has none."""
    tools = result.verdict.tools if result.verdict is not None else None
    if tools is None:
        return "-"
    matched = tools.exact + tools.substituted + tools.equivalent
    more = [f"{n} {word}" for n, word in ((tools.diverged, "diverged"),
                                          (tools.missing, "missing"),
                                          (tools.unused, "unused")) if n]
    return ", ".join([f"{matched}/{tools.recorded}", *more])


def mcp_text(result: CheckResult) -> str:
    """The MCP sessions played of those recorded (``1/1``), and their
    messages that did not match; ``-`` when the run has none."""
    mcp = result.verdict.mcp if result.verdict is not None else None
    if mcp is None:
        return "-"
    m = mcp.messages
    more = [f"{n} {word}" for n, word in ((mcp.missing, "missing"),
                                          (m.diverged, "messages diverged"),
                                          (m.missing, "messages missing")) if n]
    return ", ".join([f"{mcp.played}/{mcp.recorded}", *more])


def row(result: CheckResult, with_equivalent: bool = False, with_tools: bool = False,
        with_mcp: bool = False) -> list[str]:
    v = result.verdict
    counts = ["-"] * (7 if with_equivalent else 6) if v is None else [
        str(n) for n in (v.recorded, v.exact, v.substituted,
                         *((v.equivalent,) if with_equivalent else ()),
                         v.diverged, v.missing, v.unused)]
    extra = [*([tools_text(result)] if with_tools else []),
             *([mcp_text(result)] if with_mcp else [])]
    return [render.printable(display(result.path)), result.status.value.upper(), *counts,
            *extra, outcome_text(result), f"{result.duration_s:.1f} s"]


def describe(result: CheckResult) -> tuple[str, str]:
    """(one-line message, details) of a failed or unreplayable run, plain text."""
    if result.verdict is None:
        message = result.error or "the replay ended without a verdict"
        return message, message
    lines = [click.unstyle(line) for line in render.verdict_details(result.verdict)]
    if result.error:
        lines.insert(0, f"wiretape: {result.error}")
    return render.verdict_line(result.verdict), "\n".join(lines)


def progress_line(result: CheckResult, done: int, total: int) -> str:
    tail = f": {render.printable(result.error)}" if result.error else ""
    return (f"wiretape check: [{done}/{total}] {result.status.value.upper()} "
            f"{display(result.path)} ({result.duration_s:.1f} s){tail}")


@click.command()
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Replays at the same time (default: one per CPU).")
@click.option("--junit-xml", "junit_path", type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="Write the results as JUnit XML to FILE.")
@click.option("--diagnostic", is_flag=True,
              help="Go on past mismatches, so every divergence is reported (default: strict).")
@click.option("--free-ports", is_flag=True,
              help="Listen on free ports, not the recorded ones (agents that take their base "
                   "URL from the environment; runs sharing a port then need not wait).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_TIMEOUT_S, show_default=True, metavar="SECONDS",
              help="Stop a replay that takes longer; it fails.")
@click.option("-y", "--yes", is_flag=True,
              help="Run the recorded commands of runs recorded by another user or on another "
                   "host (a CI machine replaying the runs of a repository) without asking.")
def check(paths: tuple[Path, ...], jobs: int | None, junit_path: Path | None, diagnostic: bool,
          free_ports: bool, timeout_s: float, yes: bool) -> None:
    """Replay every run in PATHS (run files, and *.wtape files in folders,
    recursively) with no provider, in parallel, and report.

    Each replay works on its own copy of the run (the files are never
    written), runs the recorded command in the recorded directory, and
    listens on the recorded ports; runs recorded on the same port replay
    one after another. Runs recorded through a proxy only (no command) are
    skipped: their own tests replay them. Runs recorded by another user or
    on another host run their recorded command only with --yes (or after
    a yes on a terminal); without it each fails with a line saying so. A
    run file that cannot be read fails on its own line. SIGTERM or Ctrl-C
    stops every replay (and its agent) and removes the copies. Exit status:
    0 every run passes; 1 any run fails or cannot be replayed, or every
    run was skipped (nothing was checked); 2 usage error; 143/130 stopped
    by SIGTERM/SIGINT.

    \b
    Example:
      wiretape check tests/runs --junit-xml wiretape.xml
      wiretape check run_a.wtape run_b.wtape -j 2 --diagnostic
    """
    import asyncio

    from wiretape.suite.discover import SUFFIX, find_runs
    from wiretape.suite.runner import Status, check_runs, default_jobs

    runs = find_runs(paths)
    if not runs:
        raise UsageError(f"no run files (*{SUFFIX}) in {', '.join(map(str, paths))}: record "
                         "some with `wiretape record -o PATH` or `pytest --wiretape-record`")
    workers = min(jobs or default_jobs(), len(runs))
    click.echo(f"wiretape check: {len(runs)} run{'s' if len(runs) != 1 else ''}, "
               f"{workers} at a time", err=True)
    finished: list[CheckResult] = []

    def on_result(result: CheckResult) -> None:
        finished.append(result)
        click.echo(progress_line(result, len(finished), len(runs)), err=True)

    t0 = time.monotonic()
    def approve(strangers: Sequence[Elsewhere]) -> bool:
        if yes:
            return True
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            return False
        were = "runs were" if len(strangers) != 1 else "run was"
        click.echo(f"wiretape check: {len(strangers)} {were} recorded by another user or on "
                   "another host; replaying runs their "
                   "recorded commands, against files restored from the runs:", err=True)
        for elsewhere in strangers:
            click.echo(render.printable(f"  {elsewhere.run_id} (recorded {elsewhere.who()}): ")
                       + render.command_line(elsewhere.argv), err=True)
        return click.confirm("Run these commands?", default=False, err=True)

    results = asyncio.run(check_runs(runs, jobs=workers, free_ports=free_ports,
                                     diagnostic=diagnostic, timeout_s=timeout_s,
                                     on_result=on_result, approve=approve))
    duration = time.monotonic() - t0
    wide, (with_tools, with_mcp) = learned(results), extra_columns(results)
    for line in render.table([row(r, wide, with_tools, with_mcp) for r in results],
                             header(results)):
        click.echo(line)
    for result in results:
        if result.status in (Status.PASS, Status.SKIP):
            continue
        click.echo("")
        click.echo(click.style(render.printable(
            f"--- {display(result.path)}{f' ({result.run_id})' if result.run_id else ''}"),
            bold=True))
        if result.verdict is None:
            click.echo(f"wiretape: error: {render.printable(result.error or '')}")
            continue
        click.echo(render.verdict_line(result.verdict))
        if result.error:
            click.echo(f"wiretape: {render.printable(result.error)}")
        for line in render.verdict_details(result.verdict):
            click.echo(line)
    if junit_path is not None:
        from wiretape.suite.junit import junit_xml

        write_whole(junit_path, junit_xml(results, duration_s=duration,
                                          name_of=lambda r: display(r.path), describe=describe),
                    make_folder=True)
    count = {status: sum(1 for r in results if r.status is status) for status in Status}
    skipped = f", {count[Status.SKIP]} skipped (no command)" if count[Status.SKIP] else ""
    click.echo(f"\nwiretape check: {len(results)} run{'s' if len(results) != 1 else ''}: "
               f"{count[Status.PASS]} passed, "
               f"{count[Status.FAIL]} failed, {count[Status.ERROR]} could not be replayed"
               f"{skipped}, in {duration:.1f} s"
               + (f"; JUnit XML in {junit_path}" if junit_path is not None else ""))
    if count[Status.SKIP] == len(results):
        # A gate that checked nothing must not pass.
        click.echo("wiretape check: nothing was replayed: every run was recorded through a "
                   "proxy only (no command), so the tests that made them replay them; give "
                   "check runs recorded with `wiretape record -- CMD`")
        sys.exit(1)
    sys.exit(1 if count[Status.FAIL] or count[Status.ERROR] else 0)
