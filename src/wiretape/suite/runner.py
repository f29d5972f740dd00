"""Replaying many runs at once: each as its own ``wiretape replay`` process,
on its own copy of the run file (two replays share no state), at most
``jobs`` at a time, each stopped after a timeout. The verdict is read back
from the replay log of that copy, so a replay that had to be killed still
has one.

Owns scheduling the processes and collecting their verdicts. Must not print;
how a replay works is the launch layer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wiretape.errors import Interrupted, WiretapeError
from wiretape.inspect.verdicts import verdict_of
from wiretape.launch.trust import Elsewhere, recorded_elsewhere
from wiretape.playback.verdict import Verdict
from wiretape.store.runfile import RunFile
from wiretape.suite import DEFAULT_TIMEOUT_S
from wiretape.suite.schedule import pick

#: Seconds between SIGTERM and SIGKILL when a replay is stopped.
STOP_GRACE_S = 10.0
_KEEP_STDERR = 8192  # bytes of a replay's stderr kept for its error message


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"  # no verdict: the run could not be replayed at all
    SKIP = "skip"  # recorded through a proxy only: no command to run again


@dataclass(frozen=True)
class CheckResult:
    """One run's result: ``status``, its ``verdict`` (None for an error),
    ``error`` (one line, for an error or a timeout), ``duration_s`` in
    seconds."""

    path: Path
    status: Status
    verdict: Verdict | None = None
    error: str | None = None
    duration_s: float = 0.0
    run_id: str | None = None


@dataclass
class _Job:
    index: int
    path: Path
    run_id: str
    origins: tuple[str, ...]
    ports: frozenset[int] = field(default_factory=frozenset)
    #: who and where recorded it, when that is not this user here
    elsewhere: Elsewhere | None = None


def _unreadable(path: Path, exc: Exception) -> str:
    """One line for a run file that cannot be read, whatever the reason."""
    if isinstance(exc, WiretapeError):
        return str(exc)
    return f"cannot read run file {path}: {type(exc).__name__}: {exc}; the file is damaged"


def _load(index: int, path: Path, free_ports: bool) -> _Job | CheckResult:
    try:
        with RunFile.open(path) as run:
            info = run.info()
            ports = frozenset() if free_ports else frozenset(o.port for o in info.origins)
            origins = tuple(o.name for o in info.origins)
            elsewhere = recorded_elsewhere(info)
    except Exception as exc:  # a damaged or hostile file: its own error, the others go on
        return CheckResult(path, Status.ERROR, error=_unreadable(path, exc))
    if not info.argv:
        return CheckResult(path, Status.SKIP, run_id=info.run_id,
                           error="recorded through a proxy only (serve, or the Python API's "
                                 "recording()), so it has no command to run: its own test "
                                 "replays it")
    return _Job(index, path, info.run_id, origins, ports, elsewhere)


async def check_runs(
    paths: Sequence[Path],
    *,
    jobs: int,
    free_ports: bool = False,
    diagnostic: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_result: Callable[[CheckResult], None] | None = None,
    approve: Callable[[Sequence[Elsewhere]], bool] | None = None,
) -> list[CheckResult]:
    """Replay every run in ``paths`` (at most ``jobs`` at once) and return
    their results in the same order. ``free_ports``: every origin on a port
    of the system's choosing; else each on its recorded port when free, and
    runs sharing a recorded port one after another. ``diagnostic``: go on
    past mismatches, so every divergence is reported. ``on_result`` is
    called as each run finishes.

    Runs recorded by another user or on another host run their recorded
    command only when ``approve`` (given them all at once) says yes; else
    each is an error saying so. A run file that cannot be read is an error
    of its own; the others are replayed."""
    results: list[CheckResult | None] = [None] * len(paths)
    waiting: list[_Job] = []

    def finished(result: CheckResult, index: int) -> None:
        results[index] = result
        if on_result is not None:
            on_result(result)

    for index, path in enumerate(paths):
        loaded = _load(index, path, free_ports)
        if isinstance(loaded, CheckResult):
            finished(loaded, index)
        else:
            waiting.append(loaded)
    strangers = [job for job in waiting if job.elsewhere is not None]
    if strangers and not (approve is not None and approve([j.elsewhere for j in strangers
                                                           if j.elsewhere is not None])):
        for job in strangers:
            waiting.remove(job)
            assert job.elsewhere is not None
            finished(CheckResult(job.path, Status.ERROR, run_id=job.run_id,
                                 error=f"recorded {job.elsewhere.who()}, not here: its "
                                       "command is not run without --yes"), job.index)
    running: dict[asyncio.Task[CheckResult], _Job] = {}
    busy: set[int] = set()
    # SIGTERM stops the check as Ctrl-C does: its replays are stopped (each
    # passes the signal on to its agent's group) and its copies removed.
    stopped = _stop_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="wiretape-check-") as scratch:
        try:
            while waiting or running:
                while len(running) < max(1, jobs):
                    chosen = pick([job.ports for job in waiting], busy)
                    if chosen is None:
                        break
                    job = waiting.pop(chosen)
                    busy |= job.ports
                    task = asyncio.create_task(
                        _replay_one(job, Path(scratch), free_ports, diagnostic, timeout_s),
                        name=f"wiretape-check-{job.index}")
                    running[task] = job
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    job = running.pop(task)
                    busy -= job.ports
                    finished(task.result(), job.index)
        except asyncio.CancelledError:
            if stopped.signum is None:
                raise
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
            stopped.close()
    if stopped.signum is not None:
        raise Interrupted(stopped.signum, "while checking: its replays were stopped")
    return [r for r in results if r is not None]


@dataclass
class _Stopped:
    """A signal handler that cancels the running task (the check), and the
    signal it met."""

    loop: asyncio.AbstractEventLoop | None = None
    signum: int | None = None

    def close(self) -> None:
        if self.loop is not None:
            with contextlib.suppress(ValueError, RuntimeError):
                self.loop.remove_signal_handler(signal.SIGTERM)
            self.loop = None


def _stop_on_sigterm() -> _Stopped:
    """SIGTERM cancels the current task, once, and is remembered (where the
    loop can take a handler: the main thread)."""
    stopped = _Stopped()
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is None:
        return stopped

    def on_signal() -> None:
        if stopped.signum is None:
            stopped.signum = signal.SIGTERM
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_signal)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
        return stopped
    stopped.loop = loop
    return stopped


def replay_command(run: Path, origins: Sequence[str], *, free_ports: bool,
                   diagnostic: bool) -> list[str]:
    """The ``wiretape replay`` command line for one run (its recorded command
    in its recorded directory; ``check`` has already decided to run it)."""
    argv = [sys.executable, "-m", "wiretape", "replay", "--yes", str(run)]
    if diagnostic:
        argv.append("--diagnostic")
    if free_ports:
        for name in origins:
            argv += ["--port", f"{name}=0"]
    return argv


async def _replay_one(job: _Job, scratch: Path, free_ports: bool, diagnostic: bool,
                      timeout_s: float) -> CheckResult:
    t0 = time.monotonic()
    try:
        return await _replay_copy(job, scratch, free_ports, diagnostic, timeout_s, t0)
    except OSError as exc:  # the copy or the process could not be made
        return CheckResult(job.path, Status.ERROR, error=f"cannot replay {job.path}: "
                           f"{exc.strerror or exc}", duration_s=time.monotonic() - t0,
                           run_id=job.run_id)


async def _replay_copy(job: _Job, scratch: Path, free_ports: bool, diagnostic: bool,
                       timeout_s: float, t0: float) -> CheckResult:
    folder = scratch / f"{job.index:05d}"
    folder.mkdir()
    copy = folder / job.path.name
    shutil.copyfile(job.path, copy)
    process = await asyncio.create_subprocess_exec(
        *replay_command(copy, job.origins, free_ports=free_ports, diagnostic=diagnostic),
        cwd=folder, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    assert process.stderr is not None
    stderr = bytearray()
    reading = asyncio.create_task(_tail(process.stderr, stderr),
                                  name=f"wiretape-check-stderr-{job.index}")
    timed_out = False
    try:
        try:
            await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            await _stop(process)
        await reading
    except asyncio.CancelledError:
        await _stop(process)
        reading.cancel()
        raise
    duration = time.monotonic() - t0
    verdict, unreadable = _verdict(copy)
    note = f"stopped after the {timeout_s:g} s timeout" if timed_out else None
    if verdict is None:
        # The replay names the copy it was given: say it of the user's file.
        said = note or unreadable or _error_line(bytes(stderr))
        return CheckResult(job.path, Status.ERROR, error=said.replace(str(copy), str(job.path)),
                           duration_s=duration, run_id=job.run_id)
    status = Status.PASS if verdict.passed and not timed_out else Status.FAIL
    return CheckResult(job.path, status, verdict, note, duration, job.run_id)


async def _tail(stream: asyncio.StreamReader, keep: bytearray) -> None:
    while chunk := await stream.read(65536):
        keep += chunk
        del keep[:-_KEEP_STDERR]


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (wiretape passes it on to the agent's group and still writes
    the verdict), then SIGKILL after STOP_GRACE_S."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def _verdict(copy: Path) -> tuple[Verdict | None, str | None]:
    """The verdict of the replay of ``copy``, from the run's replay log (only
    a replay of that very copy counts), or None and, when the copy cannot be
    read, why."""
    try:
        with RunFile.open(copy) as run:
            return verdict_of(run, source=copy), None
    except Exception as exc:  # a damaged or hostile file: its own error
        return None, _unreadable(copy, exc)


def _error_line(stderr: bytes) -> str:
    """wiretape's own one-line error, else the last line the replay wrote."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()
             if line.strip()]
    for line in reversed(lines):
        if line.startswith("wiretape: error: "):
            return line.removeprefix("wiretape: error: ")
    return lines[-1] if lines else "the replay ended without a verdict"


def default_jobs() -> int:
    """One replay per CPU."""
    return os.cpu_count() or 1
