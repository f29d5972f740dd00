"""The exception tree of wiretape.

Every error a user can cause derives from ``WiretapeError`` and carries a
one-line message that names the input and what to do. The CLI prints that
line and exits with ``exit_code``; nothing else prints a traceback.

    WiretapeError                 (exit 2: usage or input error)
    ├── RunNotFound               a run id or path that names no run file
    ├── RunFileError              a run file that cannot be read
    │   └── SchemaTooNew          written by a newer wiretape
    ├── PortInUse                 a listening port that is taken
    ├── InvalidUpstream           an upstream URL that is not http(s)://host[:port][/path]
    ├── CommandNotFound           the agent command cannot be executed
    └── UsageError                any other bad argument
"""

from __future__ import annotations

from pathlib import Path


class WiretapeError(Exception):
    """Base of all errors wiretape reports to a user; ``str(err)`` is one line."""

    exit_code = 2


class UsageError(WiretapeError):
    """A bad command-line argument or API parameter."""


class RunNotFound(WiretapeError):
    """``ref`` names no run file (neither a path nor a run id in the store)."""

    def __init__(self, ref: str, store: Path) -> None:
        self.ref = ref
        self.store = store
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
        super().__init__(f"cannot run command {command!r}: {reason}")
