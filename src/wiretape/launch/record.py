"""A recording session: listeners for each origin, the agent as a child
with its base-URL variables pointed at them, and the run file.

Ports are bound and the command resolved before the run file is created, so
bad input leaves nothing half-made behind.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from wiretape import __version__
from wiretape.errors import RunFileError, UsageError
from wiretape.launch.child import Child, forward_signals, resolve_command
from wiretape.launch.intercept import (
    Interception,
    InterceptSettings,
    forward_proxy_port,
    intercept_hosts,
    plain_http_refusal,
    proxy_environment,
)
from wiretape.launch.origins import PlannedOrigin, child_environment, plan_origins
from wiretape.model import DEFAULT_MAX_BODY, Origin, RunInfo
from wiretape.origins import UpstreamOptions, parse_upstream
from wiretape.proxy.connect import ConnectProxy, ConnectReport
from wiretape.proxy.http1 import ErrorBody, Handler, plain_error
from wiretape.proxy.record import Recorder
from wiretape.proxy.server import Listeners
from wiretape.proxy.shapes import error_response
from wiretape.snapshot.tree import DEFAULT_MAX_BYTES, Change, Entry, compare, walk
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


def _origin_error_body(path: bytes) -> ErrorBody:
    return lambda status, code, message: error_response(path, status, code, message)


async def bind_origins(
    listeners: Listeners, planned: Sequence[PlannedOrigin], recorder_ref: list[Recorder]
) -> list[Origin]:
    """Listen for each planned origin; handlers are looked up lazily so the
    recorder can be created after the ports are known. Raises PortInUse."""
    origins = []
    for p in planned:
        _, _, base = parse_upstream(p.upstream)

        def handler_for(conn_id: int, p: PlannedOrigin = p) -> Handler:
            return recorder_ref[0].handler(p.name, p.upstream, conn_id)

        port = await listeners.listen(p.port, handler_for, _origin_error_body(base.encode()))
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
) -> RecordResult:
    """Record ``argv`` (or, with ``argv`` None, serve until ``until`` is set).

    ``snapshots``: trees to snapshot before the child starts (None: the
    working directory when a command is run; ``[]``: none), together at most
    ``snapshot_max`` bytes; after the child exits, what it changed in them
    is stored as the outcome.

    ``intercept``: listen as a forward proxy instead (one port: ``--port N``)
    and terminate TLS for the provider hosts with a CA made for this run;
    the child gets ``HTTPS_PROXY`` and a CA bundle, not base URLs.
    ``upstream_options``: extra CA and address overrides for reaching origins.
    ``on_environment`` is called with the variables set for the agent (name
    to value) once the proxy listens, for an agent started by someone else.

    Returns the RecordResult; the child's exit status is in it. Raises
    CommandNotFound, PortInUse, InvalidUpstream, UsageError, RunFileError.
    """
    cwd = cwd or os.getcwd()
    upstream_options = upstream_options or UpstreamOptions()
    upstream_options.verify()  # a bad --upstream-ca is a usage error before anything starts
    planned = ([] if intercept is not None else
               plan_origins(upstreams, ports, include_known=argv is not None))
    if argv is not None:
        resolve_command(argv, cwd)
    run_id = new_run_id()
    path = Path(out) if out is not None else runs_dir() / f"{run_id}.wtape"
    if path.exists():
        raise RunFileError(path, "it already exists and is never overwritten; choose another -o path")
    roots = [Path(cwd)] if snapshots is None and argv is not None else list(snapshots or [])
    # Folders made to hold the run file are wiretape's doing, not the agent's.
    made_for_run = frozenset(p for p in path.absolute().parents if not p.exists())
    taken = take_snapshots(roots, exclude=store_paths(path), max_bytes=snapshot_max)
    listeners = Listeners(max_body=max_body)
    recorder_ref: list[Recorder] = []
    run_ref: list[RunFile] = []
    interception = Interception() if intercept is not None else None
    connect: ConnectProxy | None = None
    try:
        if interception is not None and intercept is not None:
            hosts = intercept_hosts(intercept.extra_hosts)
            connect = ConnectProxy(
                interception.ca, hosts,
                lambda name, authority, conn_id: recorder_ref[0].handler(
                    name, f"https://{authority}", conn_id),
                tunnel=True, next_connection_id=listeners.next_connection_id,
                resolve=upstream_options.resolve, max_body=max_body,
                on_refused=listeners.note_refused,
                on_change=lambda report: _store_connect_report(run_ref, report))
            port = await listeners.listen(forward_proxy_port(ports),
                                          lambda _id: plain_http_refusal(
                                              plain_error, listeners.note_refused),
                                          connect=connect)
            origins = [Origin(name, f"https://{host}", port, ()) for host, name in hosts.items()]
            env, names = proxy_environment(os.environ, port, interception.bundle)
        else:
            origins = await bind_origins(listeners, planned, recorder_ref)
            env, names = child_environment([(o.upstream, o.port, o.env_vars) for o in origins])
    except BaseException:
        await listeners.close()
        if interception is not None:
            interception.close()
        raise
    started = time.time_ns()
    info = RunInfo(run_id=run_id, wiretape_version=__version__, argv=tuple(argv or ()), cwd=cwd,
                   env_names=tuple(sorted(names)), origins=tuple(origins), started_at_ns=started,
                   mode="record" if argv is not None else "serve")
    try:
        run = RunFile.create(path, info)
    except BaseException:
        await listeners.close()
        if interception is not None:
            interception.close()
        raise
    run_ref.append(run)
    if intercept is not None:
        run.set_intercept(sorted(h for h in intercept_hosts(intercept.extra_hosts)))
    snapshot_ids = [(run.add_snapshot(str(root), entries), root, entries) for root, entries in taken]
    recorder = Recorder(run, options=upstream_options)
    recorder_ref.append(recorder)
    if on_environment is not None:
        on_environment({name: env[name] for name in names})
    if on_listening is not None:
        on_listening(origins)
    t0 = time.monotonic()
    exit_status: int | None = None
    stdout = stderr = b""
    try:
        if argv is not None:
            child = await Child.start(argv, cwd=cwd, env=env, echo_stdout=echo_stdout,
                                      echo_stderr=echo_stderr)
            with forward_signals(child):
                result = await child.wait()
            exit_status, stdout, stderr = result.exit_status, result.stdout, result.stderr
        else:
            assert until is not None
            await until.wait()
    finally:
        await listeners.close()
        await recorder.aclose()
        if interception is not None:
            interception.close()
        if connect is not None:
            run.set_connect_report(connect.report.to_json())
        run.finish(exit_status, stdout, stderr)
        for snapshot_id, root, entries in snapshot_ids:
            after = {e.path: e for e in walk(root, exclude=store_paths(path) | made_for_run)}
            changes = compare({e.path: e for e in entries}, after)
            run.set_outcome_changes(snapshot_id, changes, _kept_contents(changes, after))
        exchanges, body_bytes = run.exchange_count(), run.body_bytes()
        run.close(compact=True)
    return RecordResult(run_id, path, exchanges, body_bytes, time.monotonic() - t0, exit_status,
                        tuple(origins), recorder.stats.failures, listeners.refused,
                        connect.report if connect is not None else None)


#: Text files up to this size (bytes) keep their recorded result, so that a
#: replay can tell a file differing only in timestamps from one that differs.
KEEP_CONTENT_MAX = 8 * 1024 * 1024


def _kept_contents(changes: Sequence[Change], after: Mapping[str, Entry]) -> dict[str, bytes]:
    return {c.path: after[c.path].data for c in changes
            if c.change != "deleted" and not c.binary and after[c.path].kind == "file"
            and len(after[c.path].data) <= KEEP_CONTENT_MAX}


def _store_connect_report(run_ref: list[RunFile], report: ConnectReport) -> None:
    """Keep what the forward proxy saw as it changes (once the run file exists)."""
    if run_ref:
        run_ref[0].set_connect_report(report.to_json())


def take_snapshots(roots: Sequence[Path], *, exclude: frozenset[Path],
                   max_bytes: int) -> list[tuple[Path, list[Entry]]]:
    """Read each tree (``~`` expanded, made absolute). Raises UsageError for
    a missing tree or one over the size limit (counted over all trees)."""
    out: list[tuple[Path, list[Entry]]] = []
    left = max_bytes
    for raw in roots:
        root = Path(os.path.expanduser(str(raw))).absolute()
        if not root.is_dir():
            raise UsageError(f"cannot snapshot {raw}: it is not a directory (give an existing "
                             "folder with --snapshot, or --no-snapshot)")
        entries = list(walk(root, exclude=exclude, max_bytes=left))
        left -= sum(len(e.data) for e in entries)
        out.append((root, entries))
    return out

