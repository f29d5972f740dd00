"""The exception tree of wiretape.

Every error a user can cause derives from ``WiretapeError`` and carries a
one-line message that names the input and what to do. The CLI prints that
line and exits with ``exit_code``; nothing else prints a traceback.

    WiretapeError                 (exit 2: usage or input error)
    ├── RunNotFound               a run id or path that names no run file
    ├── RunFileError              a run file that cannot be read
    │   ├── SchemaTooNew          written by a newer wiretape
    │   └── RunFileWriteError     a run file that cannot be written (exit 4)
    ├── PortInUse                 a listening port that is taken
    ├── InvalidUpstream           an upstream URL that is not http(s)://host[:port][/path]
    ├── CommandNotFound           the agent command cannot be executed
    ├── Interrupted               SIGINT/SIGTERM before the agent started (exit 128 + N)
    └── UsageError                any other bad argument
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

#: Exit codes of ``wiretape replay`` (DESIGN.md); an interrupted replay
#: exits 128 + the signal's number (130 SIGINT, 143 SIGTERM).
EXIT_PASS = 0
EXIT_OUTCOME_DIFFERS = 1
EXIT_USAGE = 2
EXIT_EXCHANGES_FAIL = 3

#: The exit status of a recording whose run file could not be written in
#: full (disk full, read-only, I/O error); what was committed before stays
#: readable.
EXIT_NOT_SAVED = 4


class WiretapeError(Exception):
    """Base of all errors wiretape reports to a user; ``str(err)`` is one line."""

    exit_code = 2


class UsageError(WiretapeError):
    """A bad command-line argument or API parameter."""


class RunNotFound(WiretapeError):
    """``ref`` names no run file (neither a path nor a run id in the store);
    ``what``: what it is instead (``is a folder, not a run file``), when it
    names something."""

    def __init__(self, ref: str, store: Path, what: str | None = None) -> None:
        self.ref = ref
        self.store = store
        if what is not None:
            super().__init__(f"{ref} {what}: give a .wtape file or a run id (list runs with "
                             "`wiretape ls`)")
            return
        super().__init__(
            f"no run named {ref!r}: it is neither a run file nor a run id under {store} "
            "(list runs with `wiretape ls`)"
        )


class RunFileError(WiretapeError):
    """The run file at ``path`` is unreadable or not a wiretape run (or,
    with ``verb="write"``, cannot be written)."""

    def __init__(self, path: Path, reason: str, *, verb: str = "read") -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot {verb} run file {path}: {reason}")


class SchemaTooNew(RunFileError):
    """The run file's schema version ``found`` is newer than ``supported``."""

    def __init__(self, path: Path, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            path,
            f"it has schema version {found}, this wiretape reads up to {supported}; "
            "upgrade wiretape to open it",
        )


class RunFileWriteError(RunFileError):
    """The run file at ``path`` cannot be written: ``reason`` says why
    (:func:`write_failure_reason`)."""

    exit_code = EXIT_NOT_SAVED

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(path, reason, verb="write")


#: sqlite3 error names and errno values, and what to call them.
_WRITE_FAILURES = {
    "SQLITE_FULL": "disk full",
    "SQLITE_READONLY": "read-only",
    "SQLITE_IOERR": "I/O error",
    "SQLITE_CANTOPEN": "cannot open it",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EIO: "I/O error",
    errno.EACCES: "permission denied",
}


def write_failure_reason(exc: BaseException) -> str:
    """Why a write failed, in a few words: ``disk full``, ``disk quota
    exceeded``, ``read-only file system``, ``I/O error``, ... (an SQLite
    error is named by its code, an OSError by its errno), else the
    exception's own text (a RunFileWriteError: its reason)."""
    if isinstance(exc, RunFileWriteError):
        return exc.reason
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        for prefix, said in _WRITE_FAILURES.items():
            if isinstance(prefix, str) and name.startswith(prefix):
                return said
    number = getattr(exc, "errno", None)
    if isinstance(number, int) and number in _WRITE_FAILURES:
        return _WRITE_FAILURES[number]
    strerror = getattr(exc, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    return str(exc) or type(exc).__name__


class Interrupted(WiretapeError):
    """SIGINT or SIGTERM (``signum``) arrived before the agent started:
    nothing was run; what was taken was given back. The exit status is
    128 + ``signum``, as a shell reports a process killed by it."""

    def __init__(self, signum: int, what: str = "before the agent started") -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal_name(signum)} {what}")


def signal_name(signum: int) -> str:
    """``SIGINT`` for 2, ``SIGTERM`` for 15, else ``signal N``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class PortInUse(WiretapeError):
    """``port`` on ``host`` is already taken."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        super().__init__(
            f"port {port} on {host} is already in use: stop what listens there or pick "
            "another with --port"
        )


class InvalidUpstream(WiretapeError):
    """An upstream given as ``value`` is not a usable http(s) URL."""

    def __init__(self, value: str, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(
            f"invalid upstream {value!r}: {reason} (expected NAME=URL such as "
            "openai=https://api.openai.com/v1)"
        )


class CommandNotFound(WiretapeError):
    """The agent command ``command`` cannot be executed."""

    def __init__(self, command: str, reason: str = "not found on PATH") -> None:
        self.command = command
        self.reason = reason
        super().__init__(f"cannot run command {command!r}: {reason}")
