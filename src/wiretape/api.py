"""The Python API for a command: record it, replay a run against it, get
values back.

    run = wiretape.record(["python", "agent.py"], upstreams={"openai": URL})
    verdict = wiretape.replay(run.path)
    assert verdict.passed, verdict

Owns turning Python arguments (mappings, strings, paths) into the launch
layer's settings, running its coroutines (``asyncio.run`` in the plain
forms), and the :class:`Run` a recording returns. Prints nothing. Must not
know the command line, the proxy's insides or the run file's schema.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, TypeVar

from wiretape.errors import UsageError
from wiretape.model import DEFAULT_MAX_BODY, Origin
from wiretape.playback.verdict import Verdict

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from wiretape.launch.fork import ForkResult
    from wiretape.launch.intercept import InterceptionArguments
    from wiretape.launch.record import RecordResult
    from wiretape.launch.replay import ReplaySettings

__all__ = [
    "MAX_BODY",
    "ModeName",
    "PaceName",
    "Run",
    "compare",
    "fork",
    "record",
    "record_async",
    "replay",
    "replay_async",
]

T = TypeVar("T")

ModeName = Literal["strict", "diagnostic"]
"""A replay mode: ``strict`` stops at the first mismatch; ``diagnostic`` goes on."""

PaceName = Literal["fast", "recorded"]
"""How recorded frames are written back: as fast as possible, or with their timing."""

MAX_BODY = DEFAULT_MAX_BODY
"""The largest request body a proxy accepts by default, in bytes (larger gets 413)."""


@dataclass(frozen=True)
class Run:
    """A finished recording.

    ``path`` is the run file; ``exchanges`` how many request/response pairs
    it holds; ``body_bytes`` their request and response bodies as they
    crossed the wire, in bytes; ``duration_s`` the recording's wall time in
    seconds; ``exit_status`` the command's (None when no command ran);
    ``stdout``/``stderr`` what it wrote; ``origins`` where each origin was
    listened for; ``failures`` one line per exchange that did not complete
    (origin unreachable, cut off, timed out).
    """

    run_id: str
    path: Path
    exchanges: int
    body_bytes: int
    duration_s: float
    exit_status: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    origins: tuple[Origin, ...] = ()
    failures: tuple[str, ...] = ()


class _Keep(io.BytesIO):
    """Keeps what the agent writes, and passes it on to ``forward`` if given."""

    def __init__(self, forward: BinaryIO | None) -> None:
        super().__init__()
        self._forward = forward

    def write(self, data: ReadableBuffer) -> int:
        if self._forward is not None:
            self._forward.write(data)
            self._forward.flush()
        return super().write(data)


def port_pairs(port: int | None, ports: Mapping[str, int] | None) -> list[tuple[str | None, int]]:
    """``port`` (for the first origin) and ``ports`` (by origin name) as the
    launch layer's pairs. Raises UsageError for a number outside 0..65535."""
    pairs: list[tuple[str | None, int]] = [] if port is None else [(None, port)]
    pairs += list((ports or {}).items())
    for name, number in pairs:
        if not isinstance(number, int) or not 0 <= number <= 65535:
            where = f"ports[{name!r}]" if name else "port"
            raise UsageError(f"invalid {where}={number!r}: expected an int with 0 <= N <= 65535")
    return pairs


def replay_settings(mode: str, pace: str, substitutions: Mapping[str, str] | None,
                    allow_substitutions: bool, ports: list[tuple[str | None, int]],
                    max_body: int) -> ReplaySettings:
    """The launch layer's settings for a replay. Raises UsageError for an
    unknown mode or pace."""
    from wiretape.launch.replay import ReplaySettings
    from wiretape.playback.decide import Mode, Substitution
    from wiretape.playback.pacing import Pace

    if mode not in ("strict", "diagnostic"):
        raise UsageError(f"invalid mode {mode!r}: expected 'strict' or 'diagnostic'")
    if pace not in ("fast", "recorded"):
        raise UsageError(f"invalid pace {pace!r}: expected 'fast' or 'recorded'")
    subs = tuple(Substitution(old.encode(), new.encode())
                 for old, new in (substitutions or {}).items())
    return ReplaySettings(mode=Mode(mode), pace=Pace(pace), substitutions=subs,
                          allow_substitutions=allow_substitutions, ports=tuple(ports),
                          max_body=max_body)


def run_path(run: str | os.PathLike[str]) -> Path:
    """The run file named by ``run``: a path, or a run id under ``.wiretape/runs``.
    Raises RunNotFound."""
    from wiretape.store.locate import resolve_run

    return resolve_run(os.fspath(run))


def _run_sync(what: str, coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise UsageError(f"wiretape.{what}() was called inside a running event loop: "
                     f"use `await wiretape.{what}_async(...)` there")


async def record_async(
    argv: Sequence[str],
    *,
    out: str | os.PathLike[str] | None = None,
    upstreams: Mapping[str, str] | None = None,
    port: int | None = None,
    ports: Mapping[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    snapshots: Sequence[str | os.PathLike[str]] | None = None,
    max_body: int = MAX_BODY,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    intercept: bool | Sequence[str] = False,
    upstream_ca: str | os.PathLike[str] | None = None,
    resolve: Mapping[str, str] | None = None,
    snapshot_include: Sequence[str] = (),
    snapshot_binary: bool = False,
    tools: bool = False,
    tools_except: Sequence[str] = (),
) -> Run:
    """Run ``argv`` with its provider base URLs pointed at a recording proxy
    and return the :class:`Run`.

    ``out``: the run file to write (default ``.wiretape/runs/<run-id>.wtape``;
    it must not exist). ``upstreams``: origin name to URL, e.g. ``{"openai":
    "https://api.openai.com/v1"}``; the known origins (openai, anthropic,
    gemini) are always listened for, with their variables set for the
    command. ``port``: a fixed proxy port for the first upstream (else
    openai); ``ports``: fixed ports by origin name; 0 or absent: any free
    port. ``cwd``: where the command runs (default the current directory).
    ``snapshots``: folders whose files are stored before the command starts,
    restored into a sandbox for each replay and compared afterwards
    (default: ``cwd``; ``[]``: none). ``stdout``/``stderr``: where the
    command's output goes as it arrives (default: nowhere); it is kept in
    the Run either way. ``intercept``: True (or a list of extra hosts to
    intercept) to capture the command as an HTTPS proxy with a CA made for
    this run, for clients whose origin is compiled in; ``upstream_ca``: a PEM
    file of CAs trusted for the real origins besides the usual roots;
    ``resolve``: ``{HOST: "IP:PORT"}`` addresses to reach hosts at.
    ``tools``: record the command's own HTTP and HTTPS traffic through the
    proxy too, as tool exchanges a replay serves back (implies
    ``intercept``), but for the ``tools_except`` hosts, reached directly.
    A snapshot leaves out secrets files (``.env*``, keys, credentials),
    ``.git``, run files and binary files; ``snapshot_include``: patterns
    (names or relative paths) to take anyway; ``snapshot_binary``: take
    binary files.

    Raises CommandNotFound, PortInUse, InvalidUpstream, RunFileError (``out``
    exists or cannot be written), UsageError, Interrupted (SIGINT/SIGTERM
    before the command started). A run file that could not be written in
    full (disk full, say: later requests were refused, not forwarded)
    raises RunFileWriteError once the command has ended, naming what was
    not saved; what was saved before stays readable.
    """
    from wiretape.launch.record import record as launch_record
    from wiretape.snapshot.tree import SnapshotPolicy

    if isinstance(argv, str) or not argv:
        raise UsageError("argv must be a non-empty list of strings, e.g. ['python', 'agent.py']")
    kept_out, kept_err = _Keep(stdout), _Keep(stderr)
    result = await launch_record(
        list(argv), out=Path(out) if out is not None else None,
        upstreams=list((upstreams or {}).items()), ports=port_pairs(port, ports),
        max_body=max_body, cwd=os.fspath(cwd) if cwd is not None else None,
        snapshots=None if snapshots is None else [Path(p) for p in snapshots],
        echo_stdout=kept_out, echo_stderr=kept_err,
        snapshot_policy=SnapshotPolicy(include=tuple(snapshot_include), binary=snapshot_binary),
        **_intercept_arguments(intercept, upstream_ca, resolve, tools, tools_except))
    raise_unsaved(result)
    return Run(run_id=result.run_id, path=result.path, exchanges=result.exchanges,
               body_bytes=result.body_bytes, duration_s=result.duration_s,
               exit_status=result.exit_status, stdout=kept_out.getvalue(),
               stderr=kept_err.getvalue(), origins=result.origins,
               failures=tuple(result.failures))


def raise_unsaved(result: RecordResult) -> None:
    """Raise RunFileWriteError when a recording could not save everything,
    naming what was lost."""
    from wiretape.errors import RunFileWriteError

    error = result.write_error
    if error is None:
        return
    lost = [f"{result.not_saved} exchange(s) not saved"] if result.not_saved else []
    if result.refused_unsaved:
        lost.append(f"{result.refused_unsaved} later request(s) refused without forwarding")
    if not result.end_saved:
        lost.append("the run's end not saved")
    raise RunFileWriteError(error.path, f"{error.reason}: {', '.join(lost)}; the "
                                        f"{result.exchanges} exchange(s) saved before stay "
                                        "readable")


def record(
    argv: Sequence[str],
    *,
    out: str | os.PathLike[str] | None = None,
    upstreams: Mapping[str, str] | None = None,
    port: int | None = None,
    ports: Mapping[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    snapshots: Sequence[str | os.PathLike[str]] | None = None,
    max_body: int = MAX_BODY,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
    intercept: bool | Sequence[str] = False,
    upstream_ca: str | os.PathLike[str] | None = None,
    resolve: Mapping[str, str] | None = None,
    snapshot_include: Sequence[str] = (),
    snapshot_binary: bool = False,
    tools: bool = False,
    tools_except: Sequence[str] = (),
) -> Run:
    """:func:`record_async` for code without a running event loop (it raises
    UsageError inside one). Same arguments, result and errors."""
    return _run_sync("record", record_async(
        argv, out=out, upstreams=upstreams, port=port, ports=ports, cwd=cwd, snapshots=snapshots,
        max_body=max_body, stdout=stdout, stderr=stderr, intercept=intercept,
        upstream_ca=upstream_ca, resolve=resolve, snapshot_include=snapshot_include,
        snapshot_binary=snapshot_binary, tools=tools, tools_except=tools_except))


def _intercept_arguments(
    intercept: bool | Sequence[str],
    upstream_ca: str | os.PathLike[str] | None,
    resolve: Mapping[str, str] | None,
    tools: bool = False,
    tools_except: Sequence[str] = (),
) -> InterceptionArguments:
    from wiretape.launch.intercept import interception_settings

    if isinstance(intercept, str):
        raise UsageError("intercept must be True or a list of host names, e.g. ['api.example.com']")
    if isinstance(tools_except, str):
        raise UsageError("tools_except must be a list of host names, e.g. ['db.test']")
    hosts = None if intercept is False else () if intercept is True else tuple(intercept)
    return interception_settings(hosts, upstream_ca,
                                 [f"{host}={address}" for host, address in (resolve or {}).items()],
                                 tools=tools, tools_except=tuple(tools_except))


async def replay_async(
    run: str | os.PathLike[str],
    argv: Sequence[str] | None = None,
    *,
    mode: ModeName = "strict",
    pace: PaceName = "fast",
    substitutions: Mapping[str, str] | None = None,
    allow_substitutions: bool = False,
    port: int | None = None,
    ports: Mapping[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_body: int = MAX_BODY,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> Verdict:
    """Replay ``run`` (a run file path or a run id) against ``argv`` with no
    provider, and return its :class:`~wiretape.Verdict`.

    ``argv`` None reruns the recorded command in the recorded directory;
    a command given here runs in ``cwd`` (default: the current directory).
    Files the recording snapshotted are restored into a fresh sandbox first,
    and what the command changes there is compared. ``mode``: ``strict``
    stops the command at the first mismatch, ``diagnostic`` serves the
    nearest recorded answer and goes on. ``substitutions``: ``{OLD: NEW}``,
    the recording has OLD where this run has NEW (literal text); a request
    equal only after them counts as substituted, which strict mode accepts
    only with ``allow_substitutions``. ``port``/``ports``: as in
    :func:`record_async` (default: each recorded port when free, else any).
    ``stdout``/``stderr``: where the command's output goes (default: nowhere).

    The verdict is also kept in the run's replay log (``wiretape verdict RUN``);
    the run file itself is never written.
    A failing verdict is returned, not raised: check ``verdict.passed``.
    The caller names the run, so its recorded command runs without asking,
    also when it was recorded by someone else (the command line asks).
    SIGINT or SIGTERM while the command runs gives an interrupted verdict.

    Raises RunNotFound, RunFileError, CommandNotFound, PortInUse, UsageError,
    Interrupted (SIGINT/SIGTERM before the command started).
    """
    from wiretape.launch.replay import replay as launch_replay

    if isinstance(argv, str):
        raise UsageError("argv must be a list of strings, e.g. ['python', 'agent.py']")
    settings = replay_settings(mode, pace, substitutions, allow_substitutions,
                         port_pairs(port, ports), max_body)
    verdict: Verdict = await launch_replay(
        run_path(run), list(argv) if argv else None, settings,
        echo_stdout=_Keep(stdout), echo_stderr=_Keep(stderr),
        cwd=os.fspath(cwd) if cwd is not None else None)
    return verdict


def replay(
    run: str | os.PathLike[str],
    argv: Sequence[str] | None = None,
    *,
    mode: ModeName = "strict",
    pace: PaceName = "fast",
    substitutions: Mapping[str, str] | None = None,
    allow_substitutions: bool = False,
    port: int | None = None,
    ports: Mapping[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    max_body: int = MAX_BODY,
    stdout: BinaryIO | None = None,
    stderr: BinaryIO | None = None,
) -> Verdict:
    """:func:`replay_async` for code without a running event loop (it raises
    UsageError inside one). Same arguments, result and errors."""
    return _run_sync("replay", replay_async(
        run, argv, mode=mode, pace=pace, substitutions=substitutions,
        allow_substitutions=allow_substitutions, port=port, ports=ports, cwd=cwd,
        max_body=max_body, stdout=stdout, stderr=stderr))


def fork(run: str | os.PathLike[str], *, after: int, model: str | None = None,
         upstreams: Mapping[str, str] | None = None, out: str | os.PathLike[str] | None = None,
         verify: str | None = None, argv: Sequence[str] | None = None, yes: bool = False,
         live_files: bool = False) -> ForkResult:
    """Run ``run``'s agent again on its restored files: its first ``after``
    exchanges answered from the recording (each must match), the rest by
    the live origins (``upstreams``: origin name to URL, default the
    recorded ones), their model rewritten to ``model`` when given.
    ``verify``: a shell command run in the sandbox afterwards. ``argv``:
    the command to run instead of the recorded one (in the current
    directory). ``yes``: run the recorded command of a run recorded by
    another user or on another host (else UsageError, as ``replay --yes``).
    ``live_files``: fork a run with no snapshot, its agent running on the
    live files (else UsageError).

        result = wiretape.fork("run_0123456789ab", after=1, model="gpt-4o")
        result.path, result.live, result.input_tokens, result.stopped

    The fork is a run file of its own (``result.path``). A request before
    ``after`` that does not match stops the fork: ``result.stopped`` says
    which, ``result.explanation`` how it differed. Returns the ForkResult.
    Raises TypeError (``after`` not an int, ``argv`` a string), RunNotFound,
    RunFileError, UsageError (``after`` negative or beyond the recording,
    no upstream reachable, someone else's command without ``yes``, no
    snapshot without ``live_files``), CommandNotFound, PortInUse."""
    from wiretape.launch.fork import ForkSettings, check_upto
    from wiretape.launch.fork import fork as run_fork

    check_upto(after)
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of strings, e.g. ['python', 'agent.py']")
    settings = ForkSettings(after, model=model, upstreams=tuple((upstreams or {}).items()),
                            out=Path(out) if out is not None else None, verify=verify,
                            argv=tuple(argv) if argv else None, yes=yes, live_files=live_files)
    return _run_sync("fork", run_fork(run_path(run), settings, echo_stdout=io.BytesIO(),
                                      echo_stderr=io.BytesIO()))


def compare(run: str | os.PathLike[str], *, after: int, models: Sequence[str], verify: str,
            jobs: int = 1, upstreams: Mapping[str, str] | None = None, yes: bool = False,
            verify_timeout: float | None = 600.0) -> list[ForkResult]:
    """One :func:`fork` per model of ``models`` (a list of names: a string
    is refused), each in its own sandbox on free ports (``jobs`` at a
    time), ``verify`` run in each afterwards (``result.verify_status`` 0:
    passed; ended after ``verify_timeout`` seconds, None: no limit).
    Returns the results in the order of ``models``. Raises TypeError
    (``models`` a string, ``after`` not an int), UsageError (no model, a
    model named twice, ``after`` negative, a run with no snapshot, someone
    else's command without ``yes``), and as :func:`fork`."""
    from wiretape.launch.fork import check_models, check_upto
    from wiretape.launch.fork import compare as run_compare

    check_upto(after)
    names = check_models(models)
    return _run_sync("compare", run_compare(run_path(run), after, names, verify,
                                            jobs=jobs,
                                            upstreams=tuple((upstreams or {}).items()),
                                            yes=yes, verify_timeout_s=verify_timeout))
