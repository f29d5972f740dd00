"""The command line: parsing, and printing what the other parts return.

Every user error is one line on stderr and exit status 2; no traceback.

The engine (launch, proxy, store, matching and the libraries under them) is
imported inside the commands, so ``wiretape --help`` loads only click and
these definitions.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from wiretape import __version__
from wiretape.cli import fork_cmds, inspect_cmds, render, secrets_cmds
from wiretape.cli.check_cmd import check
from wiretape.cli.confirm import confirm_recorded_command
from wiretape.errors import EXIT_NOT_SAVED, EXIT_USAGE, UsageError, WiretapeError
from wiretape.limits import DEFAULT_MAX_BODY
from wiretape.limits import DEFAULT_SNAPSHOT_MAX_BYTES as DEFAULT_SNAPSHOT_MAX

if TYPE_CHECKING:
    from wiretape.launch.intercept import InterceptionArguments
    from wiretape.model import Origin
    from wiretape.playback.decide import Mode, Substitution
    from wiretape.playback.verdict import Verdict

T = TypeVar("T")
#: A function being made a click command.
C = TypeVar("C", bound=Callable[..., object])


def _say(line: str) -> None:
    click.echo(line, err=True)


def _fail(exc: WiretapeError) -> None:
    # One line, whatever text from a run file it quotes.
    _say(f"wiretape: error: {render.printable(str(exc))}")
    sys.exit(exc.exit_code)


def listening_label(name: str) -> str:
    """What ``serve`` calls the base URL it prints for origin ``name``:
    ``listening`` for the unnamed origin (``--upstream URL``, named
    ``upstream``: not to be read as the upstream's URL), the name itself
    for a named one (``--upstream openai=URL``)."""
    return "listening" if name == "upstream" else name


def _served(then: Callable[[list[Origin]], None] | None = None
            ) -> Callable[[list[Origin]], None]:
    """The ``on_listening`` of this process's own proxy: ``then(origins)``,
    after moving what start-up made (the modules, the run file, a replay's
    tape) out of the cyclic garbage collector's reach (``gc.freeze``, for
    the process's life): a full collection while serving then walks only
    what serving made, instead of blocking the event loop for tens of ms
    walking that too. (No collection first: it would cost as much, for
    the few cycles start-up leaves.)"""

    def listening(origins: list[Origin]) -> None:
        import gc

        gc.freeze()
        if then is not None:
            then(origins)

    return listening


def _ports(values: Sequence[str]) -> list[tuple[str | None, int]]:
    out: list[tuple[str | None, int]] = []
    for value in values:
        name, _, num = value.rpartition("=")
        if not num.isdigit() or not 0 <= int(num) <= 65535:
            raise UsageError(f"invalid --port {value!r}: expected N or NAME=N with 0 <= N <= 65535")
        out.append((name or None, int(num)))
    return out


def _substitutions(values: Sequence[str]) -> tuple[Substitution, ...]:
    from wiretape.launch.origins import parse_pairs
    from wiretape.playback.decide import Substitution

    return tuple(
        Substitution(o.encode(), n.encode())
        for o, n in parse_pairs(values, "--substitute", "OLD=NEW")
    )


def _allow_option(command: C) -> C:
    return click.option(
        "--allow", "allow", multiple=True, metavar="RULES",
        help="Accept requests equal to their recording up to these learned correspondences, "
             "counted as equivalent: ids (UUIDs and other ids a run makes), clock (one "
             "consistent clock shift), key-order (JSON members reordered), durations "
             "(measured times), paths (declared substitutions); none for strict. "
             "Comma-separated; repeatable. On replay it replaces the run's and the project's.")(
        command)


def _allowances(values: Sequence[str]) -> frozenset[str]:
    from wiretape.matching.correspond import parse_allowances

    try:
        return parse_allowances(",".join(values), "--allow")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:  # click's own signature: what the command returns
        try:
            return super().invoke(ctx)
        except WiretapeError as exc:
            _fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wiretape")
def cli() -> None:
    """Record an AI agent's provider traffic and replay it offline.

    \b
    wiretape record -- python agent.py          record a run
    wiretape replay run_0123456789ab            replay it with the provider gone
    wiretape ls                                 list runs
    wiretape mcp -- python server.py            a stdio MCP server, recorded and replayed
    """


def _intercept_options(command: C) -> C:
    """The TLS interception options of record and serve --record."""
    for option in reversed((
        click.option("--intercept", is_flag=True,
                     help="Listen as an HTTPS proxy and terminate TLS for the provider hosts "
                          "with a CA made for this run (for clients whose origin is compiled in)."),
        click.option("--intercept-host", "intercept_hosts", multiple=True, metavar="HOST",
                     help="Intercept HOST too (besides the known provider hosts). Repeatable."),
        click.option("--upstream-ca", type=click.Path(dir_okay=False, path_type=Path),
                     help="PEM file of CA certificates trusted for the real origins, besides "
                          "the usual roots (a private gateway)."),
        click.option("--resolve", multiple=True, metavar="HOST=IP:PORT",
                     help="Reach HOST at IP:PORT (its certificate is still checked against "
                          "HOST). Repeatable."),
    )):
        command = option(command)
    return command


def _tools_options(command: C) -> C:
    """The tool-fixture options of record (``--tools``)."""
    for option in reversed((
        click.option("--tools", is_flag=True,
                     help="Record the agent's own HTTP and HTTPS traffic too (what its tools "
                          "fetch), as tool exchanges a replay serves back; implies --intercept. "
                          "Records more of your traffic: off by default."),
        click.option("--tools-except", "tools_except", multiple=True, metavar="HOST",
                     help="Leave HOST out of --tools: the agent reaches it directly, when "
                          "recording and when replaying (a local service the test provides "
                          "itself). Repeatable."),
    )):
        command = option(command)
    return command


def _intercept_arguments(intercept: bool, hosts: tuple[str, ...], upstream_ca: Path | None,
                         resolve: tuple[str, ...], upstreams: tuple[str, ...],
                         tools: bool = False, tools_except: tuple[str, ...] = (),
                         ) -> InterceptionArguments:
    from wiretape.launch.intercept import interception_settings

    if hosts and not (intercept or tools):
        raise UsageError("--intercept-host needs --intercept")
    if (intercept or tools) and upstreams:
        raise UsageError(f"--upstream and {'--tools' if tools else '--intercept'} exclude each "
                         "other: with --intercept the agent keeps its own origins (use "
                         "--resolve HOST=IP:PORT to reach one elsewhere)")
    return interception_settings(hosts if intercept or tools else None, upstream_ca, resolve,
                                 tools=tools, tools_except=tools_except)


@cli.command()
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Run file to write (default .wiretape/runs/<run-id>.wtape).")
@click.option("--upstream", "upstreams", multiple=True, metavar="NAME=URL",
              help="Origin to forward NAME to, e.g. openai=https://api.openai.com/v1. Repeatable.")
@click.option("--port", "ports", multiple=True, metavar="[NAME=]N",
              help="Fixed proxy port for an origin (default: the first --upstream, else openai).")
@click.option("--max-body", type=click.IntRange(min=1), default=DEFAULT_MAX_BODY, show_default=True,
              help="Largest request body (and WebSocket message) accepted, in bytes; a larger "
                   "body gets 413, a larger message closes its session with 1009.")
@click.option("--snapshot", "snapshot_paths", multiple=True, metavar="PATH",
              help="Tree to snapshot before the agent starts (default: the working directory; "
                   "~ allowed). Repeatable.")
@click.option("--no-snapshot", is_flag=True, help="Snapshot nothing.")
@click.option(
    "--snapshot-max",
    type=click.IntRange(min=1),
    default=DEFAULT_SNAPSHOT_MAX,
    show_default=True,
    help="Largest total snapshot, in bytes; larger is refused.",
)
@click.option("--snapshot-include", "snapshot_include", multiple=True, metavar="PATTERN",
              help="Take files or folders the snapshot leaves out (.env*, .git, *.wtape, keys "
                   "and other credentials files, binary files) when their name or relative "
                   "path matches PATTERN (fnmatch: '.env.example', 'assets/*.png'). Repeatable.")
@click.option("--snapshot-binary", is_flag=True,
              help="Take binary files into the snapshot (their bytes are not checked for "
                   "secrets).")
@_allow_option
@_intercept_options
@_tools_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def record(out: Path | None, upstreams: tuple[str, ...], ports: tuple[str, ...], max_body: int,
           snapshot_paths: tuple[str, ...], no_snapshot: bool, snapshot_max: int,
           snapshot_include: tuple[str, ...], snapshot_binary: bool, allow: tuple[str, ...],
           intercept: bool, intercept_hosts: tuple[str, ...], upstream_ca: Path | None,
           resolve: tuple[str, ...], tools: bool, tools_except: tuple[str, ...],
           command: tuple[str, ...]) -> None:
    """Run COMMAND with its provider base URLs pointed at a recording proxy
    (with --intercept: with HTTPS_PROXY and a CA bundle instead).

    Secrets are redacted before anything is written, wherever the run keeps
    text (exchanges, the command line, output, snapshot files); the
    snapshot leaves out .env*, .git, run files, keys, credentials files and
    binary files, and says so on stderr.

    Exit status: the agent's; 2 usage or input error; 4 the run file could
    not be written in full (disk full, say: later requests were refused, not
    forwarded, and what was saved before stays readable).

    \b
    Example:
      wiretape record -- python -m wiretape.examples.tool_agent "What is in notes.txt?"
      wiretape record --upstream custom=http://127.0.0.1:9000/v1 --port 8089 -- nanobot agent -m hi
      wiretape record --intercept -- python my_agent.py
      wiretape record --tools -- python my_agent.py
    """
    import asyncio

    from wiretape.launch.origins import parse_pairs
    from wiretape.launch.record import record as do_record
    from wiretape.snapshot.tree import SnapshotPolicy
    from wiretape.snapshot.tree import summary as summary_of

    if no_snapshot and snapshot_paths:
        raise UsageError("--snapshot and --no-snapshot exclude each other")
    snapshots = [] if no_snapshot else [Path(p) for p in snapshot_paths] or None
    result = asyncio.run(
        do_record(
            list(command),
            out=out,
            upstreams=parse_pairs(upstreams, "--upstream"),
            ports=_ports(ports),
            max_body=max_body,
            snapshots=snapshots,
            snapshot_max=snapshot_max,
            snapshot_policy=SnapshotPolicy(include=snapshot_include, binary=snapshot_binary),
            allow=sorted(_allowances(allow)),
            on_listening=_served(),
            **_intercept_arguments(intercept, intercept_hosts, upstream_ca, resolve, upstreams,
                                   tools, tools_except),
        )
    )
    for line in render.record_summary(result):
        _say(line)
    for root, left_out in result.left_out:
        if left_out:
            _say(f"wiretape: the snapshot of {root} left out {summary_of(left_out)} "
                 "(--snapshot-include PATTERN or --snapshot-binary to take them)")
    if result.write_error is not None:
        sys.exit(result.write_error.exit_code)
    sys.exit(result.exit_status if result.exit_status is not None else 0)


def _mode(strict: bool, diagnostic: bool) -> Mode:
    from wiretape.playback.decide import Mode

    if strict and diagnostic:
        raise UsageError("--strict and --diagnostic exclude each other")
    return Mode.DIAGNOSTIC if diagnostic else Mode.STRICT


@cli.command()
@click.argument("run")
@click.option("--strict", is_flag=True, help="Stop at the first mismatch (default).")
@click.option("--diagnostic", is_flag=True, help="Go on past mismatches, labelling each.")
@click.option("--pace", type=click.Choice(["fast", "recorded"]), default="fast", show_default=True,
              help="fast: frames as fast as possible (one write each); recorded: recorded timing.")
@click.option("--substitute", "substitutes", multiple=True, metavar="OLD=NEW",
              help="Declared substitution: the recording has OLD where the live run has NEW "
                   "(literal bytes); counted apart from exact. Repeatable.")
@click.option(
    "--allow-substitutions", is_flag=True, help="Strict mode accepts substituted requests."
)
@click.option("--port", "ports", multiple=True, metavar="[NAME=]N",
              help="Proxy port for an origin (default: the recorded port when free).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the verdict as JSON on stdout, after the agent's own output "
                   "(for the verdict alone: wiretape verdict RUN --json).")
@click.option("--keep", is_flag=True, help="Keep the sandbox directory afterwards.")
@click.option("--same-paths/--no-same-paths", default=None,
              help="Show the sandbox at the original paths (default where Linux allows it), "
                   "or map paths into it (a declared substitution).")
@click.option("--offline", is_flag=True,
              help="Run the agent in a network namespace with only loopback (Linux).")
@click.option("--clock", type=click.Choice(["real", "recorded"]), default="real", show_default=True,
              help="recorded: the agent's clock starts at the recorded start time (libfaketime).")
@click.option("--state", type=click.Choice(["recorded", "current"]), default="recorded",
              show_default=True,
              help="recorded: restore the snapshots taken before recording; current: copy the "
                   "snapshotted folders as they are now (still into the sandbox).")
@click.option("--intercept/--no-intercept", default=None,
              help="Answer as an HTTPS proxy with a CA made for this replay (default: as "
                   "the run was recorded).")
@click.option("-y", "--yes", is_flag=True,
              help="Run the recorded command without asking, also of a run recorded by "
                   "another user or on another host.")
@_allow_option
@click.option("--outcome-ignore", "outcome_ignore", multiple=True, metavar="GLOB",
              help="Leave files matching GLOB (a path relative to a snapshotted folder, "
                   "fnmatch) out of the outcome; named in the verdict. Repeatable.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def replay(run: str, strict: bool, diagnostic: bool, pace: str, substitutes: tuple[str, ...],
           allow_substitutions: bool, ports: tuple[str, ...], as_json: bool, keep: bool,
           same_paths: bool | None, offline: bool, clock: str, state: str,
           intercept: bool | None, yes: bool, allow: tuple[str, ...],
           outcome_ignore: tuple[str, ...], command: tuple[str, ...]) -> None:
    """Replay RUN (a run id or file) against COMMAND with no provider.

    Without COMMAND the recorded command runs again in the recorded
    directory. A run recorded by another user or on another host shows its
    command and asks first (without a terminal to ask on: pass --yes, or
    give the command after --). Exit status: 0 pass, 1 exchanges pass but
    the outcome differs, 3 exchanges fail, 2 usage or input error, 4 the
    replay could not be stored, 130/143 interrupted by SIGINT/SIGTERM.

    \b
    Example:
      wiretape replay run_0123456789ab
      wiretape replay --diagnostic run.wtape -- python agent.py
    """
    import asyncio

    from wiretape.launch.replay import ReplaySettings
    from wiretape.launch.replay import replay as do_replay
    from wiretape.playback.pacing import Pace
    from wiretape.store.locate import resolve_run

    settings = ReplaySettings(mode=_mode(strict, diagnostic), pace=Pace(pace),
                              substitutions=_substitutions(substitutes),
                              allow_substitutions=allow_substitutions, ports=tuple(_ports(ports)),
                              keep=keep, same_paths=same_paths, offline=offline,
                              clock_recorded=clock == "recorded", state=state,
                              intercept=intercept,
                              allow=_allowances(allow) if allow else None,
                              outcome_ignore=outcome_ignore)
    path = resolve_run(run)
    if not command and not yes:
        confirm_recorded_command(path)
    verdict = asyncio.run(do_replay(path, list(command) or None, settings,
                                    on_listening=_served()))
    _say(render.verdict_line(verdict))
    for line in render.verdict_details(verdict):
        _say(line)
    if pace == "fast":
        _say("wiretape: timing not reproduced (--pace fast): frames written as fast as possible, "
             "one write per recorded frame")
    if as_json:
        click.echo(render.verdict_json(verdict))
    sys.exit(verdict.exit_code)


@cli.command()
@click.option("--record", "record_mode", is_flag=True, help="Record: forward to --upstream.")
@click.option("--replay", "replay_run", metavar="RUN", help="Replay RUN.")
@click.option("--upstream", "upstreams", multiple=True, metavar="[NAME=]URL",
              help="Origin to record (with --record).")
@click.option("--port", "ports", multiple=True, metavar="[NAME=]N", help="Port to listen on.")
@click.option(
    "-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Run file to write."
)
@click.option("--strict", is_flag=True)
@click.option("--diagnostic", is_flag=True)
@click.option("--pace", type=click.Choice(["fast", "recorded"]), default="fast")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON on stdout.")
@click.option("--max-body", type=click.IntRange(min=1), default=DEFAULT_MAX_BODY, show_default=True,
              help="Largest request body (and WebSocket message) accepted, in bytes; a larger "
                   "body gets 413, a larger message closes its session with 1009.")
@_allow_option
@_intercept_options
@_tools_options
def serve(
    record_mode: bool,
    replay_run: str | None,
    upstreams: tuple[str, ...],
    ports: tuple[str, ...],
    out: Path | None,
    strict: bool,
    diagnostic: bool,
    pace: str,
    as_json: bool,
    max_body: int,
    allow: tuple[str, ...],
    intercept: bool,
    intercept_hosts: tuple[str, ...],
    upstream_ca: Path | None,
    resolve: tuple[str, ...],
    tools: bool,
    tools_except: tuple[str, ...],
) -> None:
    """Attach: listen until SIGINT/SIGTERM for an agent configured to call
    the printed URL (for agents that read their origin from a config file).

    Once it listens, it prints one line per origin, the base URL to give
    the agent: ``listening: URL`` (``NAME: URL`` for an origin given as
    ``--upstream NAME=URL``); with --intercept, ``export NAME=VALUE`` lines
    instead. Then ``export WIRETAPE_MCP=VALUE``: set it in the agent's
    environment, and the stdio MCP servers it starts through
    ``wiretape mcp`` are recorded (replayed) by this process.

    \b
    Example:
      wiretape serve --record --upstream https://api.openai.com/v1 --port 8089
      wiretape serve --replay run_0123456789ab
    """
    import asyncio

    if record_mode == bool(replay_run):
        raise UsageError("give exactly one of --record or --replay RUN")
    if (tools or tools_except) and not record_mode:
        raise UsageError("--tools goes with --record: a replay serves the tool exchanges the "
                         "run recorded, as it was recorded")
    from wiretape.proxy.mcp import VARIABLE as MCP_VARIABLE

    stop = asyncio.Event()
    # Where `wiretape mcp` finds this recorder or replayer: printed after
    # the URLs (tools read those first), for an agent started elsewhere.
    hub: list[str] = []

    def announce(origins: Sequence[Origin]) -> None:
        from wiretape.launch.origins import proxy_url

        # The signals are handled before the agent's side learns where to
        # connect: a SIGTERM right after that line is a clean stop.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        for o in origins:
            click.echo(f"{listening_label(o.name)}: {proxy_url(o.upstream, o.port)}")
        for line in hub:
            click.echo(line)
        sys.stdout.flush()

    def export(name: str, value: str) -> str:
        return f"export {name}={shlex.quote(value)}"

    if record_mode:
        from wiretape.launch.record import record as do_record

        if not upstreams and not intercept and not tools:
            raise UsageError("serve --record needs --upstream URL (where to forward), or "
                             "--intercept")
        pairs = [
            (u.split("=", 1)[0], u.split("=", 1)[1])
            if "=" in u.split("://", 1)[0]
            else ("upstream", u)
            for u in upstreams
        ]
        extra = _intercept_arguments(intercept, intercept_hosts, upstream_ca, resolve, upstreams,
                                     tools, tools_except)
        intercept = extra["intercept"] is not None

        def announce_proxy(variables: dict[str, str]) -> None:
            # The agent's side of an intercepting proxy: these variables.
            for name, value in variables.items():
                if name == MCP_VARIABLE:
                    hub.append(export(name, value))
                elif intercept:
                    click.echo(export(name, value))

        result = asyncio.run(do_record(None, out=out, upstreams=pairs, ports=_ports(ports),
                                       max_body=max_body,
                                       on_listening=_served((lambda _o: announce([]))
                                                            if intercept else announce),
                                       on_environment=announce_proxy, until=stop,
                                       allow=sorted(_allowances(allow)), **extra))
        for line in render.record_summary(result):
            _say(line)
        sys.exit(result.write_error.exit_code if result.write_error is not None else 0)
    from wiretape.launch.replay import ReplaySettings, wanted_port
    from wiretape.launch.replay import replay as do_replay
    from wiretape.playback.pacing import Pace
    from wiretape.store.locate import resolve_run
    from wiretape.store.runfile import RunFile

    assert replay_run is not None
    run_path = resolve_run(replay_run)
    with RunFile.open(run_path) as rf:
        recorded_ports = {o.name: o.port for o in rf.info().origins}

    overrides = dict(_ports(ports))
    primary = next(iter(recorded_ports), "")

    def announce_replay(origins: Sequence[Origin]) -> None:
        # only an origin moved off its taken recorded port: not one given --port
        for o in origins:
            if (recorded_ports.get(o.name) and recorded_ports[o.name] != o.port
                    and not wanted_port(o, overrides, primary)[1]):
                _say(f"wiretape: warning: {o.name}'s recorded port {recorded_ports[o.name]} is "
                     f"taken, so it listens on {o.port}: point the agent's config there, or free "
                     f"the port, or give --port {o.name}=N")

    settings = ReplaySettings(
        mode=_mode(strict, diagnostic),
        pace=Pace(pace),
        ports=tuple(_ports(ports)),
        max_body=max_body,
        intercept=True if intercept else None,
        allow=_allowances(allow) if allow else None,
    )
    exported: list[str] = []

    def collect_exports(variables: dict[str, str]) -> None:
        for name, value in variables.items():
            (hub if name == MCP_VARIABLE else exported).append(export(name, value))

    def announce_all(origins: Sequence[Origin]) -> None:
        # An intercepted run is served as an HTTPS proxy: the agent needs
        # these variables, not base URLs.
        for line in exported:
            click.echo(line)
        announce([] if exported else origins)
        if not exported:
            announce_replay(origins)

    verdict = asyncio.run(do_replay(run_path, None, settings, on_listening=_served(announce_all),
                                    on_environment=collect_exports, until=stop))
    _say(render.verdict_line(verdict))
    for line in render.verdict_details(verdict):
        _say(line)
    if as_json:
        click.echo(render.verdict_json(verdict))
    sys.exit(verdict.exit_code)


@cli.command()
@click.argument("run")
@click.option("--replay", "replay_id", help="A replay id (default: the latest).")
@click.option("--json", "as_json", is_flag=True)
def verdict(run: str, replay_id: str | None, as_json: bool) -> None:
    """Print the verdict of RUN's latest replay (also of a killed replay).

    \b
    Example:
      wiretape verdict run_0123456789ab --json
    """
    from wiretape.inspect.verdicts import verdict_of
    from wiretape.store.locate import resolve_run
    from wiretape.store.runfile import RunFile

    with RunFile.open(resolve_run(run)) as rf:
        v = verdict_of(rf, replay_id)
    if v is None:
        raise UsageError(f"run {run} has no replay{' ' + replay_id if replay_id else ''} yet: "
                         "run `wiretape replay` first")
    if as_json:
        click.echo(render.verdict_json(v))
    else:
        click.echo(render.verdict_line(v))
        for line in render.verdict_details(v):
            click.echo(line)
    sys.exit(v.exit_code)


@cli.command(name="ls")
@click.option("--json", "as_json", is_flag=True)
def ls_runs(as_json: bool) -> None:
    """List the runs under .wiretape/runs: id, when, command, exchanges, the
    agent's exit status, and the latest replay's verdict with its exit code.
    A run file that cannot be read is one line on stderr; the others are
    still listed.

    \b
    Example:
      wiretape ls
    """
    from wiretape.inspect.verdicts import verdict_of
    from wiretape.store.locate import runs_dir
    from wiretape.store.runfile import RunFile

    rows, data, skipped = [], [], 0
    for path in sorted(runs_dir().glob("*.wtape")):
        try:
            with RunFile.open(path) as rf:
                info, count, v = rf.info(), rf.exchange_count(), verdict_of(rf)
            argv = render.command_line(info.argv)
            when = render.when(info.started_at_ns)
        except Exception as exc:  # a damaged or hostile file: one line, and go on
            reason = str(exc) if isinstance(exc, WiretapeError) else (
                f"cannot read run file {path}: {type(exc).__name__}: {exc}; the file is damaged")
            _say(f"wiretape: skipped: {render.printable(reason)}")
            skipped += 1
            continue
        latest = _verdict_word(v)
        exit_status = "-" if info.exit_status is None else str(info.exit_status)
        rows.append([render.printable(info.run_id), when, argv[:40] or "(serve)", str(count),
                     exit_status, latest if v is None else f"{latest} (exit {v.exit_code})"])
        data.append({"run_id": info.run_id, "path": str(path), "started_at_ns": info.started_at_ns,
                     "argv": list(info.argv), "exchanges": count, "exit_status": info.exit_status,
                     "last_verdict": latest,
                     "last_verdict_exit_code": v.exit_code if v is not None else None})
    if as_json:
        import json  # (not loaded by --help)
        click.echo(json.dumps(data, indent=2))
    elif not rows and skipped:
        click.echo(f"no readable runs under {runs_dir()} ({skipped} skipped: see above)")
    elif not rows:
        click.echo(f"no runs under {runs_dir()}")
    else:
        for line in render.table(rows, ["run", "when", "command", "exchanges", "exit",
                                        "last verdict"]):
            click.echo(line)


def _verdict_word(v: Verdict | None) -> str:
    """``-`` (no replay), ``pass``, ``fail``, ``interrupted`` or
    ``unfinished`` (its process was killed)."""
    if v is None:
        return "-"
    if v.passed:
        return "pass"
    if v.interrupted is not None:
        return "interrupted"
    return "fail" if v.complete else "unfinished"


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("--json", "as_json", is_flag=True)
def diff(run_a: str, run_b: str, as_json: bool) -> None:
    """Compare two recordings exchange by exchange (same method and path, in
    order): what changed in the prompts between two versions of an agent,
    a WebSocket session's client messages included. Exit status 0 when
    every request and message is the same, 1 when any differs.

    \b
    Example:
      wiretape diff run_0123456789ab run_ba9876543210
    """
    from wiretape.inspect.diff import diff_runs
    from wiretape.store.locate import resolve_run
    from wiretape.store.runfile import RunFile

    with RunFile.open(resolve_run(run_a)) as a, RunFile.open(resolve_run(run_b)) as b:
        result = diff_runs(a.exchanges(), b.exchanges())
    if as_json:
        import json  # (not loaded by --help)
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        for line in render.diff_lines(result, run_a, run_b):
            click.echo(line)
    sys.exit(0 if result.differ == 0 and not result.only_a and not result.only_b else 1)


@cli.command()
@click.option("--keep-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the demo run (default .wiretape/runs).")
@click.option("--compare", "with_compare", is_flag=True,
              help="Then fork a run of the agent after its first turn onto two scripted "
                   "models and print the comparison (wiretape compare).")
def demo(keep_dir: Path | None, with_compare: bool) -> None:
    """Record the bundled example agent against the built-in fake provider,
    stop the provider, replay, and print the verdict. Offline, no key.

    \b
    Example:
      wiretape demo
      wiretape demo --compare
    """
    from wiretape.cli.fork_cmds import compare_lines
    from wiretape.demo import run_demo

    sys.exit(run_demo(keep_dir, _say, summarise=render.record_summary, style=click.style,
                      compare_table=compare_lines if with_compare else None))


@cli.command(context_settings={"ignore_unknown_options": True})
@click.option("--name", metavar="NAME",
              help="The server's name in the run (default: from its command, e.g. "
                   "server.py -> server). Give each MCP server of an agent its own.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def mcp(name: str | None, command: tuple[str, ...]) -> None:
    """Stand in for a stdio MCP server in the agent's MCP config.

    Under `wiretape record` it starts the server and records every JSON-RPC
    message both ways; under `wiretape replay` it answers from the recording
    and the server is not started (it need not exist). Anywhere else it says
    so on stderr and runs the server unrecorded.

    \b
    Example (the agent's MCP config):
      "command": "wiretape",
      "args": ["mcp", "--name", "files", "--", "python", "files_server.py"]
    \b
    then:
      wiretape record -- my-agent "summarise notes.txt"
      wiretape replay run_0123456789ab
    """
    from wiretape.launch.mcp_shim import run as run_shim

    if name is not None and not name.strip():
        raise UsageError("--name is empty: give the MCP server a name")
    sys.exit(run_shim(list(command), name))


# Showing what an agent did: show, report, export, import.
inspect_cmds.register(cli)

# Replaying a suite of runs for CI: check.
cli.add_command(check)

# Secrets left in runs: scrub, scan.
secrets_cmds.register(cli)

# From a point of a recording onto a live model: fork, compare.
fork_cmds.register(cli)


def _printable_streams() -> None:
    """Text that cannot be written in the terminal's encoding (a file name
    or argument that was not UTF-8) is written as a backslash escape, never
    a traceback."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def main() -> None:
    _printable_streams()
    try:
        cli.main(standalone_mode=False, prog_name="wiretape")
    except (click.exceptions.Abort, KeyboardInterrupt):
        _say("wiretape: interrupted")
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:  # `wiretape` alone: the help
        click.echo(exc.ctx.get_help() if exc.ctx else cli.get_help(click.Context(cli)))
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "wiretape"
        _say(f"wiretape: error: {exc.format_message()} (see {where} --help)")
        sys.exit(EXIT_USAGE)
    except WiretapeError as exc:
        _fail(exc)
    except Exception as exc:  # a damaged run met where no run file is named
        sqlite3 = sys.modules.get("sqlite3")  # loaded only if a command used it
        if sqlite3 is None or not isinstance(exc, sqlite3.DatabaseError):
            raise
        from wiretape.errors import write_failure_reason

        reason = write_failure_reason(exc)
        if reason != str(exc):  # disk full, read-only, I/O error: a write failed
            _say(f"wiretape: error: cannot write a run file: {reason}")
            sys.exit(EXIT_NOT_SAVED)
        _say(f"wiretape: error: a run file is damaged ({exc}): it cannot be read")
        sys.exit(EXIT_USAGE)
    except SystemExit:
        raise
