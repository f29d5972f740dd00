"""A replay session: the run's origins served from its tape on their
recorded ports when free, the agent run again, the verdict computed and
stored. No upstream client exists on this path: nothing imported from here
loads httpx, ``wiretape.proxy.upstream`` or the recording side (an import
contract in pyproject.toml and tests/unit/test_import_boundaries.py hold it
to that); what recording and replaying share lives in ``launch.child``,
``launch.intercept`` and ``store.locate``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import os
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from wiretape.errors import CommandNotFound, Interrupted, PortInUse, UsageError, signal_name
from wiretape.inspect.verdicts import verdict_of
from wiretape.launch import config, isolate
from wiretape.launch.child import Child, Interrupts, resolve_command, run_child
from wiretape.launch.intercept import (
    Interception,
    InterceptSettings,
    forward_proxy_port,
    known_hosts,
    plain_http_refusal,
    proxy_environment,
    recorded_tools,
    tool_http_handler,
)
from wiretape.launch.origins import child_environment, key_placeholders, placeholder_note
from wiretape.launch.sandbox import MAPPING_WARNING, Sandbox, files_facet, ignores, sweep_stale
from wiretape.limits import ws_close_timeout
from wiretape.matching.correspond import Learned
from wiretape.matching.volatile import compare_volatile, equal_up_to
from wiretape.model import (
    DEFAULT_MAX_BODY,
    ExitStatusFacet,
    IsolationFacet,
    Origin,
    Outcome,
    ReplayRow,
    RunInfo,
    SandboxPaths,
)
from wiretape.origins import parse_upstream
from wiretape.playback.decide import Mode, Policy, Substitution
from wiretape.playback.pacing import Pace
from wiretape.playback.verdict import Verdict
from wiretape.proxy import mcp
from wiretape.proxy.connect import ConnectProxy
from wiretape.proxy.http1 import Handler, plain_error
from wiretape.proxy.replay import Replayer
from wiretape.proxy.server import Listeners, start_worker_threads
from wiretape.proxy.shapes import error_response
from wiretape.redaction import STANDARD, LiveRedactor, fingerprints, redact_str, secret_values
from wiretape.scrub.places import redact_entry
from wiretape.snapshot.tree import LEGACY, Entry, SnapshotPolicy, walk
from wiretape.store.locate import store_paths
from wiretape.store.runfile import RunFile


@dataclass(frozen=True)
class ReplaySettings:
    mode: Mode = Mode.STRICT
    pace: Pace = Pace.FAST
    substitutions: tuple[Substitution, ...] = ()
    allow_substitutions: bool = False
    ports: tuple[tuple[str | None, int], ...] = ()
    max_body: int = DEFAULT_MAX_BODY
    keep: bool = False  # keep the sandbox directory after the replay
    same_paths: bool | None = None  # None: where Linux allows it
    offline: bool = False  # the agent gets a network namespace with only loopback
    clock_recorded: bool = False  # the agent's clock starts at the recorded start
    state: str = "recorded"  # recorded: restore the snapshots; current: copy the trees as they are
    intercept: bool | None = None  # None: as recorded (a run recorded with --intercept intercepts)
    #: learned correspondences accepted (matching.correspond.ALLOWANCES;
    #: ``paths`` is allow_substitutions); None: those recorded with the run
    #: and the project's (given, it replaces them: ``--allow none`` is strict)
    allow: frozenset[str] | None = None
    #: file patterns (fnmatch, relative to a snapshot root) the outcome leaves out
    outcome_ignore: tuple[str, ...] = ()


#: How much of a failed agent's stderr the verdict keeps: the first lines,
#: and the last ones when there are more (a traceback ends in its error).
STDERR_HEAD_LINES = 8
STDERR_TAIL_LINES = 4
STDERR_LINE_MAX = 300


def stderr_excerpt(stderr: bytes) -> list[str]:
    """The first lines of ``stderr`` (and its last ones, when it is longer),
    each cut short, with a line saying how many were left out."""
    lines = [line.rstrip("\r")[:STDERR_LINE_MAX]
             for line in stderr.decode("utf-8", "replace").rstrip("\n").split("\n")]
    if lines == [""]:
        return []
    if len(lines) <= STDERR_HEAD_LINES + STDERR_TAIL_LINES:
        return lines
    left_out = len(lines) - STDERR_HEAD_LINES - STDERR_TAIL_LINES
    return [*lines[:STDERR_HEAD_LINES], f"... ({left_out} more line{'s' if left_out != 1 else ''})",
            *lines[-STDERR_TAIL_LINES:]]


def outcome_of(recorded_exit: int | None, recorded_stdout: bytes, exit_status: int | None,
               stdout: bytes, since: float | None = None, stderr: bytes = b"",
               command: Sequence[str] = (), *, learned: Learned | None = None) -> Outcome:
    """The outcome part of a verdict: each facet same, differs, or not
    compared (None). An agent that exited non-zero leaves the first lines
    of its ``stderr``, and its ``command`` (argv, secrets already masked),
    in the exit status facet."""
    if exit_status is None:
        return {}
    # A run with no recorded exit status (imported, or attached with serve)
    # has no outcome to compare with: "not compared", never "differs".
    known = recorded_exit is not None
    # Output that differs only in timestamps (a log line's time) is the same
    # output; the values are named under "volatile".
    compared = compare_volatile(recorded_stdout, stdout, since=since)
    if not compared.same and learned is not None:
        compared = equal_up_to(recorded_stdout, stdout, learned) or compared
    exit_facet: ExitStatusFacet = {"same": recorded_exit == exit_status if known else None,
                                   "recorded": recorded_exit, "replayed": exit_status}
    if exit_status != 0:
        exit_facet["stderr"] = stderr_excerpt(stderr)
        if command:
            exit_facet["command"] = shlex.join(command)[:STDERR_LINE_MAX]
    return {
        "exit_status": exit_facet,
        "stdout": {"same": compared.same if known else None, "recorded_bytes": len(recorded_stdout),
                   "replayed_bytes": len(stdout), "volatile": compared.summary(),
                   "real": [list(r) for r in compared.real],
                   "diff": _short_diff(recorded_stdout, stdout)},
        "files": {"same": None, "note": "no snapshot was taken"},
    }


def current_state(snapshots: Sequence[tuple[int, str, list[Entry]]],
                  run_path: Path, policy: SnapshotPolicy = LEGACY,
                  ) -> list[tuple[int, str, list[Entry]]]:
    """The snapshotted trees read again as they are now (``replay --state
    current``): same ids and roots, today's entries. Raises UsageError for
    a tree that is gone."""
    out = []
    for snapshot_id, root, _entries in snapshots:
        if not os.path.isdir(root):
            raise UsageError(f"--state current: the snapshotted folder {root} does not exist "
                             "here; replay the recorded state (--state recorded)")
        entries = walk(Path(root), exclude=store_paths(run_path), policy=policy)
        out.append((snapshot_id, root, [e for e in entries if not e.left_out]))
    return out


def _short_diff(recorded: bytes, replayed: bytes, limit: int = 2000) -> str:
    if recorded == replayed:
        return ""
    lines = difflib.unified_diff(recorded.decode("utf-8", "replace").splitlines(keepends=True),
                                 replayed.decode("utf-8", "replace").splitlines(keepends=True),
                                 fromfile="recorded stdout", tofile="replayed stdout", n=1)
    text = "".join(lines)
    return text if len(text) <= limit else text[:limit] + "\n... (cut)\n"


def wanted_port(
    origin: Origin, overrides: dict[str | None, int], primary: str
) -> tuple[int, bool]:
    """(port, explicit) for ``origin`` (its ``port`` the recorded one): a
    --port override (``overrides``: name, or None for the ``primary``
    origin, to port) is explicit; else the recorded port."""
    if origin.name in overrides:
        return overrides[origin.name], True
    if None in overrides and origin.name == primary:
        return overrides[None], True
    return origin.port, False


async def bind_replay(listeners: Listeners, origins: Sequence[Origin], replayer: Replayer,
                      ports: Sequence[tuple[str | None, int]],
                      isolated: isolate.IsolatedLaunch | None = None) -> list[Origin]:
    """Listen for each recorded origin, on its recorded port when that is
    free (else any free port). Raises PortInUse for a taken --port."""
    overrides = dict(ports)
    primary = origins[0].name if origins else ""
    unknown = sorted(
        str(n) for n in overrides if n is not None and n not in {o.name for o in origins}
    )
    if unknown:
        raise UsageError(f"--port names origin {unknown[0]!r}, which this run did not record "
                         f"(its origins: {', '.join(o.name for o in origins)})")
    bound = []
    for origin in origins:
        _, _, base = parse_upstream(origin.upstream)
        wanted, explicit = wanted_port(origin, overrides, primary)

        async def listen(port: int, origin: Origin = origin, base: str = base) -> int:
            sock = isolated.listen_sockets([port])[0] if isolated is not None else None
            return await listeners.listen(
                port,
                lambda conn_id: replayer.handler(origin.name, conn_id),
                lambda status, code, message: error_response(base.encode(), status, code, message),
                sock=sock,
            )

        try:
            port = await listen(wanted)
        except PortInUse:
            if explicit or wanted == 0:
                raise
            port = await listen(0)  # the recorded port is taken: any free one
        bound.append(Origin(origin.name, origin.upstream, port, origin.env_vars))
    return bound


async def bind_forward_proxy(
    listeners: Listeners,
    interception: Interception,
    info: RunInfo,
    replayer: Replayer,
    settings: ReplaySettings,
    isolated: isolate.IsolatedLaunch | None,
) -> tuple[ConnectProxy, list[Origin]]:
    """Listen as the forward proxy of an intercepted run: the recorded
    hosts answered from the tape, every other CONNECT refused; a run
    recorded with ``--tools`` answers every other host (but those it left
    out) and plain-HTTP requests from its tool exchanges, never forwarding
    one. The port is ``--port N`` or any free one (the child is told it).
    Raises PortInUse."""
    names = {urlsplit(o.upstream).hostname or o.name: o.name for o in info.origins}
    hosts = {host: names.get(host, host) for host in (info.intercept or known_hosts())}
    tools = recorded_tools(info.extra)
    connect = ConnectProxy(
        interception.ca, hosts, lambda name, _authority, conn_id: replayer.handler(name, conn_id),
        tunnel=False, next_connection_id=listeners.next_connection_id, max_body=settings.max_body,
        on_refused=listeners.note_refused, tools=tools is not None,
        tools_except=tools.tools_except if tools is not None else ())

    def plain_http(conn_id: int) -> Handler:
        if tools is None:
            return plain_http_refusal(plain_error, listeners.note_refused)
        return tool_http_handler(lambda name, _upstream: replayer.handler(name, conn_id),
                                 tools.tools_except, plain_error, listeners.note_refused)

    wanted = forward_proxy_port(settings.ports)
    sock = isolated.listen_sockets([wanted])[0] if isolated is not None else None
    port = await listeners.listen(wanted, plain_http, sock=sock, connect=connect)
    origins = [Origin(o.name, o.upstream, port, ()) for o in info.origins]
    return connect, origins


@dataclass(frozen=True)
class LaunchPlan:
    """How the agent is started against the sandbox: ``mode`` is
    ``same-paths``, ``mapped`` or ``none`` (no snapshot); ``isolation`` is
    what the isolation wrapper must set up (None: nothing)."""

    argv: list[str]
    cwd: str
    mode: SandboxPaths
    substitutions: tuple[Substitution, ...] = ()
    notes: tuple[str, ...] = ()
    sandbox: Sandbox | None = None
    isolation: isolate.Isolation | None = None

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        if self.sandbox is None or self.mode != "mapped":
            return env
        return self.sandbox.env(env)


def plan_launch(sandbox: Sandbox | None, settings: ReplaySettings, argv: Sequence[str],
                cwd: str, clock_start_ns: int | None) -> LaunchPlan:
    """Show the sandbox to the agent at the original paths where the
    system allows it (or when asked), else map paths into it; add the
    network and clock isolation asked for. Raises UsageError."""
    clock = clock_start_ns if settings.clock_recorded else None
    extra = isolate.Isolation(offline=settings.offline, clock_start_ns=clock)
    wanted = extra if settings.offline or clock is not None else None
    if sandbox is None:
        return LaunchPlan(
            list(argv),
            cwd,
            "none",
            isolation=wanted,
            notes=("wiretape: no snapshot was taken: the agent ran against the live files",),
        )
    if settings.same_paths is not False:
        caps = isolate.capabilities()
        if caps.mount_namespaces:
            isolation = isolate.Isolation(binds=tuple(sandbox.binds()),
                                          readonly_binds=tuple(sandbox.tool_binds()),
                                          offline=settings.offline,
                                          clock_start_ns=clock, cwd=cwd)
            return LaunchPlan(list(argv), cwd, "same-paths", sandbox=sandbox, isolation=isolation)
        reason = caps.reasons.get("mount_namespaces", "mount namespaces are not available")
        if settings.same_paths:
            raise UsageError(f"cannot show the sandbox at the original paths ({reason}): "
                             "replay with --no-same-paths")
        notes: tuple[str, ...] = (f"wiretape: same paths are not available ({reason})",
                                  MAPPING_WARNING)
    else:
        notes = (MAPPING_WARNING,)
    # The folders snapshots leave to the tools that make them (a virtualenv,
    # node_modules) are shown in the copy: read-only where the system can
    # bind them, else linked.
    if sandbox.tool_folders():
        if isolate.capabilities().mount_namespaces:
            wanted = isolate.Isolation(readonly_binds=tuple(sandbox.tool_binds()),
                                       offline=settings.offline, clock_start_ns=clock)
        else:
            linked = sandbox.link_tools()
            notes += (f"wiretape: {', '.join(linked)} linked into the sandbox, not copied and "
                      "not read-only (no mount namespaces): the agent can change "
                      f"{'it' if len(linked) == 1 else 'them'}",)
    return LaunchPlan(
        [sandbox.map_arg(a) for a in argv], sandbox.map_path(cwd), "mapped",
        substitutions=sandbox.substitutions(), notes=notes, sandbox=sandbox, isolation=wanted)


def isolation_facet(plan: LaunchPlan, settings: ReplaySettings,
                    dns: Sequence[str], tools: InterceptSettings | None = None) -> IsolationFacet:
    """What was and was not isolated, said plainly. ``tools``: the run's
    ``--tools`` settings (its tools' requests are answered from it too)."""
    files = {"same-paths": "sandbox at the original paths",
             "mapped": "sandbox, paths mapped"}.get(plan.mode, "not isolated (no snapshot)")
    left_out = (f" (but {', '.join(tools.tools_except)}, reached directly)"
                if tools is not None and tools.tools_except else "")
    said = [
        f"files: {files}",
        "network: "
        + (
            "only loopback (--offline)"
            + ("; the tools' HTTP(S) requests answered from the recording through the proxy"
               if tools is not None else "")
            if settings.offline
            else "not isolated: the agent's own tools can reach the network; "
            "only provider calls are answered from the recording"
            if tools is None
            else "provider calls and the tools' HTTP(S) requests through the proxy are "
            f"answered from the recording{left_out}; other traffic is not isolated"
        ),
        "clock: " + ("starts at the recorded time" if settings.clock_recorded else "real"),
    ]
    return {"same": None, "said": said, "dns_queries": list(dns)}


async def replay(
    path: Path,
    argv: Sequence[str] | None,
    settings: ReplaySettings,
    *,
    echo_stdout: BinaryIO | None = None,
    echo_stderr: BinaryIO | None = None,
    on_listening: Callable[[list[Origin]], None] | None = None,
    on_environment: Callable[[dict[str, str]], None] | None = None,
    on_decision: Callable[[ReplayRow], None] | None = None,
    until: asyncio.Event | None = None,
    cwd: str | None = None,
) -> Verdict:
    """Replay the run at ``path`` against ``argv`` (None with ``until``:
    serve only, until the event is set or a strict stop). A command given
    in ``argv`` runs in ``cwd`` (default: the current directory); the
    recorded one, in the recorded directory.

    ``on_environment`` is called, once the proxy listens, with the
    variables an agent started by someone else needs (name to value): the
    proxy variables when intercepting, and ``WIRETAPE_MCP``, where
    ``wiretape mcp`` finds the replayer.

    However it ends (an error, a cancellation), the ports, the CA, the
    isolation, an agent still running and the sandbox (unless ``keep``)
    are given back, and a replay that has begun keeps its end and outcome.

    With a command, SIGINT and SIGTERM go to the agent's group while it
    runs, and the verdict is stored and returned as interrupted (its exit
    code 128 + the signal's number); one that arrives before the replay
    began ends it, giving back what was taken, with Interrupted.

    Raises RunFileError, CommandNotFound, PortInUse, UsageError, Interrupted.
    """
    interrupts = Interrupts() if until is None else None
    session: _Replay | None = None
    with interrupts or contextlib.nullcontext():
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await _prepare_replay(stack, path, argv, settings, cwd=cwd,
                                                until=until, on_decision=on_decision)
                session.interrupts = interrupts
                if on_environment is not None:
                    on_environment({**(session.proxy_variables or {}),
                                    mcp.VARIABLE: session.env[mcp.VARIABLE]})
                session.start()
                # The replay has begun: however it ends, its outcome is stored and judged.
                stack.push_async_callback(_judge_replay, session)
                if on_listening is not None:
                    on_listening(session.origins)
                await _serve_replay(stack, session, echo_stdout, echo_stderr)
        except asyncio.CancelledError:
            if interrupts is None or not interrupts.cancelled or interrupts.signum is None:
                raise
            interrupts.uncancel()
            if session is None:
                raise Interrupted(interrupts.signum, "before the replay began; nothing was "
                                                     "replayed or stored") from None
            if session.verdict is None:
                raise Interrupted(interrupts.signum, "before its verdict was stored (`wiretape "
                                                     "verdict RUN` reads what was)") from None
    assert session is not None and session.verdict is not None
    return session.verdict


@dataclass
class _Stopping:
    """What a strict stop does: stop the agent's process group (once it has
    been started) and end serving. Stopping the group may take a grace
    period; the outcome is judged after it."""

    event: asyncio.Event
    child: Child | None = None
    pending: set[asyncio.Task[None]] = field(default_factory=set)

    def __call__(self, reason: str) -> None:
        if self.child is not None:
            task = asyncio.get_running_loop().create_task(
                self.child.stop(reason), name="wiretape-stop-child")
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
        self.event.set()

    async def settled(self) -> None:
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)


@dataclass
class _Replay:
    """What the phases of one replay share: made by ``_prepare_replay``,
    filled in by ``_serve_replay`` and ``_judge_replay``."""

    run: RunFile
    info: RunInfo
    settings: ReplaySettings
    #: the command as stored with the replay: the one given, else the recorded one
    argv: list[str]
    #: what is started (isolation wrapper and path mapping applied); None: serve only
    command: list[str] | None
    sandbox: Sandbox | None
    launch: LaunchPlan
    policy: Policy
    replayer: Replayer
    stopping: _Stopping
    isolated: isolate.IsolatedLaunch | None
    listeners: Listeners
    connect: ConnectProxy | None
    origins: list[Origin]
    env: dict[str, str]
    #: the forward proxy's variables for the agent (intercepting only)
    proxy_variables: dict[str, str] | None
    exit_status: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    verdict: Verdict | None = None
    interrupts: Interrupts | None = None
    #: lines for the verdict's sandbox notes (where settings came from, ...)
    notes: list[str] = field(default_factory=list)
    #: where `wiretape mcp` shims are answered
    hub: mcp.Hub | None = None

    def start(self) -> None:
        """Begin the replay in the run's replay log, with how it is served
        (serving only: once it has answered a request)."""
        settings = self.settings
        rules = self.replayer.redactor.rules
        self.run.start_replay(self.replayer.replay_id, settings.mode.value, {
            "pace": settings.pace.value, "argv": [redact_str(a, "argv", rules) for a in self.argv],
            "cwd": self.launch.cwd,
            "allow_substitutions": self.policy.allow_substitutions,
            "substitutions": [[s.old.decode("utf-8", "replace"), s.new.decode("utf-8", "replace")]
                              for s in self.policy.substitutions],
            "allow": sorted(self.policy.allow),
            "outcome_ignore": list(settings.outcome_ignore),
            "sandbox": str(self.sandbox.root) if self.sandbox else None,
            "paths": self.launch.mode, "ports": {o.name: o.port for o in self.origins},
        }, serve_only=self.command is None)


async def _prepare_replay(
    stack: contextlib.AsyncExitStack, path: Path, argv: Sequence[str] | None,
    settings: ReplaySettings, *, cwd: str | None, until: asyncio.Event | None,
    on_decision: Callable[[ReplayRow], None] | None,
) -> _Replay:
    """Open the run, check the input, restore the sandbox and plan the
    launch; then prepare the isolation and bind the listeners. Each
    resource is entered into ``stack`` as it is acquired. Sandboxes that
    killed replays left behind are swept first."""
    sweep_stale()
    try:  # a bad WIRETAPE_WS_CLOSE_TIMEOUT is a usage error before anything starts
        close_timeout = ws_close_timeout(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    run = RunFile.open(path)
    stack.callback(run.close, compact=True)
    run.prepare_for_writes()
    info = run.info()
    if info.intercept and settings.intercept is False:
        raise UsageError(f"run {info.run_id} was recorded with --intercept: its requests went "
                         "to the providers' own hosts, which only an intercepting replay "
                         "answers; drop --no-intercept")
    exchanges = run.exchanges()
    run.outcome_changes()  # a damaged recorded outcome is refused before the agent runs
    command, sandbox, launch = plan_replay(stack, run, path, info, argv, settings, cwd=cwd,
                                            serve_only=until is not None)
    stopping = _Stopping(until or asyncio.Event())
    project = config.find(Path(cwd or os.getcwd()))
    allow = (settings.allow if settings.allow is not None
             else frozenset(info.allow) | project.allow)
    settings = dataclasses.replace(
        settings, outcome_ignore=tuple(dict.fromkeys(settings.outcome_ignore
                                                     + project.outcome_ignore)))
    policy = Policy(mode=settings.mode,
                    substitutions=settings.substitutions + launch.substitutions,
                    allow_substitutions=settings.allow_substitutions or "paths" in allow,
                    allow=allow - {"paths"}, clock_tolerance_s=clock_tolerance(info),
                    recorded_span=recorded_span(info))
    replayer = Replayer(run, exchanges, policy, pace=settings.pace, on_stop=stopping,
                        on_decision=on_decision, redactor=live_redactor(run),
                        close_timeout=close_timeout)
    await start_worker_threads(3)  # now, not while serving
    isolated = (isolate.prepare(launch.isolation, os.environ)
                if launch.isolation is not None and command is not None else None)
    if isolated is not None:
        stack.callback(isolated.close)
    listeners = Listeners(max_body=settings.max_body)
    connect, origins, env, proxy_variables = await _listen_replay(
        stack, listeners, info, replayer, settings, isolated)
    # Stdio MCP servers the agent starts through `wiretape mcp` are
    # answered here (in the agent's network namespace when it is offline).
    hub = mcp.Hub("replay", replayer.mcp_session)
    env = {**env, mcp.VARIABLE: await hub.start(
        isolated.listen_sockets([0])[0] if isolated is not None and settings.offline else None)}
    stack.push_async_callback(hub.close)
    env = launch.environment(env)
    placeholders: dict[str, str] = {}
    if command is not None:
        command = launch.argv
        if isolated is not None:
            env = {**env, **isolated.env}
            command = isolated.command(command)
        # The recording's credentials are not needed (no request reaches a
        # provider, and credential headers do not decide a match), but an
        # agent may refuse to start without them.
        placeholders = key_placeholders(info.credential_env, env)
        env = {**env, **placeholders}
    session = _Replay(run, info, settings, list(argv or info.argv), command, sandbox, launch,
                      policy, replayer, stopping, isolated, listeners, connect, origins, env,
                      proxy_variables, hub=hub)
    if placeholders:
        session.notes.append(placeholder_note(list(placeholders)))
    if settings.allow is None and info.allow:
        session.notes.append(f"wiretape: allowances recorded with the run: "
                             f"{', '.join(sorted(info.allow))} (--allow replaces them)")
    if project.source is not None and (project.allow or project.outcome_ignore):
        said = [f"allow {', '.join(sorted(project.allow))}" if project.allow else "",
                f"outcome-ignore {', '.join(project.outcome_ignore)}"
                if project.outcome_ignore else ""]
        session.notes.append(f"wiretape: settings from {project.source}: "
                             + "; ".join(x for x in said if x))
    return session


#: Seconds a clock reading may stray from the learned shift beyond the
#: recording's own length: the replay runs faster or slower than the
#: recording did (model latency is gone, tools take their own time).
CLOCK_SLACK_S = 60.0


def clock_tolerance(info: RunInfo) -> float:
    """How far (seconds) a live clock reading may stray from the learned
    shift: the recording's length plus CLOCK_SLACK_S."""
    if info.ended_at_ns is None or not info.started_at_ns:
        return 600.0 + CLOCK_SLACK_S
    return max(0.0, (info.ended_at_ns - info.started_at_ns) / 1e9) + CLOCK_SLACK_S


def recorded_span(info: RunInfo) -> tuple[float, float] | None:
    """When the recording ran (epoch seconds), or None when not known."""
    if not info.started_at_ns:
        return None
    end = info.ended_at_ns or info.started_at_ns
    return info.started_at_ns / 1e9, max(end, info.started_at_ns) / 1e9


def live_redactor(run: RunFile) -> LiveRedactor:
    """How a replay redacts what it compares and stores: as the recording
    did (the standard rules, and the secret-named variables of this
    environment), learning the secrets the run recorded as redacted (by
    their fingerprints) from this environment and the live requests."""
    redactor = LiveRedactor(STANDARD.with_literals(secret_values(os.environ)),
                            fingerprints(fact for _, fact in run.redactions()))
    redactor.learn_environment(os.environ)
    return redactor


def plan_replay(
    stack: contextlib.AsyncExitStack, run: RunFile, path: Path, info: RunInfo,
    argv: Sequence[str] | None, settings: ReplaySettings, *, cwd: str | None, serve_only: bool,
) -> tuple[list[str] | None, Sandbox | None, LaunchPlan]:
    """The command to run (None: serve only), the sandbox it runs against
    (None: no snapshot), entered into ``stack`` unless kept, and how it is
    launched. Raises UsageError, CommandNotFound."""
    cwd = info.cwd if argv is None or not argv else (cwd or os.getcwd())
    command: list[str] | None = None
    if not serve_only:
        command = list(argv) if argv else list(info.argv)
        if not command:
            raise UsageError(f"run {info.run_id} has no command of its own (it was recorded "
                             "with `serve` or `wiretape.recording()`, or imported): give one "
                             "after -- (from Python: argv=[...])")
    snapshots = run.snapshots() if command is not None else []
    taken = SnapshotPolicy.from_json(run.snapshot_policy()[0])
    if settings.state == "current":
        snapshots = current_state(snapshots, path, taken)
    sandbox = (Sandbox.restore(snapshots, source=path, home=os.environ.get("HOME"), policy=taken)
               if snapshots else None)
    if sandbox is not None:
        # A kept sandbox is the user's: it loses the mark that lets a later
        # replay sweep it away as the leftover of a killed one.
        stack.callback(sandbox.release if settings.keep else sandbox.remove)
    launch = plan_launch(sandbox, settings, command if command is not None else [], cwd,
                         info.started_at_ns)
    if command is not None:
        # The agent's own command is checked where it will run: in the
        # sandbox copy of its working directory, when there is one.
        where = sandbox.map_path(cwd) if sandbox is not None else cwd
        if not os.path.isdir(where):
            raise UsageError(f"the recorded working directory {cwd} does not exist: "
                             "give the command after -- to run it here")
        resolve_in_sandbox(launch, where, run.snapshot_policy()[1])
    return command, sandbox, launch


def resolve_in_sandbox(launch: LaunchPlan, where: str,
                       left_out: dict[str, list[list[str]]]) -> None:
    """Check that the agent's command exists as it will see it: a path in
    the sandbox (its copy of a tool folder is the original), ``where`` the
    sandbox's copy of its working directory. Raises CommandNotFound naming
    why a path in the sandbox is missing: a tool folder that does not exist
    here, or a file the snapshot left out (``left_out``: per snapshot id,
    ``[path, reason]`` pairs)."""
    sandbox, exe = launch.sandbox, launch.argv[0] if launch.argv else ""
    if sandbox is None or os.sep not in exe:
        resolve_command(launch.argv, where)
        return
    seen = exe if os.path.isabs(exe) else os.path.join(launch.cwd, exe)
    in_copy = sandbox.map_path(seen) if launch.mode == "same-paths" else seen
    try:
        resolve_command([sandbox.on_host(in_copy), *launch.argv[1:]], where)
    except CommandNotFound as exc:
        missing = sandbox.left_out_folder(in_copy)
        if missing is not None:
            raise CommandNotFound(exe, f"{missing[0]} is never snapshotted, and {missing[1]} "
                                       "does not exist here: make it as it was when recording, "
                                       "or give the command after --") from exc
        for copy in sandbox.copies:
            relative = os.path.relpath(in_copy, copy.copy)
            reason = next((why for path, why in left_out.get(str(copy.snapshot_id), [])
                           if relative == path.rstrip("/")
                           or relative.startswith(path.rstrip("/") + "/")), None)
            if reason is not None and not relative.startswith(".."):
                take = "--snapshot-binary" if reason == "binary" else "--snapshot-include PATTERN"
                raise CommandNotFound(exe, f"the snapshot left it out ({reason}): record again "
                                           f"with {take}, or give the command after --") from exc
        raise CommandNotFound(exe, exc.reason) from exc


async def _listen_replay(
    stack: contextlib.AsyncExitStack, listeners: Listeners, info: RunInfo, replayer: Replayer,
    settings: ReplaySettings, isolated: isolate.IsolatedLaunch | None,
) -> tuple[ConnectProxy | None, list[Origin], dict[str, str], dict[str, str] | None]:
    """Bind the listeners: one per recorded origin, or (intercepting) the
    forward proxy with a CA made for this replay. Returns the forward proxy
    (intercepting only), the origins, the agent's environment and
    (intercepting only) the proxy variables set in it."""
    offline = isolated if settings.offline else None
    intercepting = bool(info.intercept) if settings.intercept is None else settings.intercept
    if not intercepting:
        stack.push_async_callback(listeners.close)
        origins = await bind_replay(listeners, info.origins, replayer, settings.ports, offline)
        env, _ = child_environment([(o.upstream, o.port, o.env_vars) for o in origins])
        return None, origins, env, None
    interception = Interception()
    stack.callback(interception.close)
    stack.push_async_callback(listeners.close)
    connect, origins = await bind_forward_proxy(listeners, interception, info, replayer,
                                                settings, offline)
    tools = recorded_tools(info.extra)
    env, set_names = proxy_environment(os.environ, origins[0].port if origins else 0,
                                       interception.bundle,
                                       tools.tools_except if tools is not None else ())
    return connect, origins, env, {name: env[name] for name in set_names}


async def _serve_replay(stack: contextlib.AsyncExitStack, session: _Replay,
                        echo_stdout: BinaryIO | None, echo_stderr: BinaryIO | None) -> None:
    """Run the agent while the proxy answers from the tape (serve only:
    until the event is set or a strict stop). The child is entered into
    ``stack``, and SIGINT/SIGTERM go to its group until serving ends."""
    if session.command is None:
        await session.stopping.event.wait()
        return
    # An original directory missing here is made inside the agent's
    # namespace; start from its sandbox copy meanwhile.
    cwd, sandbox = session.launch.cwd, session.sandbox
    start_in = cwd if os.path.isdir(cwd) or sandbox is None else sandbox.map_path(cwd)
    def started(child: Child) -> None:
        session.stopping.child = child

    result = await run_child(stack, session.command, cwd=start_in, env=session.env,
                             echo_stdout=echo_stdout, echo_stderr=echo_stderr,
                             interrupts=session.interrupts, started=started)
    session.exit_status, session.stdout, session.stderr = (result.exit_status, result.stdout,
                                                           result.stderr)


async def _judge_replay(session: _Replay) -> None:
    """However serving ended: stop listening (the stack closes the
    listeners again on its way out, which then does nothing) and let a
    strict stop finish stopping the agent; then compute the outcome, store
    it as the replay's end, and read the verdict back."""
    await session.listeners.close()
    if session.hub is not None:  # (its sessions' rows are written with the others)
        await session.hub.close()
    dns = session.isolated.dns_queries() if session.isolated is not None else []
    await session.stopping.settled()
    run, info, settings, launch = session.run, session.info, session.settings, session.launch
    exit_status, replayer = session.exit_status, session.replayer
    # Every decision's row is stored before the outcome and the verdict.
    await replayer.finish()
    # The replay's output and files are redacted as the recording's were,
    # before they are compared and stored.
    redactor = replayer.redactor
    stdout = redactor.text(session.stdout, "stdout", recorded=info.stdout)
    stderr = redactor.text(session.stderr, "stderr", recorded=info.stderr)
    since = info.started_at_ns / 1e9 if info.started_at_ns else None
    # The outcome is judged by the rules the requests were: what the replay
    # learned (ids, clock shift) holds for the files and output too.
    learned = None
    if session.policy.allow:
        # New ids in the outcome must be the agent's own (UUIDs, ULIDs);
        # others must have met in a request. Clock readings: up to now.
        learned = replayer.learned
        learned.uuids_only = True
        learned.live_span = (replayer.started_at, time.time())
    # The failed agent's stderr kept in the verdict is the redacted one.
    outcome = outcome_of(info.exit_status, info.stdout, exit_status, stdout, since, stderr,
                         [redact_str(a, "argv", redactor.rules) for a in session.argv],
                         learned=learned)
    sandbox = session.sandbox
    notes = list(session.notes)
    if session.listeners.refused:
        notes.append("wiretape: refused before any answer from the recording (not in the "
                     f"verdict's counts): {session.listeners.refused_said()}")
    if sandbox is not None and exit_status is not None:
        box = sandbox
        outcome["files"] = files_facet(
            run.outcome_changes(),
            box.changes(lambda e: redact_entry(e, redactor.text, "replay")),
            lambda _sid, _path, digest: run.content(digest),
            lambda sid, path, _digest: box.content(sid, path), since=since,
            learned=learned, ignore=settings.outcome_ignore)
        ignored = outcome["files"].get("ignored", [])
        for pattern in settings.outcome_ignore:
            if not any(ignores(path, (pattern,)) for path in ignored):
                notes.append(f"wiretape: --outcome-ignore {pattern!r} matched no file the "
                             "agent changed (patterns match paths relative to a snapshotted "
                             "folder, e.g. '.cache/*')")
    outcome["isolation"] = isolation_facet(launch, settings, dns,
                                           recorded_tools(info.extra)
                                           if session.connect is not None else None)
    outcome["sandbox"] = {"same": None, "paths": launch.mode,
                          "notes": [*launch.notes, *notes, *run.replay_log_notes()],
                          "kept": str(sandbox.root) if sandbox and settings.keep else None}
    if session.connect is not None:
        outcome["intercept"] = {"same": None, **session.connect.report.to_json()}
    if replayer.stopped:
        outcome["stopped"] = {"same": None, "reason": replayer.stopped}
    signum = session.interrupts.signum if session.interrupts is not None else None
    if signum is not None:
        outcome["interrupted"] = {"same": None, "signal": signal_name(signum),
                                  "exit_code": 128 + signum}
    run.finish_replay(replayer.replay_id, exit_status, stdout, stderr, outcome)
    session.verdict = verdict_of(run, replayer.replay_id)
