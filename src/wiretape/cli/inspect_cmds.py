"""The commands that show what an agent did: ``show`` (timeline, ledger,
one exchange whole), ``report`` (a self-contained HTML page), ``export
--har`` and ``import --har`` / ``--vcr``. Registered on the main group by
``register``. Parsing and printing only: the work is in ``wiretape.inspect``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from wiretape.cli.files import check_folder, text_bytes, write_whole
from wiretape.cli.render import (
    Escaped,
    json_text,
    printable,
    table,
    verdict_line,
)
from wiretape.errors import UsageError

if TYPE_CHECKING:
    from wiretape.inspect.overview import RunOverview


def _echo(line: str) -> None:
    """Print a line of a run's contents: the key shapes are masked even in
    a run recorded before they were redacted everywhere."""
    from wiretape.redaction import redact_str

    click.echo(redact_str(line, "show"))


def _count(n: int, noun: str) -> str:
    """``1 exchange``, ``2 exchanges``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _read(run: str, label: str) -> RunOverview:
    from wiretape.inspect.overview import overview
    from wiretape.inspect.progress import Progress
    from wiretape.store.locate import resolve_run

    progress = Progress.on_stderr(label, None)
    try:
        return overview(resolve_run(run), progress.advance, progress.set_total)
    finally:
        progress.close()


def _show_json(ov: RunOverview, seq: int | None, frames: bool) -> dict[str, object]:
    import json  # (not loaded by --help)

    from wiretape.cli import inspect_render as text

    info = ov.info
    if seq is not None:
        exchange = next(e for e in ov.exchanges if e.seq == seq)
        view = ov.views[seq]
        row = next(r for r in ov.rows if r.seq == seq)
        data: dict[str, object] = {
            **row.to_json(),
            "http_version": dict(zip(("agent", "origin"), text.http_versions(exchange),
                                     strict=True)),
            "request": view.request.to_json(),
            "response": view.response.to_json() if view.response else None,
            "tool_results": [{"call_id": c, "name": n} for c, n in view.tool_results],
        }
        if frames:
            data["frames_data"] = text.frames_json(exchange)
        if exchange.messages:
            data["messages"] = text.messages_json(exchange)
        return data
    return {
        "run_id": info.run_id, "path": str(ov.path), "argv": list(info.argv), "cwd": info.cwd,
        "exit_status": info.exit_status, "started_at_ns": info.started_at_ns,
        "origins": [{"name": o.name, "upstream": o.upstream, "port": o.port} for o in info.origins],
        "exchanges": [r.to_json() for r in ov.rows],
        "ledger": ov.ledger.to_json(),
        "mcp_calls": [c.to_json() for c in ov.mcp_calls],
        "replays": [{"replay_id": v.replay_id, "mode": v.mode, "pass": v.passed,
                     "recorded": v.recorded, "exact": v.exact, "substituted": v.substituted,
                     "equivalent": v.equivalent, "diverged": v.diverged, "missing": v.missing,
                     "unused": v.unused}
                    for v in ov.verdicts],
        "import_notes": json.loads(info.extra.get("import_notes", "[]")),
        "fork": _fork_json(info.extra, len(ov.rows)),
        "checkpoints": list(ov.checkpoints),
    }


def _fork_json(extra: dict[str, str], exchanges: int) -> dict[str, object] | None:
    """A fork's parent, its ``--from`` (None: not a count this run of
    ``exchanges`` exchanges can hold) and the model rewrite (None: not a
    fork)."""
    from wiretape.inspect.forks import fork_from

    if "fork_parent" not in extra:
        return None
    return {"parent": extra["fork_parent"], "from": fork_from(extra, exchanges),
            "model": extra.get("fork_model") or None}


def fork_line(extra: dict[str, str], exchanges: int) -> str | None:
    """``forked from run_x: exchanges 0-0 served from it (exact), the rest
    live, model rewritten to M``; None for a run that is not a fork."""
    fork = _fork_json(extra, exchanges)
    if fork is None:
        return None
    upto = fork["from"]
    served = ("none served from it" if upto == 0 else
              "exchange #0 served from it" if upto == 1 else
              f"exchanges #0-#{int(str(upto)) - 1} served from it" if isinstance(upto, int)
              else "some exchanges served from it")
    model = (f", the live requests' model rewritten to {fork['model']}" if fork["model"]
             else "")
    return f"  forked from {fork['parent']} at {upto}: {served}, the rest live{model}"


@click.command()
@click.argument("run")
@click.option("--exchange", "seq", type=int, metavar="N", help="Show exchange N whole.")
@click.option("--frames", is_flag=True, help="With --exchange: the raw frames too.")
@click.option("--json", "as_json", is_flag=True, help="Everything as JSON on stdout.")
def show(run: str, seq: int | None, frames: bool, as_json: bool) -> None:
    """Show RUN as a timeline (one row per exchange: offset, time to first
    byte, duration, model, stop reason, tokens, excerpt, tool calls), the
    tool-call ledger, the checkpoints a fork can start from (N: after the
    first N exchanges) and the replays; or one exchange whole.

    \b
    Example:
      wiretape show run_0123456789ab
      wiretape show run_0123456789ab --exchange 1 --frames
    """
    from wiretape.cli import inspect_render as text

    if frames and seq is None:
        raise UsageError("--frames goes with --exchange N")
    ov = _read(run, "reading")
    if seq is not None and seq not in ov.views:
        raise UsageError(f"run {ov.info.run_id} has no exchange {seq}: its exchanges are "
                         f"{', '.join(str(s) for s in ov.views) or 'none'}")
    if as_json:
        _echo(json_text(_show_json(ov, seq, frames)))
        return
    # Every text from the run is escaped; only wiretape's own styles reach
    # the terminal (render.Escaped).
    escaped = Escaped()
    if seq is not None:
        exchange = next(e for e in ov.exchanges if e.seq == seq)
        row = next(r for r in ov.rows if r.seq == seq)
        for line in text.exchange_lines(exchange, ov.views[seq], row, frames, escaped.style):
            _echo(escaped(line))
        return
    for line in text.run_heading(ov.info, str(ov.path), ov.exchanges):
        _echo(escaped(line))
    import json  # (not loaded by --help)
    for note in json.loads(ov.info.extra.get("import_notes", "[]")):
        _echo(f"  import note: {printable(str(note))}")
    said = fork_line(ov.info.extra, len(ov.rows))
    if said is not None:
        _echo(escaped(printable(said)))
    for line in table(text.timeline_rows(ov.rows), text.TIMELINE_HEADER):
        _echo(escaped(line))
    for exchange in ov.exchanges:
        for line in text.websocket_lines(exchange, 12, escaped.style):
            _echo(escaped(line))
    for line in [*text.ledger_lines(ov.ledger, escaped.style, ov.mcp_calls),
                 *text.mcp_call_lines(ov.mcp_calls, escaped.style)]:
        _echo(escaped(line))
    from wiretape.store.locate import run_ref

    _echo(f"checkpoints (wiretape fork {printable(run_ref(ov.path, ov.info.run_id))} --from N): "
          + " ".join(str(n) for n in ov.checkpoints))
    if ov.verdicts:
        _echo(click.style(f"replays: {len(ov.verdicts)}", bold=True))
        for v in ov.verdicts:
            _echo(f"  {printable(v.replay_id)}: "
                  + verdict_line(v).removeprefix("wiretape: "))


@click.command()
@click.argument("run")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="HTML file to write (default: <run-id>.html here).")
def report(run: str, out: Path | None) -> None:
    """Write RUN as one self-contained HTML page: the waterfall of its
    exchanges, the conversation, the tool-call ledger, its replays with
    their divergences side by side, and its forks (`wiretape fork`,
    `wiretape compare`: the run files beside it and in the runs folder)
    as one comparison. Opens offline; it loads nothing.

    \b
    Example:
      wiretape report run_0123456789ab -o run.html
    """
    from wiretape.cli.fork_cmds import price_table
    from wiretape.inspect.forks import forks_of
    from wiretape.inspect.report import render
    from wiretape.store.locate import runs_dir

    if out is not None:
        check_folder(out)  # before the run is read
    ov = _read(run, "reading")
    forks = forks_of(ov.info.run_id, [ov.path.parent, runs_dir()])
    try:
        prices = price_table()
    except UsageError as exc:  # (a bad [prices] entry: the report is still written)
        from wiretape.inspect.prices import PriceTable

        prices = PriceTable.with_overrides({})
        click.echo(f"wiretape: note: {exc} (the report's costs use the built-in prices)",
                   err=True)
    page = render(ov.info, str(ov.path), ov.rows, ov.views, ov.ledger, ov.verdicts,
                  {e.seq: e.messages for e in ov.exchanges if e.messages}, ov.mcp_calls,
                  forks=forks, prices=prices)
    target = out or Path(f"{ov.info.run_id}.html")
    write_whole(target, text_bytes(page))
    counts = (_count(len(ov.rows), "exchange"), _count(len(ov.ledger.entries), "tool call"),
              _count(len(ov.verdicts), "replay"),
              *([_count(len(forks), "fork")] if forks else []))
    click.echo(f"wiretape: report of {printable(ov.info.run_id)} ({', '.join(counts)}) -> "
               f"{target}", err=True)


@click.command()
@click.argument("run")
@click.option("--har", "har_file", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="HAR 1.2 file to write ('-' for stdout).")
def export(run: str, har_file: Path) -> None:
    """Write RUN as HAR 1.2, which browser developer tools open: bodies
    verbatim (base64 where not text), frame timing in `_frames`, redacted
    values still redacted. `wiretape import --har` reads it back.

    \b
    Example:
      wiretape export run_0123456789ab --har run.har
    """
    from wiretape.inspect.har import export_har
    from wiretape.inspect.progress import Progress
    from wiretape.store.locate import resolve_run
    from wiretape.store.runfile import RunFile

    if str(har_file) != "-":
        check_folder(har_file)  # before the run is read
    path = resolve_run(run)
    with RunFile.open(path) as rf:
        progress = Progress.on_stderr("exporting", rf.exchange_count())
        try:
            data = export_har(rf.info(), iter(rf.exchanges()), rf.redactions(), progress.advance)
        finally:
            progress.close()
    # A name or argument that was not UTF-8 (a lone surrogate) is written as
    # its JSON escape, which reads back as the same string.
    import json  # (not loaded by --help)
    payload = text_bytes(json.dumps(data, indent=1, ensure_ascii=False))
    if str(har_file) == "-":
        click.echo(payload)
        return
    write_whole(har_file, payload)
    click.echo(f"wiretape: exported {_count(len(data['log']['entries']), 'exchange')} of "
               f"{printable(str(data['log']['_wiretape']['run_id']))} -> {har_file}", err=True)


@click.command(name="import")
@click.option("--har", "har_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A HAR file (ours or a browser's).")
@click.option("--vcr", "vcr_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A VCR.py / pytest-recording (or Ruby VCR) cassette.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Run file to write (default .wiretape/runs/<run-id>.wtape).")
def import_cmd(har_file: Path | None, vcr_file: Path | None, out: Path | None) -> None:
    """Read a HAR file or a VCR cassette into a new run, to show, report or
    replay it (with the command after --: imported runs have none).

    \b
    Example:
      wiretape import --vcr tests/cassettes/test_chat.yaml
      wiretape import --har run.har -o copy.wtape
    """
    from wiretape.inspect.progress import Progress

    if (har_file is None) == (vcr_file is None):
        raise UsageError("give exactly one of --har FILE or --vcr FILE")
    progress = Progress.on_stderr("importing", None)
    try:
        if har_file is not None:
            from wiretape.inspect.har import import_har

            done = import_har(har_file, out, progress.advance, progress.set_total)
        else:
            from wiretape.inspect.vcr import import_vcr

            assert vcr_file is not None
            done = import_vcr(vcr_file, out, progress.advance, progress.set_total)
    finally:
        progress.close()
    for note in done.notes:
        click.echo(f"wiretape: note: {printable(note)}", err=True)
    click.echo(f"wiretape: imported {_count(done.exchanges, 'exchange')} into {done.run_id} -> "
               f"{done.path}", err=True)
    click.echo(done.run_id)


def register(group: click.Group) -> None:
    for command in (show, report, export, import_cmd):
        group.add_command(command)


__all__ = ["register"]
