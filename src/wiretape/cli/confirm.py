"""Asking before a run's recorded command runs, when someone else, or
another host, recorded it (``wiretape.launch.trust``): replay, fork and
compare ask the same question and take the same ``--yes``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wiretape.cli import render
from wiretape.errors import EXIT_USAGE, UsageError


def confirm_recorded_command(path: Path, verb: str = "replay") -> None:
    """A run recorded by someone else, or elsewhere: show its command and
    ask before running it (``verb``: the command asking, e.g. ``fork``);
    with no terminal to ask on, refuse (UsageError). A "no" exits with
    status 2."""
    from wiretape.launch.trust import recorded_elsewhere
    from wiretape.store.runfile import RunFile

    with RunFile.open(path) as rf:
        elsewhere = recorded_elsewhere(rf.info())
    if elsewhere is None:
        return
    shown = render.command_line(elsewhere.argv)
    where = render.printable(elsewhere.cwd)
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(
            f"run {elsewhere.run_id} was recorded {elsewhere.who()}, not here: its command "
            f"({shown}, in {where}) is not run without asking; pass --yes to run it, or give "
            "the command to run after --")
    say(render.printable(f"wiretape: run {elsewhere.run_id} was recorded {elsewhere.who()}, "
                         "not by you here."))
    doing = {"replay": "replaying it", "fork": "forking it",
             "compare": "comparing models on it"}.get(verb, f"{verb} on it")
    say(f"wiretape: {doing} runs its recorded command in {where}, against files "
        "restored from the run (they come from the run, not from you):")
    say(f"    {shown}")
    if not click.confirm("Run this command?", default=False, err=True):
        say(f"wiretape: not {'replayed' if verb == 'replay' else 'run'} (give the command to "
            "run after --, or pass --yes)")
        sys.exit(EXIT_USAGE)


def say(line: str) -> None:
    click.echo(line, err=True)
