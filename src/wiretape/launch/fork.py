"""A fork: the agent run again on its parent's restored files, its first
``upto`` model turns answered from the parent's recording (strict: each
must match), every later one forwarded to a live origin and recorded.

The fork is itself a run file, written by the run writer like a recording:
the parent's snapshots (the state the agent starts from), the exchanges
served from the parent under their own sequence numbers, the live ones
after them, and the agent's end and outcome. Its metadata says what it is
(``extra``: ``fork_parent`` the parent's run id, ``fork_from`` N,
``fork_model`` the model the live requests were rewritten to, or empty;
with a verify command, ``fork_verify`` and ``fork_verify_status``),
so it can be shown, replayed, diffed and forked again.

``compare`` runs one fork per model, each in its own sandbox, runs a
verify command in each afterwards, and gathers one row per model.

This module may import both the recording and the replay side: the
replay path itself imports neither (pyproject.toml's contracts).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar
from urllib.parse import urlsplit

from wiretape import __version__
from wiretape.errors import Interrupted, PortInUse, RunFileError, UsageError
from wiretape.inspect.checkpoints import checkpoints
from wiretape.inspect.forks import live_usage
from wiretape.inspect.prices import PriceTable
from wiretape.launch import config, isolate, trust
from wiretape.launch.child import Child, Interrupts, run_child
from wiretape.launch.origins import child_environment
from wiretape.launch.record import create_run, store_outcome
from wiretape.launch.replay import (
    ReplaySettings,
    clock_tolerance,
    live_redactor,
    plan_replay,
    recorded_span,
)
from wiretape.launch.sandbox import Sandbox, sweep_stale
from wiretape.model import (
    Ending,
    Exchange,
    ExplanationJSON,
    Origin,
    Redaction,
    RunInfo,
)
from wiretape.origins import UpstreamOptions, parse_upstream
from wiretape.playback.decide import Mode, Policy
from wiretape.proxy.fork import Fork
from wiretape.proxy.record import Recorder
from wiretape.proxy.server import Listeners, start_worker_threads
from wiretape.proxy.shapes import error_response
from wiretape.proxy.websocket import is_upgrade
from wiretape.redaction import STANDARD, Facts, secret_values
from wiretape.scrub.places import rules_redactor, unique
from wiretape.store.locate import new_run_id, run_ref, runs_dir, store_paths
from wiretape.store.runfile import RunFile

#: Seconds a connection to an upstream may take when it is checked before
#: the agent starts.
REACH_TIMEOUT_S = 5.0
#: Bytes of a verify command's output kept (its end).
VERIFY_OUTPUT_MAX = 4000
#: Seconds a verify command may run by default (``--verify-timeout``).
VERIFY_TIMEOUT_S = 600.0
#: The verify status recorded when it was ended for running too long
#: (as timeout(1) reports it).
VERIFY_TIMEOUT_STATUS = 124

T = TypeVar("T")


@dataclass(frozen=True)
class ForkSettings:
    """How a fork is made. ``upto``: exchanges served from the parent
    (0 to its count); ``model``: the model live requests are sent with
    (None: as the agent asks); ``upstreams``: (origin name, URL) overrides
    of the recorded upstreams; ``any_port``: listen on free ports rather
    than the recorded ones (parallel forks); ``verify``: a shell command run
    in the sandbox copy of the agent's working directory after it exits;
    ``argv``: the command to run instead of the recorded one (in the
    current directory, as ``replay -- CMD``); ``yes``: run the recorded
    command of a run recorded by another user or on another host (else
    UsageError, ``wiretape.launch.trust``); ``live_files``: fork a run with
    no snapshot, its agent then running on the live files (else
    UsageError)."""

    upto: int
    model: str | None = None
    upstreams: tuple[tuple[str, str], ...] = ()
    out: Path | None = None
    any_port: bool = False
    verify: str | None = None
    same_paths: bool | None = None
    upstream_options: UpstreamOptions = field(default_factory=UpstreamOptions)
    argv: tuple[str, ...] | None = None
    yes: bool = False
    live_files: bool = False
    #: seconds the verify command may run (None: no limit)
    verify_timeout_s: float | None = VERIFY_TIMEOUT_S


@dataclass
class ForkResult:
    """What a fork produced. Token counts are summed over the live
    exchanges' usage fields (None: none reported); ``duration_s`` seconds
    of wall time, the verify command's included."""

    run_id: str
    path: Path
    parent_id: str
    upto: int
    model: str | None
    #: the model the live requests named (the rewrite's, else the agent's own)
    live_model: str | None
    replayed: int
    live: int
    rewritten: int
    exit_status: int | None
    #: why the fork stopped early (a divergence before ``upto``), if it did
    stopped: str | None
    #: live exchanges no origin answered: (origin name, error) each
    unreachable: list[tuple[str, str]]
    input_tokens: int | None
    output_tokens: int | None
    duration_s: float
    verify_status: int | None = None
    verify_output: str = ""
    #: how the request that stopped the fork differed from its recording
    #: (the replay's explanation, ``matching.explain``), when it did
    explanation: ExplanationJSON | None = None
    #: live requests that named no model where the rewrite looks (sent as they came)
    not_rewritten: int = 0
    #: the verify command was ended for running too long (its status 124)
    verify_timed_out: bool = False
    #: the parent's checkpoints, when ``upto`` is not one of them (None: it is)
    checkpoints: list[int] | None = None
    #: live exchanges that did not complete, as a recording reports them
    #: (``#SEQ ENDING: error``)
    failures: list[str] = field(default_factory=list)
    #: the first folder made for the run file (it did not exist), if any
    made_folder: Path | None = None

    @property
    def short(self) -> bool:
        """Fewer than ``upto`` exchanges were served from the parent though
        nothing stopped the fork: the agent ended, or asked elsewhere,
        before the fork point, so this is not a fork from ``upto``."""
        return self.stopped is None and self.replayed < self.upto

    def cost(self, prices: PriceTable) -> float | None:
        """US dollars for the live tokens at ``live_model``'s price, or None."""
        return prices.cost(self.live_model, self.input_tokens, self.output_tokens)

    def to_json(self, prices: PriceTable) -> dict[str, object]:
        return {"run_id": self.run_id, "path": str(self.path), "parent": self.parent_id,
                "from": self.upto, "model": self.live_model, "rewrite": self.model,
                "replayed": self.replayed, "live": self.live, "rewritten": self.rewritten,
                "exit_status": self.exit_status, "stopped": self.stopped,
                "unreachable": [list(u) for u in self.unreachable],
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": self.cost(prices), "wall_s": round(self.duration_s, 3),
                "verify_status": self.verify_status, "verify_output": self.verify_output,
                "not_rewritten": self.not_rewritten, "explanation": self.explanation,
                "verify_timed_out": self.verify_timed_out,
                "from_checkpoint": self.checkpoints is None, "failures": self.failures,
                "short": self.short}


async def fork(parent_path: Path, settings: ForkSettings, *,
               echo_stdout: BinaryIO | None = None, echo_stderr: BinaryIO | None = None,
               on_listening: Callable[[list[Origin]], None] | None = None,
               handle_signals: bool = False) -> ForkResult:
    """Fork the run at ``parent_path`` after its first ``settings.upto``
    exchanges (see the module's docstring). However it ends, the ports, the
    sandbox and an agent still running are given back; a fork that began
    keeps its run file.

    ``handle_signals`` (one fork in the main thread, as the command line
    runs it): SIGINT and SIGTERM go to the agent's group while it runs,
    as in a recording (its exit status says how it took them); before it
    starts they end the fork with Interrupted. Without it, a cancellation
    (``compare``'s, on SIGINT) stops the agent and gives everything back.

    Raises RunFileError, UsageError (``--from`` beyond the recording, no
    upstream reachable, a bad ``--upstream``), CommandNotFound, PortInUse,
    Interrupted.
    """
    return await _signals_end(
        handle_signals, "before the fork's agent started; nothing was forwarded",
        lambda interrupts: _fork(parent_path, settings, echo_stdout, echo_stderr,
                                 on_listening, interrupts))


async def _signals_end(handle_signals: bool, when: str,
                       work: Callable[[Interrupts | None], Awaitable[T]]) -> T:
    """``work`` awaited, with SIGINT and SIGTERM taken while it runs when
    ``handle_signals`` (the Interrupts it is given, else None): a signal
    that cancels it ends it with Interrupted (``when``: where it stopped)."""
    interrupts = Interrupts() if handle_signals else None
    with interrupts or contextlib.nullcontext():
        try:
            return await work(interrupts)
        except asyncio.CancelledError:
            if interrupts is None or not interrupts.cancelled or interrupts.signum is None:
                raise
            interrupts.uncancel()
            raise Interrupted(interrupts.signum, when) from None


async def _fork(parent_path: Path, settings: ForkSettings, echo_stdout: BinaryIO | None,
                echo_stderr: BinaryIO | None,
                on_listening: Callable[[list[Origin]], None] | None,
                interrupts: Interrupts | None) -> ForkResult:
    t0 = time.monotonic()
    sweep_stale()
    async with contextlib.AsyncExitStack() as stack:
        parent = RunFile.open(parent_path)
        stack.callback(parent.close)
        info = parent.info()
        if info.intercept:
            raise UsageError(f"run {info.run_id} was recorded with --intercept: a fork serves "
                             "base URLs only, so its agent would reach the providers past it; "
                             "record the agent with base URLs (--upstream) to fork it")
        own_command = bool(settings.argv)
        if not own_command and not settings.yes:
            elsewhere = trust.recorded_elsewhere(info)
            if elsewhere is not None:
                raise UsageError(
                    f"run {info.run_id} was recorded {elsewhere.who()}, not here: its command "
                    f"({' '.join(elsewhere.argv)}, in {elsewhere.cwd}) is not run without "
                    "asking; pass --yes (from Python: yes=True) to run it, or give the "
                    "command to run after -- (argv=[...])")
        exchanges = sorted(parent.exchanges(), key=lambda e: e.seq)
        upto = check_upto(settings.upto, "--from")
        if not 0 <= upto <= len(exchanges):
            raise UsageError(
                f"--from {upto} is beyond run {info.run_id}: it has {len(exchanges)} "
                f"exchange{'s' if len(exchanges) != 1 else ''}; give --from 0 to "
                f"{len(exchanges)} (`wiretape show {run_ref(parent_path, info.run_id)}` lists "
                "its checkpoints)")
        points = checkpoints(parent, exchanges)
        if settings.model is not None:
            _check_rewritable(info.run_id, settings.model, exchanges[upto:])
        upstreams = _upstreams(info, settings.upstreams)
        await _check_reachable(upstreams, exchanges[upto:],
                               settings.upstream_options)
        if not settings.live_files and not parent.snapshots(contents=False):
            raise UsageError(no_snapshot_message(info.run_id))
        command, sandbox, launch = plan_replay(
            stack, parent, parent_path, info, list(settings.argv or ()) or None,
            ReplaySettings(same_paths=settings.same_paths), cwd=None, serve_only=False)
        assert command is not None
        project = config.find(Path(info.cwd) if os.path.isdir(info.cwd) else Path.cwd())
        allow = frozenset(info.allow) | project.allow
        policy = Policy(mode=Mode.STRICT, substitutions=launch.substitutions,
                        allow_substitutions="paths" in allow, allow=allow - {"paths"},
                        clock_tolerance_s=clock_tolerance(info), recorded_span=recorded_span(info))
        run_id = new_run_id()
        path = settings.out if settings.out is not None else runs_dir() / f"{run_id}.wtape"
        if path.exists():
            raise RunFileError(path, "it already exists and is never overwritten; "
                               "choose another -o path", verb="write")
        made_folder = _missing_folder(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        rules = STANDARD.with_literals(secret_values(os.environ))
        # Whose command the fork runs: the parent's recorder's (so a replay
        # of the fork asks as a replay of its parent does), or, given one,
        # the user's own here.
        where = trust.here() if own_command else {
            k: v for k in (trust.USER_KEY, trust.HOST_KEY)
            if isinstance(v := info.extra.get(k), str)}
        extra = {**where, "fork_parent": info.run_id, "fork_from": str(upto),
                 "fork_model": settings.model or ""}
        fork_info = RunInfo(run_id=run_id, wiretape_version=__version__,
                            argv=tuple(command) if own_command else info.argv,
                            cwd=launch.cwd if own_command else info.cwd,
                            env_names=info.env_names, origins=info.origins,
                            started_at_ns=time.time_ns(), mode="record", extra=extra,
                            allow=info.allow, credential_env=info.credential_env)
        run = create_run(path, fork_info)
        stack.callback(run.close, compact=True)
        snapshot_ids = _copy_snapshots(parent, run)
        stopping = asyncio.Event()
        child: Child | None = None

        def stop(reason: str) -> None:
            stopping.set()
            if child is not None:
                task = asyncio.get_running_loop().create_task(child.stop(reason))
                pending.add(task)
                task.add_done_callback(pending.discard)

        pending: set[asyncio.Task[None]] = set()
        facts: dict[int, list[Redaction]] = {}
        for seq, fact in parent.redactions():
            if seq is not None and seq < upto:
                facts.setdefault(seq, []).append(fact)
        engine = Fork(run, parent, exchanges[:upto], upto, policy,
                      redactor=live_redactor(parent), on_stop=stop, model=settings.model,
                      facts=facts)
        recorder = Recorder(run, options=settings.upstream_options, rules=rules,
                            first_seq=upto, rewrite=engine.outgoing)
        engine.recorder = recorder
        stack.callback(engine.close)
        stack.push_async_callback(recorder.aclose)
        await recorder.warm_up()
        await start_worker_threads(1)  # now, not while serving
        listeners = Listeners()
        stack.push_async_callback(listeners.close)
        origins = await _bind(listeners, info.origins, upstreams, engine, settings.any_port)
        run.set_origins(origins)
        if on_listening is not None:
            on_listening(origins)
        env, _ = child_environment([(o.upstream, o.port, o.env_vars) for o in origins])
        env = launch.environment(env)
        argv = launch.argv
        isolated = (isolate.prepare(launch.isolation, os.environ)
                    if launch.isolation is not None else None)
        if isolated is not None:
            stack.callback(isolated.close)
            env = {**env, **isolated.env}
            argv = isolated.command(argv)
        cwd = launch.cwd
        start_in = cwd if os.path.isdir(cwd) or sandbox is None else sandbox.map_path(cwd)

        def started(c: Child) -> None:
            nonlocal child
            child = c
            if stopping.is_set():
                stop(engine.stopped or "stopped")

        result = await run_child(stack, argv, cwd=start_in, env=env, echo_stdout=echo_stdout,
                                 echo_stderr=echo_stderr, interrupts=interrupts,
                                 started=started)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await listeners.close()
        await recorder.aclose()
        await engine.replayer.finish()
        await engine.flush()
        found = Facts()
        redact = rules_redactor(rules, found)
        run.finish(result.exit_status, redact(result.stdout, "stdout"),
                   redact(result.stderr, "stderr"))
        run.add_redactions(unique(found.items))
        if sandbox is not None:
            run.add_redactions(unique(store_outcome(
                run, [(snapshot_ids.get(c.snapshot_id, c.snapshot_id), c.copy, c.entries)
                      for c in sandbox.copies],
                rules, store_paths(path), sandbox.policy)))
        verify_status, verify_output, verify_timed_out = None, "", False
        if settings.verify is not None:
            verify_status, verify_output, verify_timed_out = await _verify(
                settings.verify, launch.isolation, sandbox, cwd, settings.verify_timeout_s)
            run.add_extra({"fork_verify": settings.verify,
                           "fork_verify_status": str(verify_status)})
        live = [e for e in run.exchanges() if e.seq >= upto]
        input_tokens, output_tokens, asked = live_usage(live)
        # The rewrite's model only when it was sent; else what the agent named.
        live_model = (settings.model if engine.stats.rewritten else None) or asked
        unreachable = [(e.origin, e.error or e.ending.value) for e in live
                       if e.ending in (Ending.ORIGIN_UNREACHABLE, Ending.TIMEOUT)]
        explanation = next((row["detail"].get("explanation") for row in engine.replayer.rows
                            if row["kind"] != "exact"), None)
        return ForkResult(run_id, path, info.run_id, upto, settings.model, live_model,
                          sum(1 for k in engine.stats.replayed if k == "exact"
                              or k == "equivalent" or k == "substituted"),
                          len(live), engine.stats.rewritten, result.exit_status, engine.stopped,
                          unreachable, input_tokens, output_tokens,
                          time.monotonic() - t0, verify_status, verify_output, explanation,
                          engine.stats.not_rewritten, verify_timed_out,
                          None if upto in points else points, list(recorder.stats.failures),
                          made_folder)
    raise AssertionError("unreachable")  # (the stack above always returns or raises)


def _missing_folder(folder: Path) -> Path | None:
    """The outermost of ``folder`` and its parents that does not exist
    (None: ``folder`` exists)."""
    missing = None
    while not folder.exists() and folder != folder.parent:
        missing, folder = folder, folder.parent
    return missing


def _is_websocket(exchange: Exchange) -> bool:
    """A WebSocket session: messages stored, or an upgrade the proxy takes
    as one (``proxy.websocket.is_upgrade``, RFC 6455 §4.1)."""
    return bool(exchange.messages) or is_upgrade(exchange.request.headers)


def _check_rewritable(run_id: str, model: str, live: Sequence[Exchange]) -> None:
    """Refuse a ``--model`` the fork could not apply: an empty name, or a
    live part that is a WebSocket session (its model is named in the
    client's messages, which the rewrite does not change). Raises
    UsageError."""
    if not model.strip():
        raise UsageError("--model is empty: give a model name, or leave --model out to send "
                         "the live requests as the agent asks")
    sessions = [e.seq for e in live if _is_websocket(e)]
    if sessions:
        raise UsageError(
            f"--model cannot be applied to run {run_id} from there: its exchange "
            f"#{sessions[0]} is a WebSocket session, whose model is named in the messages the "
            "agent sends (not rewritten); fork without --model, or from after the session")


def no_snapshot_message(run_id: str) -> str:
    """Why a run with no snapshot is not forked, and what to do."""
    return (f"run {run_id} has no snapshot of its files, so a fork's agent would run on "
            "the live files (and change them): record it again with snapshots (without "
            "--no-snapshot), or pass --live-files (from Python: live_files=True) to fork it "
            "on the live files anyway")


def _upstreams(info: RunInfo, overrides: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Each recorded origin's live upstream: ``--upstream NAME=URL``, else
    the recorded one. Raises UsageError for a name the run did not record,
    InvalidUpstream for a bad URL."""
    names = {o.name for o in info.origins}
    chosen = {o.name: o.upstream for o in info.origins}
    for name, url in overrides:
        if name not in names:
            raise UsageError(f"--upstream names origin {name!r}, which run {info.run_id} did "
                             f"not record (its origins: {', '.join(sorted(names))})")
        parse_upstream(url)
        chosen[name] = url
    return chosen


async def _check_reachable(upstreams: dict[str, str], exchanges: Sequence[Exchange],
                           options: UpstreamOptions) -> None:
    """Open (and close) a connection to each upstream the agent is expected
    to need (the origins of ``exchanges``), before anything starts. Raises
    UsageError naming the first one that cannot be reached."""
    for name in dict.fromkeys(e.origin for e in exchanges):
        url = upstreams.get(name)
        if url is None:
            continue
        root, _, _ = parse_upstream(url)
        parts = urlsplit(url)
        hostname = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = options.resolve.get(hostname, (hostname, port))
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(*address),
                                               REACH_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            raise UsageError(f"cannot reach upstream {name} at {root} ({why}): start it, or "
                             f"give a reachable one with --upstream {name}=URL") from None
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _bind(listeners: Listeners, origins: Sequence[Origin], upstreams: dict[str, str],
                engine: Fork, any_port: bool) -> list[Origin]:
    """Listen for each recorded origin (its recorded port when free and
    ``any_port`` is False, else any free one); the upstream is the live one."""
    bound = []
    for origin in origins:
        upstream = upstreams[origin.name]
        _, _, base = parse_upstream(upstream)

        async def listen(port: int, name: str = origin.name, upstream: str = upstream,
                         base: str = base) -> int:
            return await listeners.listen(
                port, lambda conn_id: engine.handler(name, upstream, conn_id),
                lambda status, code, message: error_response(base.encode(), status, code,
                                                             message))

        try:
            port = await listen(0 if any_port else origin.port)
        except PortInUse:
            port = await listen(0)
        bound.append(Origin(origin.name, upstream, port, origin.env_vars))
    return bound


def _copy_snapshots(parent: RunFile, run: RunFile) -> dict[int, int]:
    """The parent's snapshots stored again in the fork's run (the state it
    starts from), with the policy they were taken by: parent id to fork id."""
    ids = {}
    for snapshot_id, root, entries in parent.snapshots():
        ids[snapshot_id] = run.add_snapshot(root, entries)
    policy, left_out = parent.snapshot_policy()
    if policy is not None:
        run.set_snapshot_policy(policy, {int(k): [(p, r) for p, r in v]
                                         for k, v in left_out.items() if int(k) in ids})
    return ids


async def _verify(command: str, isolation: isolate.Isolation | None, sandbox: Sandbox | None,
                  cwd: str, timeout_s: float | None = None) -> tuple[int, str, bool]:
    """Run ``command`` (``sh -c``) as the agent ran: in its sandbox, at the
    original paths when the agent saw them there. Returns its exit status,
    the end of its output (stdout and stderr together), and whether it was
    ended for running longer than ``timeout_s`` seconds (None: no limit;
    its status is then :data:`VERIFY_TIMEOUT_STATUS`). Cancelled, or timed
    out, its whole process group is killed (it runs in a session of its
    own, so nothing it started is left running)."""
    argv = ["sh", "-c", command]
    env = dict(os.environ)
    start_in = cwd if sandbox is None else sandbox.map_path(cwd)
    isolated = None
    if isolation is not None and isolation.binds:
        isolated = isolate.prepare(isolation, os.environ)
        argv = isolated.command(argv)
        env = {**env, **isolated.env}
        start_in = cwd if os.path.isdir(cwd) else start_in
    timed_out = False
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=start_in, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        reading = asyncio.ensure_future(process.communicate())
        try:
            output, _ = await asyncio.wait_for(asyncio.shield(reading), timeout_s)
        except TimeoutError:
            timed_out = True
            _kill_group(process.pid)
            output, _ = await reading
        except BaseException:
            _kill_group(process.pid)
            reading.cancel()
            with contextlib.suppress(BaseException):
                await process.wait()
            raise
    finally:
        if isolated is not None:
            isolated.close()
    text = output.decode("utf-8", "replace")
    if timed_out:
        return VERIFY_TIMEOUT_STATUS, text[-VERIFY_OUTPUT_MAX:], True
    return (process.returncode if process.returncode is not None else -1,
            text[-VERIFY_OUTPUT_MAX:], False)


def _kill_group(pgid: int) -> None:
    """SIGKILL to the process group ``pgid`` (gone already: nothing)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def check_models(models: object) -> list[str]:
    """``models`` as a list of model names. Raises TypeError for a string
    (one model is ``["name"]``) or a name that is not a string, UsageError
    for none, an empty name, or a name given twice."""
    if isinstance(models, (str, bytes)):
        raise TypeError(f"models must be a list of model names, not a string ({models!r}): "
                        f"for one model give [{models!r}]")
    if not isinstance(models, Sequence) and not isinstance(models, (set, frozenset, tuple)):
        raise TypeError(f"models must be a list of model names, not {type(models).__name__}")
    names = list(models)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"models must be model names (strings); got {name!r}")
        if not name.strip():
            raise UsageError("models names an empty model: give each model's name")
    if not names:
        raise UsageError("--models needs at least one model, e.g. --models gpt-4o,gpt-4o-mini")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"models names {', '.join(twice)} more than once: give each model once")
    return names


def check_upto(upto: object, what: str = "after") -> int:
    """``upto`` as a number of exchanges. Raises TypeError for a value that
    is not an int, UsageError for a negative one."""
    if isinstance(upto, bool) or not isinstance(upto, int):
        raise TypeError(f"{what} must be a number of exchanges (an int), not "
                        f"{type(upto).__name__} {upto!r}")
    if upto < 0:
        raise UsageError(f"{what} must be 0 or more (the number of exchanges served from the "
                         f"recording); got {upto}")
    return upto


def check_parent(parent_path: Path, yes: bool, argv: Sequence[str] | None) -> None:
    """What compare refuses before any fork starts: a run with no snapshot
    (its forks would share, and change, the live files), and a recorded
    command of someone else's without ``yes``. Raises UsageError."""
    with RunFile.open(parent_path) as parent:
        info = parent.info()
        if not parent.snapshots(contents=False):
            raise UsageError(f"run {info.run_id} has no snapshot of its files, so compare's "
                             "forks would all run on (and change) the same live files: record "
                             "it again with snapshots (without --no-snapshot) to compare on it")
    if not argv and not yes:
        elsewhere = trust.recorded_elsewhere(info)
        if elsewhere is not None:
            raise UsageError(
                f"run {info.run_id} was recorded {elsewhere.who()}, not here: its command "
                f"({' '.join(elsewhere.argv)}, in {elsewhere.cwd}) is not run without asking; "
                "pass --yes (from Python: yes=True) to run it")


async def compare(parent_path: Path, upto: int, models: Sequence[str], verify: str, *,
                  jobs: int = 1, upstreams: tuple[tuple[str, str], ...] = (),
                  upstream_options: UpstreamOptions | None = None,
                  on_done: Callable[[ForkResult], None] | None = None,
                  on_start: Callable[[str], None] | None = None,
                  out_dir: Path | None = None, yes: bool = False,
                  argv: Sequence[str] | None = None,
                  verify_timeout_s: float | None = VERIFY_TIMEOUT_S,
                  handle_signals: bool = False) -> list[ForkResult]:
    """One fork per model of ``models`` from ``upto``, each in its own
    sandbox and on free ports, at most ``jobs`` at a time, ``verify`` run
    in each sandbox after its agent exits (ended after ``verify_timeout_s``
    seconds; None: no limit); the run files go to ``out_dir`` as
    ``fork-MODEL-TIME.wtape`` (default: the runs folder, by run id).
    ``on_start``/``on_done``: called with each fork's model as it starts,
    with its result as it ends. ``handle_signals`` (the command line):
    SIGINT and SIGTERM stop every fork and verify command, and end the
    comparison with Interrupted. Returns the results in the order of
    ``models``. Raises TypeError, UsageError (a run with no snapshot, a
    recorded command of someone else's without ``yes``; bad ``models`` or
    ``upto``), and as :func:`fork` (the first error met)."""
    names = check_models(models)
    upto = check_upto(upto, "--from")
    check_parent(parent_path, yes, argv)
    return await _signals_end(
        handle_signals, "during compare: its forks' agents and verify commands were stopped",
        lambda _: _compare(parent_path, upto, names, verify, jobs, upstreams,
                           upstream_options or UpstreamOptions(), on_done, on_start, out_dir,
                           argv, verify_timeout_s))


async def _compare(parent_path: Path, upto: int, models: list[str], verify: str, jobs: int,
                   upstreams: tuple[tuple[str, str], ...], options: UpstreamOptions,
                   on_done: Callable[[ForkResult], None] | None,
                   on_start: Callable[[str], None] | None, out_dir: Path | None,
                   argv: Sequence[str] | None,
                   verify_timeout_s: float | None) -> list[ForkResult]:
    gate = asyncio.Semaphore(max(1, jobs))

    async def one(model: str) -> ForkResult:
        async with gate:  # (the agents' output is kept in their runs, not echoed)
            if on_start is not None:
                on_start(model)
            name = re.sub(r"[^A-Za-z0-9._-]", "_", model)
            out = out_dir / f"fork-{name}-{time.strftime('%Y%m%d-%H%M%S')}.wtape" \
                if out_dir is not None else None
            result = await fork(parent_path, ForkSettings(
                upto, model=model, upstreams=upstreams, out=out, any_port=True, verify=verify,
                upstream_options=options, argv=tuple(argv) if argv else None, yes=True,
                verify_timeout_s=verify_timeout_s),
                echo_stdout=io.BytesIO(), echo_stderr=io.BytesIO())
        if on_done is not None:
            on_done(result)
        return result

    tasks = [asyncio.ensure_future(one(m)) for m in models]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        # One fork failed, or the comparison was cancelled: the others are
        # stopped too (their agents and verify commands ended), not left running.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["ForkResult", "ForkSettings", "check_models", "check_parent", "check_upto", "compare",
           "fork"]
