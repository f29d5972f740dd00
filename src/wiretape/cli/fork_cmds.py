"""The commands that run an agent again from a point of a recording onto a
live model: ``fork`` (one fork) and ``compare`` (one fork per model, a
verify command in each, one table). Registered on the main group by
``register``. Parsing and printing only: the work is in
``wiretape.launch.fork``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wiretape.cli.render import explanation_lines, json_text, printable, table
from wiretape.errors import UsageError

if TYPE_CHECKING:
    from wiretape.inspect.prices import PriceTable
    from wiretape.launch.fork import ForkResult

#: Exit status of a fork stopped by a request that did not match its
#: recording before ``--from`` (as a replay whose exchanges fail).
EXIT_DIVERGED = 3
#: Exit status of ``compare`` when every model failed the verify command.
EXIT_ALL_FAILED = 1
#: Lines of a failed verify command's output ``fork`` shows (its last ones).
VERIFY_TAIL_LINES = 10


def _say(line: str) -> None:
    click.echo(line, err=True)


def run_ref(path: Path, run_id: str) -> str:
    """How to name a run on the command line (``store.locate.run_ref``)."""
    from wiretape.store.locate import run_ref as ref

    return ref(path, run_id)


def price_table() -> PriceTable:
    """The built-in price table with the project's ``[prices]``."""
    from wiretape.inspect.prices import PriceTable
    from wiretape.launch.config import find

    project = find(Path.cwd())
    return PriceTable.with_overrides(dict(project.prices))


def _tokens(n: int | None) -> str:
    return "—" if n is None else str(n)


def _stopped_lines(result: ForkResult) -> list[str]:
    """The divergence that stopped a fork, as a replay explains it."""
    reason = printable(result.stopped or "")
    lines = [f"wiretape fork: stopped before --from {result.upto}: {reason}"
             f" (the agent did not repeat its recording up to there; the fork "
             f"{result.run_id} keeps what was served)"]
    if result.explanation is not None:
        lines += explanation_lines(result.explanation)
    return lines


def _price_notes(results: list[ForkResult], prices: PriceTable) -> list[str]:
    """One note per model that has no price: its cost shows "—"."""
    notes = []
    for model in dict.fromkeys(r.live_model for r in results if r.live):
        if prices.price(model) is None:
            notes.append(f"wiretape: note: no price for model {printable(model or '?')}: its "
                         "cost shows — (set one under [prices] in wiretape.toml or "
                         "[tool.wiretape.prices] in pyproject.toml)")
    return notes


def short_text(result: ForkResult) -> str:
    """Why a fork that served fewer than N exchanges is not a fork from N."""
    return (f"only {result.replayed} of the {result.upto} exchanges before --from "
            f"{result.upto} were served from the recording: the agent ended, or asked "
            "elsewhere, before the fork point, so this is not a fork from there")


def checkpoint_note(result: ForkResult) -> str:
    """The note of a fork from an N that is not one of its parent's checkpoints."""
    points = " ".join(str(n) for n in result.checkpoints or [0])
    return (f"wiretape fork: note: --from {result.upto} is not a checkpoint of "
            f"{result.parent_id} (its checkpoints: {points}): its first {result.upto} "
            "exchanges did not each complete before the next began (or its latest replay "
            "did not serve them exact), so the agent's state there may differ from the "
            "recording's")


def _unreachable_line(result: ForkResult) -> str | None:
    if not result.unreachable:
        return None
    name, error = result.unreachable[0]
    return (f"wiretape fork: upstream {printable(name)} could not be reached during the fork "
            f"({printable(error)}): give a reachable one with --upstream {name}=URL")


@click.command()
@click.argument("run")
@click.option("--from", "upto", type=click.IntRange(min=0), required=True, metavar="N",
              help="Serve the first N exchanges from the recording (each must match), then go "
                   "live. `wiretape show RUN` lists the checkpoints.")
@click.option("--model", default=None, metavar="NAME",
              help="Send the live requests with this model (the JSON `model` member, or "
                   "Gemini's path segment); the run stores what the agent sent.")
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=URL",
              help="Live origin for NAME (default: the recorded one). Repeatable.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Run file to write (default .wiretape/runs/<run-id>.wtape).")
@click.option("--verify", default=None, metavar="CMD",
              help="Shell command run in the fork's sandbox after the agent exits.")
@click.option("--verify-timeout", "verify_timeout", type=click.FloatRange(min=0, min_open=True),
              default=600.0, show_default=True, metavar="SECONDS",
              help="End the verify command (its whole process group) running longer.")
@click.option("--json", "as_json", is_flag=True, help="The result as JSON on stdout.")
@click.option("-y", "--yes", is_flag=True,
              help="Run the recorded command without asking, also of a run recorded by "
                   "another user or on another host.")
@click.option("--live-files", is_flag=True,
              help="Fork a run recorded with no snapshot: its agent runs on the live files "
                   "(and may change them).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def fork(run: str, upto: int, model: str | None, upstreams: tuple[str, ...], out: Path | None,
         verify: str | None, verify_timeout: float, as_json: bool, yes: bool,
         live_files: bool, command: tuple[str, ...]) -> None:
    """Run RUN's agent again on its restored files: its first N model turns
    from the recording, byte for byte and offline, then a live model. The
    fork is a run of its own (show, replay, diff, fork it again).

    Without COMMAND the recorded command runs again in the recorded
    directory; a run recorded by another user or on another host shows
    its command and asks first (as replay does; --yes runs it). A run
    with no snapshot is refused unless --live-files is given.

    Exit status: the agent's; 3 when a request before N did not match its
    recording (the difference is shown); 2 for bad input or no reachable
    upstream.

    \b
    Example:
      wiretape fork run_0123456789ab --from 2 --model gpt-4o
      wiretape fork run_0123456789ab --from 1 --upstream openai=http://127.0.0.1:8765/v1
      wiretape fork run.wtape --from 1 -- python agent.py
    """
    import asyncio

    from wiretape.cli.confirm import confirm_recorded_command
    from wiretape.launch.fork import ForkSettings
    from wiretape.launch.fork import fork as run_fork
    from wiretape.launch.origins import parse_pairs
    from wiretape.store.locate import resolve_run

    path = resolve_run(run)
    if not command and not yes:
        confirm_recorded_command(path, "fork")
    settings = ForkSettings(upto, model=model, upstreams=tuple(parse_pairs(upstreams,
                                                                           "--upstream")),
                            out=out, verify=verify, argv=command or None, yes=True,
                            live_files=live_files, verify_timeout_s=verify_timeout)
    prices = price_table()
    # With --json, stdout is the result's: the agent's output goes to stderr.
    result = asyncio.run(run_fork(path, settings,
                                  echo_stdout=sys.stderr.buffer if as_json else None,
                                  handle_signals=True))
    if as_json:
        click.echo(json_text(result.to_json(prices)))
    rewrite = (f"; model rewritten to {printable(model)} on {result.rewritten} of "
               f"{result.live} live request{'s' if result.live != 1 else ''}" if model else "")
    if model and result.not_rewritten:
        rewrite += f" ({result.not_rewritten} named no model and went as they came)"
    _say(f"wiretape fork: {result.run_id} from {result.parent_id} at {upto}: "
         f"{result.replayed} exchange{'s' if result.replayed != 1 else ''} served from the "
         f"recording, {result.live} live{rewrite}")
    if result.made_folder is not None:
        _say(f"wiretape fork: made the folder {printable(str(result.made_folder))} for the run "
             "file (it did not exist)")
    if result.checkpoints is not None:
        _say(checkpoint_note(result))
    if result.stopped is not None:
        for line in _stopped_lines(result):
            _say(line)
        sys.exit(EXIT_DIVERGED)
    if result.short:
        _say(f"wiretape fork: WARNING: {short_text(result)}")
    for failure in result.failures:
        _say(f"wiretape fork: live exchange {printable(failure)}")
    unreachable = _unreachable_line(result)
    if unreachable is not None:
        _say(unreachable)
    cost = result.cost(prices)
    from wiretape.inspect.prices import cost_text

    _say(f"wiretape fork: agent exit status {result.exit_status}; live tokens "
         f"{_tokens(result.input_tokens)} in, {_tokens(result.output_tokens)} out; cost "
         f"{cost_text(cost)}; {result.duration_s:.1f} s")
    if result.verify_status is not None:
        ended = (f" (ended after {verify_timeout:g} s: --verify-timeout)"
                 if result.verify_timed_out else "")
        _say(f"wiretape fork: verify exit status {result.verify_status}{ended}")
        if result.verify_status != 0:
            tail = result.verify_output.rstrip("\n").splitlines()[-VERIFY_TAIL_LINES:]
            for line in tail:
                _say(f"  {printable(line)}")
    for note in _price_notes([result], prices):
        _say(note)
    ref = printable(run_ref(result.path, result.run_id))
    _say(f"wiretape fork: run file {printable(str(result.path))} (try `wiretape show "
         f"{ref}`, `wiretape replay {ref}`)")
    sys.exit(result.exit_status if result.exit_status is not None else 1)


COMPARE_HEADER = ["model", "verify", "agent exit", "live", "tokens in", "tokens out", "cost",
                  "wall", "run"]


def compare_rows(results: list[ForkResult], prices: PriceTable) -> list[list[str]]:
    """One row per fork: model, verify's exit status (pass/FAIL), the
    agent's, live exchanges, tokens, cost ("—" unknown), wall time, run id."""
    from wiretape.inspect.prices import cost_text

    rows = []
    for r in results:
        if r.stopped is not None:
            verify = "stopped"
        elif r.verify_status is None:
            verify = "-"
        elif r.verify_timed_out:
            verify = "FAIL (timeout)"
        else:
            verify = f"{'pass' if r.verify_status == 0 else 'FAIL'} ({r.verify_status})"
        if r.short:
            verify += " (short)"
        rows.append([printable(r.live_model or "?"), verify,
                     "interrupted" if r.exit_status is None else str(r.exit_status), str(r.live),
                     _tokens(r.input_tokens), _tokens(r.output_tokens),
                     cost_text(r.cost(prices)), f"{r.duration_s:.1f} s",
                     printable(run_ref(r.path, r.run_id))])
    return rows


def compare_lines(results: list[ForkResult]) -> list[str]:
    """The comparison table, then its price notes and how many passed."""
    prices = price_table()
    passed = sum(1 for r in results if r.verify_status == 0 and r.stopped is None)
    return [*table(compare_rows(results, prices), COMPARE_HEADER),
            *_price_notes(results, prices),
            f"wiretape compare: {passed} of {len(results)} model"
            f"{'s' if len(results) != 1 else ''} passed verify"]


@click.command()
@click.argument("run")
@click.option("--from", "upto", type=click.IntRange(min=0), required=True, metavar="N",
              help="Serve the first N exchanges from the recording, then go live.")
@click.option("--models", required=True, metavar="A,B[,C]",
              help="The models to compare, comma-separated: one fork each.")
@click.option("--verify", required=True, metavar="CMD",
              help="Shell command run in each fork's sandbox after its agent exits; exit 0 "
                   "is a pass.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Forks run at once.")
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=URL",
              help="Live origin for NAME (default: the recorded one). Repeatable.")
@click.option("--verify-timeout", "verify_timeout", type=click.FloatRange(min=0, min_open=True),
              default=600.0, show_default=True, metavar="SECONDS",
              help="End a verify command (its whole process group) running longer; its row "
                   "shows FAIL (timeout).")
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON on stdout.")
@click.option("-y", "--yes", is_flag=True,
              help="Run the recorded command without asking, also of a run recorded by "
                   "another user or on another host.")
def compare(run: str, upto: int, models: str, verify: str, jobs: int, upstreams: tuple[str, ...],
            verify_timeout: float, as_json: bool, yes: bool) -> None:
    """Fork RUN from N once per model, each in its own sandbox, run CMD in
    each sandbox afterwards, and print one table: model, verify exit
    status, the agent's exit status, live exchanges, tokens in and out,
    cost where the model's price is known, wall time, run id.

    A run recorded by another user or on another host shows its command
    and asks first (--yes runs it); a run with no snapshot is refused.
    Each fork's start and end is a line on stderr. Exit status: 0 when at
    least one model passes verify, 1 when none does, 2 for bad input or
    no reachable upstream, 130/143 interrupted by SIGINT/SIGTERM (every
    agent and verify command is stopped).

    \b
    Example:
      wiretape compare run_0123456789ab --from 1 --models gpt-4o,gpt-4o-mini \\
          --verify 'python -m pytest -q' -j 2
    """
    import asyncio

    from wiretape.cli.confirm import confirm_recorded_command
    from wiretape.launch.fork import compare as run_compare
    from wiretape.launch.origins import parse_pairs
    from wiretape.store.locate import resolve_run

    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise UsageError("--models needs at least one model, e.g. --models gpt-4o,gpt-4o-mini")
    if len(set(names)) != len(names):
        raise UsageError(f"--models names a model twice ({models}): give each once")
    path = resolve_run(run)
    prices = price_table()
    _check_compare(path)
    if not yes:
        confirm_recorded_command(path, "compare")
    count = len(names)
    begun: list[str] = []

    def started(model: str) -> None:
        begun.append(model)
        _say(f"wiretape compare: [{len(begun)}/{count}] {printable(model)}: fork started")

    results = asyncio.run(run_compare(
        path, upto, names, verify, jobs=jobs,
        upstreams=tuple(parse_pairs(upstreams, "--upstream")), yes=True,
        verify_timeout_s=verify_timeout, handle_signals=True, on_start=started,
        on_done=lambda r: _say(f"wiretape compare: {printable(r.live_model or '?')}: "
                               f"{_ended(r)} ({printable(run_ref(r.path, r.run_id))})")))
    if as_json:
        click.echo(json_text({"parent": results[0].parent_id if results else None,
                              "from": upto, "verify": verify,
                              "forks": [r.to_json(prices) for r in results]}))
    else:
        for line in table(compare_rows(results, prices), COMPARE_HEADER):
            click.echo(line)
    for r in results:
        for line in _verify_lines(r, verify_timeout):
            _say(line)
        if r.stopped is not None:
            _say(f"wiretape compare: {printable(r.live_model or '?')}: "
                 + _stopped_lines(r)[0].removeprefix("wiretape fork: "))
        if r.short:
            _say(f"wiretape compare: {printable(r.live_model or '?')}: (short) "
                 + short_text(r))
        for failure in r.failures:
            _say(f"wiretape compare: {printable(r.live_model or '?')}: live exchange "
                 f"{printable(failure)}")
        unreachable = _unreachable_line(r)
        if unreachable is not None:
            _say(unreachable)
    for note in _price_notes(results, prices):
        _say(note)
    passed = sum(1 for r in results if r.verify_status == 0 and r.stopped is None)
    _say(f"wiretape compare: {passed} of {len(results)} model{'s' if len(results) != 1 else ''}"
         " passed verify")
    sys.exit(0 if passed else EXIT_ALL_FAILED)


def _check_compare(path: Path) -> None:
    """Refuse, before asking anything, a run compare cannot use (no
    snapshot). Raises UsageError."""
    from wiretape.launch.fork import check_parent

    check_parent(path, True, None)


def _verify_lines(result: ForkResult, timeout_s: float) -> list[str]:
    """Why a fork's verify failed: ended for running too long, or the last
    line of its output (its stderr and stdout together)."""
    model = printable(result.live_model or "?")
    if result.verify_timed_out:
        return [f"wiretape compare: {model}: verify ended after {timeout_s:g} s "
                "(--verify-timeout)"]
    if result.verify_status in (None, 0) or result.stopped is not None:
        return []
    last = next((line for line in reversed(result.verify_output.splitlines()) if line.strip()),
                None)
    said = f": {printable(last.strip())}" if last else " (it printed nothing)"
    return [f"wiretape compare: {model}: verify failed with exit status "
            f"{result.verify_status}{said}"]


def _ended(result: ForkResult) -> str:
    """How a fork ended, for its progress line."""
    if result.stopped is not None:
        return "stopped (a request before --from did not match its recording)"
    if result.verify_timed_out:
        return "verify timed out"
    if result.verify_status is None:
        return "done"
    return "verify passed" if result.verify_status == 0 else \
        f"verify FAILED (exit status {result.verify_status})"


def register(group: click.Group) -> None:
    group.add_command(fork)
    group.add_command(compare)
