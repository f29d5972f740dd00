"""Same paths: run a command in a private mount namespace where each
sandbox copy is bind-mounted at its original absolute path.

Used as an exec wrapper (``python -m wiretape.launch.mountns --bind
COPY=ORIGINAL ... -- CMD ARGS``): it unshares the mount namespace, makes
every mount private so nothing propagates back to the host (man 7
mount_namespaces, "Shared subtrees"), bind-mounts the copies, and execs the
command. Needs CAP_SYS_ADMIN (root) — ``available()`` says whether it works
here. Knows nothing of wiretape's runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import subprocess
import sys
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000  # man 2 unshare
MS_BIND = 0x1000  # man 2 mount
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(binds: Sequence[tuple[str, str]]) -> None:
    """Unshare the mount namespace of this process and bind each
    (source, target) pair. Raises OSError."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    for source, target in binds:
        _check(libc.mount(source.encode(), target.encode(), None, MS_BIND | MS_REC, None),
               f"bind-mounting {source} at {target}")


def wrap(binds: Sequence[tuple[str, str]], argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` with ``binds`` in place."""
    out = [sys.executable, "-m", "wiretape.launch.mountns"]
    for source, target in binds:
        out += ["--bind", f"{source}={target}"]
    return [*out, "--", *argv]


@functools.cache
def available() -> tuple[bool, str]:
    """(whether same-path sandboxes work here, why not)."""
    if not sys.platform.startswith("linux"):
        return False, "mount namespaces are Linux only"
    try:
        done = subprocess.run(wrap([], ["true"]), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode != 0:
        return False, (done.stderr.strip().splitlines() or ["unshare failed"])[-1]
    return True, ""


def main(args: Sequence[str]) -> int:
    binds, rest = [], list(args)
    while rest and rest[0] == "--bind":
        source, _, target = rest[1].partition("=")
        binds.append((source, target))
        rest = rest[2:]
    if not rest or rest[0] != "--" or len(rest) < 2:
        print("usage: python -m wiretape.launch.mountns [--bind SRC=DST]... -- CMD ARGS",
              file=sys.stderr)
        return 2
    try:
        enter(binds)
        # The working directory was entered before the mounts: enter it again
        # by name so it resolves through them, into the sandbox copy.
        os.chdir(os.environ.get("PWD") or os.getcwd())
    except OSError as exc:
        print(f"wiretape: cannot show the sandbox at its original paths: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(rest[1], rest[1:])
    except OSError as exc:
        print(f"wiretape: cannot run {rest[1]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
