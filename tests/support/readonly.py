"""Running a command with a folder mounted read-only: a private mount
namespace (``unshare -m``) where the folder is bound onto itself read-only,
so even root cannot write there (file modes do not stop root)."""

from __future__ import annotations

import functools
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


@functools.cache
def available() -> bool:
    """Whether this system lets us mount a folder read-only in a namespace."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(read_only_argv(Path(folder), ["sh", "-c", f"! touch {folder}/x"]),
                               capture_output=True, timeout=30, check=False)
        return probe.returncode == 0
