"""The commands about secrets left in runs: ``scrub`` (rewrite a run with
more rules) and ``scan`` (report what is left, for CI). Registered on the
main group by ``register``. Parsing and printing only: the work is in
``wiretape.scrub``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from wiretape.cli.render import printable
from wiretape.errors import UsageError, WiretapeError

if TYPE_CHECKING:
    from wiretape.scrub.runs import ScrubReport


def _counts(report: ScrubReport) -> str:
    return ", ".join(f"{place} {n}" for place, n in sorted(report.counts.items()))


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _where(location: str) -> str:
    """A fact's place for people: ``stdout``, ``snapshot files (notes.txt)``;
    a name from the run escaped."""
    from wiretape.scrub.runs import place_of

    _, _, detail = location.partition(":")
    return printable(place_of(location) + (f" ({detail})" if detail else ""))


def _runs(refs: tuple[str, ...]) -> list[str]:
    """Run ids and files as given; a folder: every run file under it.
    Raises UsageError for a folder that holds none."""
    out = []
    for ref in refs:
        folder = Path(ref)
        if folder.is_dir():
            found = sorted(str(p) for p in folder.rglob("*.wtape") if p.is_file())
            if not found:
                raise UsageError(f"no run files (*.wtape) in {ref}: give run files, run ids or "
                                 "folders that hold run files")
            out.extend(found)
        else:
            out.append(ref)
    return out


def _few(items: list[str], n: int = 4) -> str:
    return printable(", ".join(items[:n])) + (f" and {len(items) - n} more"
                                              if len(items) > n else "")


@click.command()
@click.argument("run")
@click.option("--match", "matches", multiple=True, metavar="TEXT",
              help="Replace TEXT (literal) wherever the run keeps it. Repeatable.")
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A file of regular expressions, one a line (# comments), each replaced "
                   "wherever it matches.")
@click.option("--snapshot-include", "include", multiple=True, metavar="PATTERN",
              help="Keep snapshot entries matching PATTERN that a snapshot leaves out "
                   "(.env*, .git, keys, credentials files). Repeatable.")
@click.option("--drop", "drop", multiple=True, metavar="PATTERN",
              help="Drop snapshot entries matching PATTERN too (a binary file holding a "
                   "secret, which cannot be rewritten). Repeatable.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the scrubbed run here instead of replacing RUN.")
@click.option("--json", "as_json", is_flag=True, help="What was found where, as JSON on stdout.")
def scrub(run: str, matches: tuple[str, ...], rules_file: Path | None, include: tuple[str, ...],
          drop: tuple[str, ...], out: Path | None, as_json: bool) -> None:
    """Rewrite RUN without its secrets: the known key shapes, each --match
    TEXT and each --rules regex are replaced (same length) everywhere the
    run keeps text: exchanges (headers, targets, bodies, gzip/deflate/zstd
    ones decoded and coded again, frames), the command line, variable
    names, output, snapshot and outcome files, replays and connect
    metadata. Snapshot entries a recording leaves out today (.env, .git,
    keys) are dropped, and those --drop names; binary files are copied as
    they are (a secret found in one is reported). The new run replaces RUN
    in one rename.

    A replay of the scrubbed run still matches: a value met in the live
    agent's environment or requests whose fingerprint was scrubbed is
    replaced the same way before comparing. Do not scrub a run that is
    being recorded or replayed.

    \b
    Example:
      wiretape scrub run_0123456789ab --match 'acme-internal-token-77'
      wiretape scrub run.wtape --rules secrets.txt -o clean.wtape
    """
    from wiretape.scrub.runs import rules_for, scrub_run
    from wiretape.store.locate import resolve_run

    path = resolve_run(run)
    rules, labels = rules_for(matches, rules_file)
    report = scrub_run(path, rules, labels, out=out, include=include, drop=drop)
    if as_json:
        import json  # (not loaded by --help)
        click.echo(json.dumps(report.to_json(), indent=2))
    total = sum(report.counts.values())
    click.echo(f"wiretape: scrubbed {report.path}: "
               f"{_plural(total, 'replacement', 'replacements')}"
               + (f" ({_counts(report)})" if total else ""), err=True)
    if report.recoded:
        click.echo(f"wiretape: {_plural(report.recoded, 'coded body', 'coded bodies')} decoded "
                   "and coded again (stored blocks)", err=True)
    if report.dropped:
        click.echo(f"wiretape: dropped from the snapshots: {_few(list(report.dropped))}",
                   err=True)
    if report.binary:
        click.echo(f"wiretape: {_plural(len(report.binary), 'binary file', 'binary files')} "
                   f"copied as they are: {_few(report.binary)}", err=True)
    for fact in report.in_binary:
        click.echo(printable(
            f"wiretape: warning: {fact.location} is binary and holds a secret ({fact.name} "
            f"{fact.fingerprint}): it cannot be rewritten; drop it with --drop "
            f"{fact.location.split(':', 1)[-1]}"), err=True)


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN|FOLDER...")
@click.option("--match", "matches", multiple=True, metavar="TEXT",
              help="Look for TEXT (literal) too. Repeatable.")
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False, path_type=Path),
              help="A file of regular expressions, one a line, to look for too.")
@click.option("--json", "as_json", is_flag=True, help="The findings as JSON on stdout.")
def scan(runs: tuple[str, ...], matches: tuple[str, ...], rules_file: Path | None,
         as_json: bool) -> None:
    """Look for secrets left in runs (run ids, files, or folders searched
    for *.wtape): the known key shapes (and --match, --rules) everywhere a
    run keeps text, also in binary files, snapshot entries a recording
    leaves out today (.env, .git, keys), and the file's bytes outside any
    record. Prints where, by which rule, and a fingerprint, never the
    secret. Exit status 1 when anything is found (for CI), 2 when a run
    cannot be read.

    \b
    Example:
      wiretape scan tests/runs
      wiretape scan run_0123456789ab --match 'acme-internal'
    """
    from wiretape.scrub.runs import rules_for, scan_run
    from wiretape.store.locate import resolve_run

    rules, _ = rules_for(matches, rules_file)
    reports, failed = [], False
    for ref in _runs(runs):
        try:
            report = scan_run(resolve_run(ref), rules)
        except WiretapeError as exc:
            click.echo(f"wiretape: error: {printable(str(exc))}", err=True)
            failed = True
            continue
        reports.append(report)
        if as_json:
            continue
        if not report.found:
            click.echo(f"{report.path}: clean")
        for fact in report.facts:
            click.echo(f"{report.path}: {_where(fact.location)}: {printable(fact.name)} "
                       f"{fact.fingerprint}")
        for path, reason in report.dropped.items():
            click.echo(f"{report.path}: snapshot holds {printable(path)} ({reason}; a recording "
                       "leaves it out now)")
        for fact in report.in_binary:
            click.echo(f"{report.path}: {_where(fact.location)} (binary, cannot be rewritten: "
                       f"scrub --drop it): {printable(fact.name)} {fact.fingerprint}")
        for fact in report.loose:
            click.echo(f"{report.path}: file bytes outside any record: {fact.name} "
                       f"{fact.fingerprint}")
        if report.binary and not report.in_binary:
            click.echo(f"{report.path}: "
                       f"{_plural(len(report.binary), 'binary file', 'binary files')}, no key "
                       f"shape in them: {_few(report.binary)}")
    if as_json:
        import json  # (not loaded by --help)
        click.echo(json.dumps([r.to_json() for r in reports], indent=2))
    found = any(r.found for r in reports)
    if found and not as_json:
        click.echo("wiretape: secrets found: `wiretape scrub RUN` replaces them", err=True)
    raise SystemExit(2 if failed else 1 if found else 0)


def register(group: click.Group) -> None:
    for command in (scrub, scan):
        group.add_command(command)


__all__ = ["register"]
