"""Where a run was recorded, and whether that is here.

A run keeps the user and host that recorded it (with its working
directory, already in its metadata). Replaying a run recorded by someone
else, or somewhere else, runs a command that person chose, against files
restored from their snapshot: the command line shows it and asks first.

This is a label, not a signature: a run file crafted to name your user and
host passes for yours. It keeps a run someone shared from being run by
accident; it does not make a hostile file safe to replay.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from wiretape.model import RunInfo

#: The run metadata (``RunInfo.extra``) keys of where a run was recorded.
USER_KEY = "recorded_user"
HOST_KEY = "recorded_host"


def user_name() -> str:
    """The name of the user this process runs as (by uid, not from the
    environment), or ``uid N`` when it has none."""
    uid = os.getuid()
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def here() -> dict[str, str]:
    """Where this process records: its user and host, for ``RunInfo.extra``."""
    return {USER_KEY: user_name(), HOST_KEY: socket.gethostname()}


@dataclass(frozen=True)
class Elsewhere:
    """A run recorded by another user or on another host (``None`` where
    the run does not say: recorded by an older wiretape, or imported)."""

    run_id: str
    user: str | None
    host: str | None
    cwd: str
    argv: tuple[str, ...]

    def who(self) -> str:
        if self.user is None and self.host is None:
            return "by an unknown user on an unknown host (the run does not say)"
        return f"by {self.user or 'an unknown user'} on {self.host or 'an unknown host'}"


def recorded_elsewhere(info: RunInfo) -> Elsewhere | None:
    """None when ``info`` was recorded by this user on this host; else who
    and where recorded it. Only the run's own command matters, so a run with
    no command is never elsewhere."""
    if not info.argv:
        return None
    mine = here()
    user, host = info.extra.get(USER_KEY), info.extra.get(HOST_KEY)
    if user == mine[USER_KEY] and host == mine[HOST_KEY]:
        return None
    return Elsewhere(info.run_id, user if isinstance(user, str) else None,
                     host if isinstance(host, str) else None, info.cwd, info.argv)
