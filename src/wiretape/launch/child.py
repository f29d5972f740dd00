"""The agent as a child process: started in its own process group, its
output passed through live and kept, stopped as a group.

Knows nothing of proxies or run files.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from wiretape.errors import CommandNotFound

STOP_GRACE_S = 5.0
#: After the agent exits, how long (s) its output pipes may stay open (held by
#: a background process it left behind) before wiretape stops reading them.
OUTPUT_DRAIN_S = 1.0


def resolve_command(
    argv: Sequence[str], cwd: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The executable for ``argv[0]``. Raises CommandNotFound."""
    if not argv:
        raise CommandNotFound("", "no command given after --")
    exe = argv[0]
    if os.sep in exe:
        path = exe if os.path.isabs(exe) or cwd is None else os.path.join(cwd, exe)
        if not os.path.isfile(path):
            raise CommandNotFound(exe, "no such file")
        if not os.access(path, os.X_OK):
            raise CommandNotFound(exe, "it is not executable")
        return path
    found = shutil.which(exe, path=(env or os.environ).get("PATH"))
    if found is None:
        raise CommandNotFound(exe)
    return found


@dataclass
class ChildResult:
    exit_status: int
    stdout: bytes
    stderr: bytes
    stopped: str | None = None


@dataclass
class Child:
    """A running agent process.

    Its output is read by two threads (so a pipe held open by something the
    agent left running never delays wiretape), and its exit is awaited with
    ``Popen.wait`` in a worker thread.
    """

    process: subprocess.Popen[bytes]
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    stopped: str | None = None
    _pumps: list[threading.Thread] = field(default_factory=list)
    _terminal: int | None = None  # the terminal given to the agent's group, to take back
    _echoes: tuple[BinaryIO, ...] = ()  # where its stdout and stderr are echoed

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str],
        echo_stdout: BinaryIO | None = None,
        echo_stderr: BinaryIO | None = None,
    ) -> Child:
        """Start ``argv``. Raises CommandNotFound for any reason the system
        gives for not starting it."""
        exe = resolve_command(argv, cwd, env)
        try:
            process = subprocess.Popen(
                [exe, *argv[1:]], cwd=cwd, env=dict(env), stdin=None,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0,
            )
        except OSError as exc:
            raise CommandNotFound(argv[0], _why_not_started(exc)) from exc
        child = cls(process)
        child._terminal = _hand_terminal_to(process.pid)
        out = echo_stdout if echo_stdout is not None else sys.stdout.buffer
        err = echo_stderr if echo_stderr is not None else sys.stderr.buffer
        assert process.stdout is not None and process.stderr is not None
        child._echoes = (out, err)
        for name, stream, echo, keep in (("stdout", process.stdout, out, child.stdout),
                                         ("stderr", process.stderr, err, child.stderr)):
            thread = threading.Thread(target=_pump, args=(stream, echo, keep),
                                      name=f"wiretape-child-{name}", daemon=True)
            thread.start()
            child._pumps.append(thread)
        return child

    async def wait(self) -> ChildResult:
        """Wait for the agent to exit. Output still arriving from processes it
        left running is read for ``OUTPUT_DRAIN_S`` more, then no longer."""
        status = await asyncio.to_thread(self.process.wait)
        if self._terminal is not None:
            _take_terminal_back(self._terminal)
            self._terminal = None
        deadline = time.monotonic() + OUTPUT_DRAIN_S
        for thread in self._pumps:
            await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
        # A pipe whose reader is done is closed now (else a ResourceWarning at
        # collection); one still held open by a leftover process is left be.
        for thread, pipe in zip(self._pumps, (self.process.stdout, self.process.stderr),
                                strict=False):
            if pipe is not None and not thread.is_alive():
                pipe.close()
        # An agent stopped mid-line on stderr: wiretape's own lines there (the
        # verdict) start on a line of their own. Its stdout is echoed byte for
        # byte (it may be piped), and the kept output is unchanged.
        done = not any(thread.is_alive() for thread in self._pumps)
        if done and self.stderr and not self.stderr.endswith(b"\n") and self._echoes:
            with contextlib.suppress(OSError, ValueError):
                self._echoes[-1].write(b"\n")
                self._echoes[-1].flush()
        exit_status = status if status >= 0 else 128 - status  # killed by signal N -> 128 + N
        return ChildResult(exit_status, bytes(self.stdout), bytes(self.stderr), self.stopped)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    async def stop(self, reason: str, grace: float = STOP_GRACE_S) -> None:
        """SIGTERM the child's process group, then SIGKILL after ``grace`` s."""
        if self.stopped is None:
            self.stopped = reason
        # The whole group, even when the agent itself has already exited:
        # what it started may still be running.
        self.signal_group(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.process.wait, grace)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)

    async def __aenter__(self) -> Child:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leaving its block before :meth:`wait` has seen the agent exit (an
        error, a cancellation): stop it as a group and reap it, so no agent
        outlives the wiretape session that started it."""
        if self.process.returncode is None:
            await self.stop("wiretape stopped before the agent exited")
            await self.wait()


def _why_not_started(exc: OSError) -> str:
    """The system's reason for not starting a program, in words a user can act on."""
    said = exc.strerror or str(exc)
    if exc.errno == errno.ENOEXEC:
        return (f"{said}: the system cannot start it (a script needs a first line such as "
                "#!/bin/sh naming its interpreter)")
    return said


class Interrupts:
    """SIGINT and SIGTERM for the length of a session (``with`` inside the
    session's task): each is noted in ``signum`` (the first one); while an
    agent runs (:meth:`forward_to`) it goes to the agent's process group,
    which decides how to end; otherwise the session's task is cancelled,
    so that it gives back what it took. Outside the main thread, or where
    the loop cannot take signal handlers, nothing is installed."""

    def __init__(self) -> None:
        self.signum: int | None = None
        #: True once a signal cancelled the session's task
        self.cancelled = False
        self._child: Child | None = None
        self._task: asyncio.Task[object] | None = None
        #: each signal handled, with the handler it had before
        self._installed: list[tuple[int, object]] = []

    def __enter__(self) -> Interrupts:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                before = signal.getsignal(sig)
                loop.add_signal_handler(sig, self._arrived, sig)
                self._installed.append((sig, before))
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop = asyncio.get_running_loop()
        for sig, before in self._installed:
            loop.remove_signal_handler(sig)
            # The handler it had before (asyncio.run's own for SIGINT, say).
            if before is not None and (callable(before) or isinstance(before, int)):
                with contextlib.suppress(ValueError, TypeError, OSError):
                    signal.signal(sig, before)
        self._installed.clear()

    def forward_to(self, child: Child | None) -> None:
        """Signals go to ``child``'s group from now on (None: no longer)."""
        self._child = child

    def _arrived(self, sig: int) -> None:
        if self.signum is None:
            self.signum = sig
        if self._child is not None:
            self._child.signal_group(sig)
        elif self._task is not None and not self._task.done():
            self.cancelled = True
            self._task.cancel()

    def uncancel(self) -> None:
        """Take back the cancellation a signal made, once it has been
        handled (the session ends in a value or an Interrupted error)."""
        if self.cancelled and self._task is not None:
            self._task.uncancel()


async def run_child(stack: contextlib.AsyncExitStack, argv: Sequence[str], *, cwd: str,
                    env: Mapping[str, str], echo_stdout: BinaryIO | None,
                    echo_stderr: BinaryIO | None, interrupts: Interrupts | None,
                    started: Callable[[Child], None] | None = None) -> ChildResult:
    """Start the agent, enter it into ``stack`` (leaving early stops and
    reaps its group), hand it SIGINT/SIGTERM while it runs, and wait for it.
    ``started`` is told the child once it runs. Raises CommandNotFound."""
    child = await Child.start(argv, cwd=cwd, env=env, echo_stdout=echo_stdout,
                              echo_stderr=echo_stderr)
    await stack.enter_async_context(child)
    if started is not None:
        started(child)
    if interrupts is not None:
        interrupts.forward_to(child)
        stack.callback(interrupts.forward_to, None)
    result = await child.wait()
    if interrupts is not None:
        interrupts.forward_to(None)
    return result


def _hand_terminal_to(pgid: int) -> int | None:
    """Make the agent's process group the terminal's foreground group, so
    an interactive agent can read its terminal (a background group reading
    it would be stopped by SIGTTIN). Returns the terminal's fd, or None."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return None
        with _ignoring(signal.SIGTTOU):
            os.tcsetpgrp(fd, pgid)
        return fd
    except (OSError, ValueError, AttributeError):
        return None


def _take_terminal_back(fd: int) -> None:
    with contextlib.suppress(OSError), _ignoring(signal.SIGTTOU):
        os.tcsetpgrp(fd, os.getpgrp())


@contextlib.contextmanager
def _ignoring(sig: int) -> Iterator[None]:
    """While inside, ``sig`` is ignored (tcsetpgrp from a background group
    sends SIGTTOU, man 3 tcsetpgrp)."""
    old = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(sig, old)


def _pump(stream: BinaryIO, echo: BinaryIO, keep: bytearray) -> None:
    while True:
        data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not data:
            return
        keep += data
        with contextlib.suppress(OSError, ValueError):
            echo.write(data)
            echo.flush()


def own_output_files() -> frozenset[Path]:
    """The regular files this process's stdout and stderr are written to
    (a shell's ``> log.txt``), read from ``/proc/self/fd`` (proc(5));
    empty where that is not available. These are wiretape's own writes:
    a snapshot leaves them out and an outcome never counts them."""
    found = set()
    for fd in (1, 2):
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and not target.endswith(" (deleted)"):
            found.add(Path(target))
    return frozenset(found)
