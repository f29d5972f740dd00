"""Running a command with a folder mounted read-only, or on a tiny tmpfs
(a full disk): a private mount namespace (``unshare -m``), so the mount is
the command's alone; even root cannot write a read-only mount (file modes
do not stop root)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

_SCRIPT = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def read_only_argv(folder: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` to run with ``folder`` read-only."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", _SCRIPT, "sh",
            str(folder), *argv]


def tmpfs_argv(folder: Path, size: str, script: str) -> list[str]:
    """The shell ``script`` run with a tmpfs of ``size`` (``256k``) mounted
    on ``folder``; ``folder`` is gone for everyone else when it ends."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size={size} tmpfs "$1" && {script}', "sh", str(folder)]


@functools.cache
def available() -> bool:
    """Whether this system lets us mount a folder read-only in a namespace."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(read_only_argv(Path(folder), ["sh", "-c", f"! touch {folder}/x"]),
                               capture_output=True, timeout=30, check=False)
        return probe.returncode == 0


@functools.cache
def why_no_private_mounts() -> str | None:
    """Why a private tmpfs cannot be mounted here (root and unshare(1) are
    needed), or None when it can."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) to mount a small tmpfs in a private mount namespace"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}"
    return None
