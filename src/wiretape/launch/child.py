"""The agent as a child process: started in its own process group, its
output passed through live and kept, stopped as a group.

Knows nothing of proxies or run files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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
        """Start ``argv``. Raises CommandNotFound."""
        exe = resolve_command(argv, cwd, env)
        try:
            process = subprocess.Popen(
                [exe, *argv[1:]], cwd=cwd, env=dict(env), stdin=None,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise CommandNotFound(argv[0], str(exc)) from exc
        child = cls(process)
        child._terminal = _hand_terminal_to(process.pid)
        out = echo_stdout if echo_stdout is not None else sys.stdout.buffer
        err = echo_stderr if echo_stderr is not None else sys.stderr.buffer
        assert process.stdout is not None and process.stderr is not None
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


@contextlib.contextmanager
def forward_signals(child: Child) -> Iterator[None]:
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
