"""A recording session: listeners for each origin, the agent as a child
with its base-URL variables pointed at them, and the run file.

Ports are bound and the command resolved before the run file is created, so
bad input leaves nothing half-made behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from wiretape import __version__
from wiretape.errors import RunFileError, UsageError
from wiretape.launch.child import Child, resolve_command
from wiretape.launch.origins import PlannedOrigin, child_environment, plan_origins, proxy_url
from wiretape.model import Origin, RunInfo
from wiretape.snapshot.tree import DEFAULT_MAX_BYTES, Change, Entry, compare, walk
from wiretape.proxy.http1 import DEFAULT_MAX_BODY
from wiretape.proxy.record import Recorder
from wiretape.proxy.server import Listeners
from wiretape.proxy.shapes import error_response
from wiretape.proxy.upstream import parse_upstream
from wiretape.store.locate import new_run_id, runs_dir
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


def _origin_error_body(path: bytes) -> Callable[[int, str, str], tuple]:  # type: ignore[type-arg]
    return lambda status, code, message: error_response(path, status, code, message)


async def bind_origins(
    listeners: Listeners, planned: Sequence[PlannedOrigin], recorder_ref: list[Recorder]
) -> list[Origin]:
    """Listen for each planned origin; handlers are looked up lazily so the
    recorder can be created after the ports are known. Raises PortInUse."""
    origins = []
    for p in planned:
        _, _, base = parse_upstream(p.upstream)

        def handler_for(conn_id: int, p: PlannedOrigin = p):  # type: ignore[no-untyped-def]
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
) -> RecordResult:
    """Record ``argv`` (or, with ``argv`` None, serve until ``until`` is set).

    ``snapshots``: trees to snapshot before the child starts (None: the
    working directory when a command is run; ``[]``: none), together at most
    ``snapshot_max`` bytes; after the child exits, what it changed in them
    is stored as the outcome.

    Returns the RecordResult; the child's exit status is in it. Raises
    CommandNotFound, PortInUse, InvalidUpstream, UsageError, RunFileError.
    """
    cwd = cwd or os.getcwd()
    planned = plan_origins(upstreams, ports, include_known=argv is not None)
    if argv is not None:
        resolve_command(argv, cwd)
    run_id = new_run_id()
    path = Path(out) if out is not None else runs_dir() / f"{run_id}.wtape"
    if path.exists():
        raise RunFileError(path, "it already exists and is never overwritten; choose another -o path")
    roots = [Path(cwd)] if snapshots is None and argv is not None else list(snapshots or [])
    # Folders made to hold the run file are wiretape's doing, not the agent's.
    made_for_run = frozenset(p for p in path.absolute().parents if not p.exists())
    taken = take_snapshots(roots, exclude=_store_paths(path), max_bytes=snapshot_max)
    listeners = Listeners(max_body=max_body)
    recorder_ref: list[Recorder] = []
    try:
        origins = await bind_origins(listeners, planned, recorder_ref)
    except BaseException:
        await listeners.close()
        raise
    env, names = child_environment([(o.upstream, o.port, o.env_vars) for o in origins])
    started = time.time_ns()
    info = RunInfo(run_id=run_id, wiretape_version=__version__, argv=tuple(argv or ()), cwd=cwd,
                   env_names=tuple(sorted(names)), origins=tuple(origins), started_at_ns=started,
                   mode="record" if argv is not None else "serve")
    try:
        run = RunFile.create(path, info)
    except BaseException:
        await listeners.close()
        raise
    snapshot_ids = [(run.add_snapshot(str(root), entries), root, entries) for root, entries in taken]
    recorder = Recorder(run)
    recorder_ref.append(recorder)
    if on_listening is not None:
        on_listening(origins)
    t0 = time.monotonic()
    exit_status: int | None = None
    stdout = stderr = b""
    try:
        if argv is not None:
            child = await Child.start(argv, cwd=cwd, env=env, echo_stdout=echo_stdout,
                                      echo_stderr=echo_stderr)
            with _forward_signals(child):
                result = await child.wait()
            exit_status, stdout, stderr = result.exit_status, result.stdout, result.stderr
        else:
            assert until is not None
            await until.wait()
    finally:
        await listeners.close()
        await recorder.aclose()
        run.finish(exit_status, stdout, stderr)
        for snapshot_id, root, entries in snapshot_ids:
            after = {e.path: e for e in walk(root, exclude=_store_paths(path) | made_for_run)}
            changes = compare({e.path: e for e in entries}, after)
            run.set_outcome_changes(snapshot_id, changes, _kept_contents(changes, after))
        exchanges, body_bytes = run.exchange_count(), run.body_bytes()
        run.close(compact=True)
    return RecordResult(run_id, path, exchanges, body_bytes, time.monotonic() - t0, exit_status,
                        tuple(origins), recorder.stats.failures, listeners.refused)


#: Text files up to this size (bytes) keep their recorded result, so that a
#: replay can tell a file differing only in timestamps from one that differs.
KEEP_CONTENT_MAX = 8 * 1024 * 1024


def _kept_contents(changes: Sequence[Change], after: Mapping[str, Entry]) -> dict[str, bytes]:
    return {c.path: after[c.path].data for c in changes
            if c.change != "deleted" and not c.binary and after[c.path].kind == "file"
            and len(after[c.path].data) <= KEEP_CONTENT_MAX}


def _store_paths(run_path: Path) -> frozenset[Path]:
    """What a snapshot never includes: the store and the run file itself."""
    base = run_path.resolve()
    return frozenset({runs_dir().parent.resolve(), base, Path(str(base) + "-wal"),
                      Path(str(base) + "-shm"), Path(str(base) + "-journal")})


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


@contextlib.contextmanager
def _forward_signals(child: Child):  # type: ignore[no-untyped-def]
    """While the child runs, SIGINT/SIGTERM to wiretape go to its group."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, child.signal_group, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def listening_urls(origins: Sequence[Origin]) -> list[tuple[str, str]]:
    return [(o.name, proxy_url(o.upstream, o.port)) for o in origins]
