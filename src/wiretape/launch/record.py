"""A recording session: listeners for each origin, the agent as a child
with its base-URL variables pointed at them, and the run file.

Ports are bound and the command resolved before the run file is created, so
bad input leaves nothing half-made behind; a run file whose recording could
not begin (its snapshot could not be stored, say) is removed again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

from wiretape import __version__
from wiretape.errors import (
    Interrupted,
    RunFileError,
    RunFileWriteError,
    UsageError,
    write_failure_reason,
)
from wiretape.launch import trust
from wiretape.launch.child import Interrupts, own_output_files, resolve_command, run_child
from wiretape.launch.intercept import (
    Interception,
    InterceptSettings,
    forward_proxy_port,
    intercept_hosts,
    plain_http_refusal,
    proxy_environment,
    tool_http_handler,
    tools_extra,
)
from wiretape.launch.origins import PlannedOrigin, child_environment, plan_origins
from wiretape.limits import spool_bytes, ws_close_timeout
from wiretape.model import (
    DEFAULT_MAX_BODY,
    ConnectReportJSON,
    Exchange,
    Origin,
    Redaction,
    RunInfo,
)
from wiretape.origins import UpstreamOptions, key_variables, parse_upstream
from wiretape.proxy import mcp
from wiretape.proxy.connect import ConnectProxy, ConnectReport
from wiretape.proxy.http1 import ErrorBody, Handler, plain_error
from wiretape.proxy.record import Recorder
from wiretape.proxy.server import Listeners, start_worker_threads
from wiretape.proxy.shapes import error_response
from wiretape.proxy.spool import DEFAULT_SPOOL_AT
from wiretape.redaction import (
    STANDARD,
    Facts,
    Rules,
    credential_names,
    redact_json,
    secret_values,
)
from wiretape.scrub.places import (
    redact_entries,
    redact_entry,
    redact_info,
    rules_redactor,
    secrets_file_values,
    stored_secrets_values,
    unique,
)
from wiretape.snapshot.tree import (
    DEFAULT_MAX_BYTES,
    DEFAULT_POLICY,
    Change,
    Entry,
    LeftOut,
    SnapshotPolicy,
    compare,
    walk,
)
from wiretape.store.locate import new_run_id, runs_dir, store_paths
from wiretape.store.runfile import RunFile


@dataclass
class RecordResult:
    """What a recording produced. ``duration_s`` in seconds, ``body_bytes``
    the request and response bodies as they crossed the wire."""

    run_id: str
    path: Path
    exchanges: int
    body_bytes: int
    duration_s: float
    exit_status: int | None
    origins: tuple[Origin, ...]
    failures: list[str] = field(default_factory=list)
    #: requests refused before an exchange began, as (HTTP status, code)
    refused: list[tuple[int, str]] = field(default_factory=list)
    #: what the forward proxy saw (``--intercept`` only)
    connect: ConnectReport | None = None
    #: per snapshotted tree, what its snapshot left out
    left_out: list[tuple[Path, list[LeftOut]]] = field(default_factory=list)
    #: recorded responses with a status of 400 or more: status to count
    #: (the provider's answers only)
    error_statuses: dict[int, int] = field(default_factory=dict)
    #: the answers wiretape made itself because an origin never answered
    #: (502 unreachable, 504 timed out): status to count
    own_statuses: dict[int, int] = field(default_factory=dict)
    #: the same two for tool exchanges (``--tools``): the tools' hosts'
    #: errors, and wiretape's own answers when a tool's host never answered
    tool_error_statuses: dict[int, int] = field(default_factory=dict)
    tool_own_statuses: dict[int, int] = field(default_factory=dict)
    #: the first write that failed (``cannot write run file PATH: disk
    #: full``); None when everything was saved
    write_error: RunFileWriteError | None = None
    #: exchanges forwarded but not saved, because a write failed
    not_saved: int = 0
    #: requests answered with an error and not forwarded after a write failed
    refused_unsaved: int = 0
    #: the signal (SIGINT, SIGTERM) that arrived while the agent ran, if any
    interrupted: int | None = None
    #: False when the run's end (exit status, output, what the agent
    #: changed) could not be stored
    end_saved: bool = True
    #: the outermost folder made to hold the run file (``-o new/dir/x.wtape``)
    made_folder: Path | None = None
    #: tool exchanges stored (``--tools``): tool origin to count
    tool_exchanges: dict[str, int] = field(default_factory=dict)
    #: of ``exchanges``, the stdio MCP sessions (``wiretape mcp``)
    mcp_sessions: int = 0

    @property
    def complete(self) -> bool:
        """True when every exchange that crossed the proxy was saved."""
        return self.write_error is None


def _origin_error_body(path: bytes) -> ErrorBody:
    return lambda status, code, message: error_response(path, status, code, message)


async def bind_origins(
    listeners: Listeners, planned: Sequence[PlannedOrigin],
    handler_for: Callable[[str, str, int], Handler],
) -> list[Origin]:
    """Listen for each planned origin; ``handler_for(name, upstream,
    connection_id)`` gives each connection its handler. Raises PortInUse."""
    origins = []
    for p in planned:
        _, _, base = parse_upstream(p.upstream)

        def for_connection(conn_id: int, p: PlannedOrigin = p) -> Handler:
            return handler_for(p.name, p.upstream, conn_id)

        port = await listeners.listen(p.port, for_connection, _origin_error_body(base.encode()))
        origins.append(Origin(p.name, p.upstream, port, p.env_vars))
    return origins


async def record(
    argv: Sequence[str] | None,
    *,
    out: Path | None = None,
    upstreams: Sequence[tuple[str, str]] = (),
    ports: Sequence[tuple[str | None, int]] = (),
    max_body: int = DEFAULT_MAX_BODY,
    cwd: str | None = None,
    echo_stdout: BinaryIO | None = None,
    echo_stderr: BinaryIO | None = None,
    on_listening: Callable[[list[Origin]], None] | None = None,
    until: asyncio.Event | None = None,
    snapshots: Sequence[Path] | None = None,
    snapshot_max: int = DEFAULT_MAX_BYTES,
    intercept: InterceptSettings | None = None,
    upstream_options: UpstreamOptions | None = None,
    on_environment: Callable[[dict[str, str]], None] | None = None,
    snapshot_policy: SnapshotPolicy = DEFAULT_POLICY,
    allow: Sequence[str] = (),
) -> RecordResult:
    """Record ``argv`` (or, with ``argv`` None, serve until ``until`` is set).

    ``snapshots``: trees to snapshot before the child starts (None: the
    working directory when a command is run; ``[]``: none), together at most
    ``snapshot_max`` bytes; after the child exits, what it changed in them
    is stored as the outcome. ``snapshot_policy`` says what a snapshot
    leaves out (secrets files, ``.git``, run files, binary files).

    Secrets are redacted everywhere the run stores text (exchanges, the
    command line, output, snapshot files, the outcome) with the standard
    rules plus the values of the environment's secret-named variables and
    of the secrets files the snapshots left out.

    ``intercept``: listen as a forward proxy instead (one port: ``--port N``)
    and terminate TLS for the provider hosts with a CA made for this run;
    the child gets ``HTTPS_PROXY`` and a CA bundle, not base URLs. With
    its ``tools``, every other host's HTTPS (and plain HTTP through
    ``HTTP_PROXY``) is recorded too, as tool exchanges (origin
    ``tool:scheme://host[:port]``), but for its ``tools_except`` hosts,
    which the child reaches directly.
    ``upstream_options``: extra CA and address overrides for reaching origins.
    ``on_environment`` is called with the variables set for the agent (name
    to value: the base URL or proxy variables, and ``WIRETAPE_MCP``, where
    ``wiretape mcp`` finds the recorder) once the proxy listens, for an
    agent started by someone else.
    ``allow``: learned correspondences every replay of the run accepts
    (matching.correspond.ALLOWANCES names), stored with it.

    However it ends (an error, a cancellation), the ports, the CA and an
    agent still running are given back, and the run file, once made, keeps
    its end and outcome.

    A write that fails (disk full) stops the recording: later requests get
    an error and are not forwarded, and the result names the failure
    (``write_error``) and what was not saved; what was committed before
    stays readable.

    With a command, SIGINT and SIGTERM go to the agent's group while it
    runs (its exit status says how it took them; ``interrupted`` names the
    signal); before it starts they end the recording, giving back what was
    taken, with Interrupted.

    Returns the RecordResult; the child's exit status is in it. Raises
    CommandNotFound, PortInUse, InvalidUpstream, UsageError, RunFileError
    (RunFileWriteError: the run file could not be created or its snapshot
    stored), Interrupted.
    """
    interrupts = Interrupts() if argv is not None else None
    session: _Recording | None = None
    with interrupts or contextlib.nullcontext():
        try:
            async with contextlib.AsyncExitStack() as stack:
                session = await _prepare_record(
                    stack, argv, cwd=cwd or os.getcwd(), out=out, upstreams=upstreams,
                    ports=ports, max_body=max_body, snapshots=snapshots,
                    snapshot_max=snapshot_max, intercept=intercept,
                    upstream_options=upstream_options or UpstreamOptions(),
                    snapshot_policy=snapshot_policy, allow=allow)
                # The run file exists: however the recording ends, it keeps its end and outcome.
                stack.push_async_callback(_judge_record, session)
                if on_environment is not None:
                    on_environment({**{name: session.env[name] for name in session.env_names},
                                    mcp.VARIABLE: session.env[mcp.VARIABLE]})
                if on_listening is not None:
                    on_listening(session.origins)
                await _serve_record(stack, session, until, echo_stdout, echo_stderr,
                                    interrupts)
        except asyncio.CancelledError:
            if interrupts is None or not interrupts.cancelled or interrupts.signum is None:
                raise
            interrupts.uncancel()
            if session is None:
                raise Interrupted(interrupts.signum, "before the recording began; nothing "
                                                     "was recorded") from None
            when = ("after the agent exited" if session.exit_status is not None
                    else "before the agent started")
            raise Interrupted(interrupts.signum, f"{when}; the run file {session.path} keeps "
                                                 "what was recorded") from None
    assert session is not None
    if interrupts is not None:
        session.interrupted = interrupts.signum
    return session.result()


@dataclass
class _Recording:
    """What the phases of one recording share: made by ``_prepare_record``,
    filled in by ``_serve_record`` and ``_judge_record``."""

    argv: list[str] | None
    cwd: str
    run_id: str
    path: Path
    run: RunFile
    recorder: Recorder
    listeners: Listeners
    connect: ConnectProxy | None
    origins: list[Origin]
    env: dict[str, str]
    env_names: list[str]
    #: (snapshot id, tree, its entries before the agent ran)
    snapshots: list[tuple[int, Path, list[Entry]]]
    #: folders made to hold the run file: wiretape's doing, not the agent's
    made_for_run: frozenset[Path]
    #: what counts as a secret in this run, and what the snapshots take
    rules: Rules = STANDARD
    policy: SnapshotPolicy = DEFAULT_POLICY
    left_out: list[tuple[Path, list[LeftOut]]] = field(default_factory=list)
    started: float = 0.0  # time.monotonic() when serving began
    exit_status: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    exchanges: int = 0
    body_bytes: int = 0
    #: recorded responses with a status of 400 or more: status to count
    error_statuses: dict[int, int] = field(default_factory=dict)
    #: answers wiretape made itself (the origin never answered): status to count
    own_statuses: dict[int, int] = field(default_factory=dict)
    #: the same two for tool exchanges (``--tools``)
    tool_error_statuses: dict[int, int] = field(default_factory=dict)
    tool_own_statuses: dict[int, int] = field(default_factory=dict)
    #: a write of the run's end or outcome that failed (the recorder's own
    #: failure is ``recorder.write_failure``)
    write_error: RunFileWriteError | None = None
    interrupted: int | None = None
    #: the outermost folder made to hold the run file, if any
    made_folder: Path | None = None
    #: writes what the forward proxy saw as it changes, off the event loop
    reports: ReportKeeper | None = None
    #: tool exchanges stored (``--tools``): tool origin to count
    tool_exchanges: dict[str, int] = field(default_factory=dict)
    #: where `wiretape mcp` shims send their stdio MCP sessions
    hub: mcp.Hub | None = None

    def count_status(self, exchange: Exchange) -> None:
        """Note a stored exchange's status when it is an error (400 or
        more): the provider's, or wiretape's own when the origin never
        answered (``Exchange.answered_by_wiretape``)."""
        if exchange.kind == "tool":
            self.tool_exchanges[exchange.origin] = self.tool_exchanges.get(exchange.origin, 0) + 1
        status = exchange.response.status if exchange.response is not None else None
        if status is None:
            return
        tool = exchange.kind == "tool"
        if exchange.answered_by_wiretape:
            own = self.tool_own_statuses if tool else self.own_statuses
            own[status] = own.get(status, 0) + 1
        elif status >= 400:
            errors = self.tool_error_statuses if tool else self.error_statuses
            errors[status] = errors.get(status, 0) + 1

    def result(self) -> RecordResult:
        stats = self.recorder.stats
        return RecordResult(self.run_id, self.path, self.exchanges, self.body_bytes,
                            time.monotonic() - self.started, self.exit_status,
                            tuple(self.origins), stats.failures, self.listeners.refused,
                            self.connect.report if self.connect is not None else None,
                            left_out=self.left_out,
                            error_statuses=dict(sorted(self.error_statuses.items())),
                            own_statuses=dict(sorted(self.own_statuses.items())),
                            tool_error_statuses=dict(sorted(self.tool_error_statuses.items())),
                            tool_own_statuses=dict(sorted(self.tool_own_statuses.items())),
                            write_error=self.recorder.write_failure or self.write_error,
                            not_saved=stats.not_saved, refused_unsaved=stats.refused,
                            interrupted=self.interrupted, end_saved=self.write_error is None,
                            made_folder=self.made_folder, mcp_sessions=stats.mcp_sessions,
                            tool_exchanges=dict(sorted(self.tool_exchanges.items())))


async def _prepare_record(
    stack: contextlib.AsyncExitStack, argv: Sequence[str] | None, *, cwd: str,
    out: Path | None, upstreams: Sequence[tuple[str, str]],
    ports: Sequence[tuple[str | None, int]], max_body: int, snapshots: Sequence[Path] | None,
    snapshot_max: int, intercept: InterceptSettings | None, upstream_options: UpstreamOptions,
    snapshot_policy: SnapshotPolicy = DEFAULT_POLICY, allow: Sequence[str] = (),
) -> _Recording:
    """Check the input and snapshot the trees; then bind the listeners;
    then create the run file and its recorder, so bad input leaves nothing
    half-made behind. Each resource is entered into ``stack`` as it is
    acquired."""
    upstream_options.verify()  # a bad --upstream-ca is a usage error before anything starts
    try:  # so is a bad WIRETAPE_SPOOL_BYTES or WIRETAPE_WS_CLOSE_TIMEOUT
        spool_at = spool_bytes(os.environ, DEFAULT_SPOOL_AT)
        close_timeout = ws_close_timeout(os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    planned = ([] if intercept is not None else
               plan_origins(upstreams, ports, include_known=argv is not None))
    if argv is not None:
        resolve_command(argv, cwd)
    run_id = new_run_id()
    path = Path(out) if out is not None else runs_dir() / f"{run_id}.wtape"
    if path.exists():
        raise RunFileError(path, "it already exists and is never overwritten; "
                           "choose another -o path", verb="write")
    roots = [Path(cwd)] if snapshots is None and argv is not None else list(snapshots or [])
    # Folders made for the run file, and the files wiretape's own output
    # goes to (`wiretape record -- agent > log.txt`), are wiretape's
    # changes, not the agent's.
    missing = [p for p in path.absolute().parents if not p.exists()]
    made_for_run = frozenset(missing) | own_output_files()
    taken = take_snapshots(roots, exclude=store_paths(path) | own_output_files(),
                           max_bytes=snapshot_max, policy=snapshot_policy)
    # The values of secret-named variables and of the secrets files, left
    # out or taken on request (--snapshot-include .env), are secrets
    # wherever else they turn up (and in the snapshot's copy of the file).
    rules = STANDARD.with_literals(
        [*secret_values(os.environ),
         *(value for root, _, left in taken for value in secrets_file_values(root, left)),
         *(value for _, entries, _ in taken for value in stored_secrets_values(entries))])
    facts = Facts()
    redact = rules_redactor(rules, facts)
    taken = [(root, redact_entries(entries, redact), left) for root, entries, left in taken]
    # The listeners are bound before the run file and the recorder exist;
    # connections and the forward proxy's report find them here once they do.
    run: RunFile | None = None
    recorder: Recorder | None = None

    def handler_for(name: str, upstream: str, conn_id: int) -> Handler:
        assert recorder is not None
        return recorder.handler(name, upstream, conn_id)

    reports = ReportKeeper(rules)

    def store_report(report: ConnectReport) -> None:
        if run is not None:  # what the forward proxy saw, kept as it changes
            reports.keep(run, report)

    listeners = Listeners(max_body=max_body)
    connect, origins, env, names = await _listen_record(
        stack, listeners, planned, ports, intercept, upstream_options, handler_for, store_report)
    # The names of the known origins' key variables are kept from the start
    # (a run whose end is never stored still has them); the end adds those
    # whose values the recorded traffic carried.
    credentials = (credential_names(os.environ, (), key_variables([o.name for o in origins]))
                   if argv is not None else [])
    info = RunInfo(run_id=run_id, wiretape_version=__version__, argv=tuple(argv or ()), cwd=cwd,
                   env_names=tuple(sorted(names)), origins=tuple(origins),
                   started_at_ns=time.time_ns(), mode="record" if argv is not None else "serve",
                   extra={**trust.here(), **tools_extra(intercept)},
                   allow=tuple(sorted(set(allow))),
                   credential_env=tuple(credentials))
    run = create_run(path, redact_info(info, rules, facts))
    stack.callback(run.close, compact=True)
    try:
        if intercept is not None:
            run.set_intercept(sorted(h for h in intercept_hosts(intercept.extra_hosts)))
        snapshot_ids = [(run.add_snapshot(str(root), [e for e in entries if not e.left_out]),
                         root, entries) for root, entries, _ in taken]
        if taken:
            run.set_snapshot_policy(snapshot_policy.to_json(), {
                sid: [(item.path, item.reason) for item in left[:1000]]
                for (sid, _, _), (_, _, left) in zip(snapshot_ids, taken, strict=True)})
        run.add_redactions(unique(facts.items))
    except BaseException as exc:
        # The recording never began: no half-made run file is left behind.
        run.close()
        _remove_run_file(path)
        if isinstance(exc, Exception) and (isinstance(exc, RunFileWriteError)
                                           or not isinstance(exc, RunFileError)):
            raise RunFileWriteError(path, f"{write_failure_reason(exc)} while storing the "
                                          "snapshot; nothing was recorded") from exc
        raise
    session: _Recording | None = None

    def on_exchange(exchange: Exchange) -> None:
        if session is not None:
            session.count_status(exchange)

    recorder = Recorder(run, options=upstream_options, rules=rules, on_exchange=on_exchange,
                        spool_at=spool_at, close_timeout=close_timeout)
    stack.push_async_callback(recorder.aclose)
    await recorder.warm_up()
    await start_worker_threads(1)  # now, not while serving
    # Stdio MCP servers the agent starts through `wiretape mcp` find the
    # recorder here (closed before the recorder: its sessions are stored).
    hub = mcp.Hub("record", recorder.mcp_session)
    env[mcp.VARIABLE] = await hub.start()  # (serve hands it on through on_environment)
    stack.push_async_callback(hub.close)
    session = _Recording(list(argv) if argv is not None else None, cwd, run_id, path, run,
                         recorder, listeners, connect, origins, env, names, snapshot_ids,
                         made_for_run, rules=rules, policy=snapshot_policy,
                         left_out=[(root, left) for root, _, left in taken],
                         made_folder=missing[-1] if missing and out is not None else None,
                         reports=reports, hub=hub)
    return session


def create_run(path: Path, info: RunInfo) -> RunFile:
    """The new run file; one that could be created but not written (a full
    disk) is removed again. Raises RunFileError: RunFileWriteError when the
    system would not let it be written."""
    try:
        return RunFile.create(path, info)
    except RunFileError as exc:
        cause = exc.__cause__
        if isinstance(exc, RunFileWriteError):
            failure: BaseException = exc
        elif not isinstance(cause, (sqlite3.Error, OSError)):
            raise
        else:
            failure = cause
        if isinstance(cause, FileExistsError):
            if path.exists() or path.is_symlink():
                raise  # it exists: never overwritten, never removed
            raise RunFileWriteError(path, f"{path.parent} is not a folder") from cause
    except (sqlite3.Error, OSError) as exc:
        failure = exc
    _remove_run_file(path)
    raise RunFileWriteError(path, f"{write_failure_reason(failure)}; nothing was "
                                  "recorded") from failure


def _remove_run_file(path: Path) -> None:
    for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        with contextlib.suppress(OSError):
            leftover.unlink()


async def _listen_record(
    stack: contextlib.AsyncExitStack, listeners: Listeners, planned: Sequence[PlannedOrigin],
    ports: Sequence[tuple[str | None, int]], intercept: InterceptSettings | None,
    upstream_options: UpstreamOptions, handler_for: Callable[[str, str, int], Handler],
    store_report: Callable[[ConnectReport], None],
) -> tuple[ConnectProxy | None, list[Origin], dict[str, str], list[str]]:
    """Bind the listeners: one per planned origin, or (intercepting) the
    forward proxy with a CA made for this run. Returns the forward proxy
    (intercepting only), the origins, and the agent's environment with the
    names of the variables set in it."""
    if intercept is None:
        stack.push_async_callback(listeners.close)
        origins = await bind_origins(listeners, planned, handler_for)
        env, names = child_environment([(o.upstream, o.port, o.env_vars) for o in origins])
        return None, origins, env, names
    interception = Interception()
    stack.callback(interception.close)
    stack.push_async_callback(listeners.close)
    hosts = intercept_hosts(intercept.extra_hosts)
    connect = ConnectProxy(
        interception.ca, hosts,
        lambda name, authority, conn_id: handler_for(name, f"https://{authority}", conn_id),
        tunnel=True, next_connection_id=listeners.next_connection_id,
        resolve=upstream_options.resolve, max_body=listeners.max_body,
        on_refused=listeners.note_refused, on_change=store_report,
        tools=intercept.tools, tools_except=intercept.tools_except)

    def plain_http(conn_id: int) -> Handler:
        if not intercept.tools:
            return plain_http_refusal(plain_error, listeners.note_refused)
        return tool_http_handler(lambda name, upstream: handler_for(name, upstream, conn_id),
                                 intercept.tools_except, plain_error, listeners.note_refused)

    port = await listeners.listen(forward_proxy_port(ports), plain_http, connect=connect)
    origins = [Origin(name, f"https://{host}", port, ()) for host, name in hosts.items()]
    env, names = proxy_environment(os.environ, port, interception.bundle,
                                   intercept.tools_except)
    return connect, origins, env, names


async def _serve_record(stack: contextlib.AsyncExitStack, session: _Recording,
                        until: asyncio.Event | None, echo_stdout: BinaryIO | None,
                        echo_stderr: BinaryIO | None, interrupts: Interrupts | None) -> None:
    """Run the agent while the proxy records (with no command: wait for
    ``until``). The child is entered into ``stack``, and SIGINT/SIGTERM go
    to its group until it exits."""
    session.started = time.monotonic()
    if session.argv is None:
        assert until is not None
        await until.wait()
        return
    result = await run_child(stack, session.argv, cwd=session.cwd, env=session.env,
                             echo_stdout=echo_stdout, echo_stderr=echo_stderr,
                             interrupts=interrupts)
    session.exit_status, session.stdout, session.stderr = (result.exit_status, result.stdout,
                                                           result.stderr)


async def _judge_record(session: _Recording) -> None:
    """However serving ended: stop listening and let every exchange be
    committed (the stack closes both again on its way out, which then does
    nothing), then store the run's end and what the agent changed in the
    snapshotted trees."""
    await session.listeners.close()
    if session.hub is not None:  # (its sessions are stored with the others)
        await session.hub.close()
    await session.recorder.aclose()
    if session.reports is not None:
        await session.reports.settle()
    run, rules = session.run, session.rules
    # The snapshots were taken, and redacted, before the run: the files after
    # it are redacted by the same rules, or a file the agent left alone would
    # differ from its snapshot by what the run learned since.
    snapshot_rules = rules
    # A credential a tool sent in a header or query parameter is a secret
    # in the agent's output too (it printed what the service echoed).
    rules = rules.with_literals(session.recorder.echoed_secrets())
    facts = Facts()
    try:
        if session.connect is not None:
            run.set_connect_report(redacted_report(session.connect.report, rules))
        redact = rules_redactor(rules, facts)
        run.finish(session.exit_status, redact(session.stdout, "stdout"),
                   redact(session.stderr, "stderr"))
        if session.argv is not None:
            run.set_credential_env(credential_names(
                os.environ, (fact for seq, fact in run.redactions() if seq is not None),
                key_variables([o.name for o in session.origins])))
        facts.items.extend(store_outcome(
            run, session.snapshots, snapshot_rules,
            store_paths(session.path) | session.made_for_run, session.policy))
        run.add_redactions(unique(facts.items))
    except (sqlite3.Error, OSError, RunFileWriteError) as exc:
        # The same failure the recorder may have met: named, not raised, so
        # that the summary says what was and was not saved.
        session.write_error = RunFileWriteError(
            session.path, f"{write_failure_reason(exc)} while storing the run's end")
    try:
        session.exchanges, session.body_bytes = run.exchange_count(), run.body_bytes()
    except RunFileError:
        session.exchanges = session.recorder.stats.exchanges
        session.body_bytes = session.recorder.stats.body_bytes


def redacted_report(report: ConnectReport, rules: Rules) -> ConnectReportJSON:
    """What the forward proxy saw, as stored: error texts redacted."""
    return cast(ConnectReportJSON, redact_json(report.to_json(), "connect", rules))


class ReportKeeper:
    """Keeps what the forward proxy saw in the run file as it changes, off
    the event loop: :meth:`keep` (on the loop) takes the report as it is
    now, and a task writes it on a worker thread (``RunFile`` calls wait for
    a lock a store thread may hold). Reports that change while one is being
    written are written once, the latest; each write replaces the last."""

    def __init__(self, rules: Rules) -> None:
        self._rules = rules
        self._latest: tuple[RunFile, ConnectReportJSON] | None = None
        self._task: asyncio.Task[None] | None = None
        #: why the last write failed, if it did (the run's end writes the
        #: report again, and says when that fails)
        self.failure: str | None = None

    def keep(self, run: RunFile, report: ConnectReport) -> None:
        """Write ``report`` as it is now (called on the event loop)."""
        self._latest = (run, report.to_json())
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._write(), name="wiretape-connect-report")

    async def _write(self) -> None:
        while self._latest is not None:
            (run, report), self._latest = self._latest, None
            try:
                await asyncio.to_thread(self._store, run, report)
            except (sqlite3.Error, OSError, RunFileError) as exc:
                self.failure = str(exc)

    def _store(self, run: RunFile, report: ConnectReportJSON) -> None:
        run.set_connect_report(cast(ConnectReportJSON,
                                    redact_json(report, "connect", self._rules)))

    async def settle(self) -> None:
        """Wait until every report kept so far is written."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])


#: Text files up to this size (bytes) keep their recorded result, so that a
#: replay can tell a file differing only in timestamps from one that differs.
KEEP_CONTENT_MAX = 8 * 1024 * 1024


def store_outcome(run: RunFile, trees: Iterable[tuple[int, Path | str, Sequence[Entry]]],
                  rules: Rules, exclude: frozenset[Path], policy: SnapshotPolicy,
                  ) -> list[Redaction]:
    """Store what the agent changed in each snapshotted tree: ``trees`` are
    (snapshot id, the tree as it is now, the snapshot's entries). Compared
    as stored: the files after the agent ran are redacted by ``rules``, the
    snapshot's, so a file with a secret in it is unchanged. Returns the
    redaction facts of the changed files. Raises what the run file's
    writes raise."""
    facts: list[Redaction] = []
    for snapshot_id, root, entries in trees:
        found = Facts()
        after = {e.path: redact_entry(e, rules_redactor(rules, found), "outcome")
                 for e in walk(Path(root), exclude=exclude, policy=policy)}
        changes = compare({e.path: e for e in entries}, after)
        changed = {f"outcome:{c.path}" for c in changes}
        facts.extend(f for f in found.items if f.location in changed)
        run.set_outcome_changes(snapshot_id, changes, kept_contents(changes, after))
    return facts


def kept_contents(changes: Sequence[Change], after: Mapping[str, Entry]) -> dict[str, bytes]:
    """The after contents of changed text files small enough to keep (at
    most ``KEEP_CONTENT_MAX`` bytes each), by path: what a recording and a
    fork store beside their outcome changes."""
    return {c.path: after[c.path].data for c in changes
            if c.change != "deleted" and not c.binary and after[c.path].kind == "file"
            and len(after[c.path].data) <= KEEP_CONTENT_MAX}




def take_snapshots(roots: Sequence[Path], *, exclude: frozenset[Path], max_bytes: int,
                   policy: SnapshotPolicy = DEFAULT_POLICY,
                   ) -> list[tuple[Path, list[Entry], list[LeftOut]]]:
    """Read each tree (``~`` expanded, made absolute) as ``policy`` takes
    it, with what it left out. Raises UsageError for a missing tree or one
    over the size limit (counted over all trees)."""
    out: list[tuple[Path, list[Entry], list[LeftOut]]] = []
    left = max_bytes
    for raw in roots:
        root = Path(os.path.expanduser(str(raw))).absolute()
        if not root.is_dir():
            raise UsageError(f"cannot snapshot {raw}: it is not a directory (give an existing "
                             "folder with --snapshot, or --no-snapshot)")
        left_out: list[LeftOut] = []
        entries = list(walk(root, exclude=exclude, max_bytes=left, policy=policy,
                            left_out=left_out))
        left -= sum(len(e.data) for e in entries)
        out.append((root, entries, left_out))
    return out

