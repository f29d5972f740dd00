"""Restoring snapshot entries into a sandbox directory, safely.

A run file is untrusted input: an entry's path must be relative, without
``..`` components, and must not lead through a symbolic link; links are
created last, as links, and never written through, and a link must point
inside the restored tree (else the agent could write through it to a file
of the user's). Modes keep their permission bits only (no setuid, setgid or
sticky bit). Nothing is written outside ``into``. Knows nothing of run
files.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from wiretape.errors import RunFileError
from wiretape.snapshot.tree import Entry


def _safe_target(into: Path, rel: str, source: Path) -> Path:
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\x00" in rel:
        raise RunFileError(source, f"it holds a snapshot entry with an unsafe path {rel!r}")
    target = into.joinpath(*pure.parts)
    parent = target.parent
    # No component between the sandbox root and the target may be a link.
    probe = into
    for part in pure.parts[:-1]:
        probe = probe / part
        if probe.is_symlink():
            raise RunFileError(source, f"snapshot entry {rel!r} leads through a symbolic link")
    if not str(parent.resolve()).startswith(str(into.resolve())):
        raise RunFileError(source, f"snapshot entry {rel!r} would be restored outside the sandbox")
    return target


#: The bits of a stored mode that are applied: permissions only.
PERMISSION_BITS = 0o777


def _link_stays_inside(rel: str, link: str) -> bool:
    """Whether the link at ``rel`` pointing to ``link`` resolves (lexically)
    inside the tree it is restored into."""
    if not link or link.startswith("/") or "\x00" in link:
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
    return resolved != ".." and not resolved.startswith("../")


def restore(entries: Iterable[Entry], into: Path, *, source: Path) -> int:
    """Write ``entries`` under ``into`` (created); return the files written.

    Raises RunFileError (naming ``source``) for an unsafe entry.
    """
    into.mkdir(parents=True, exist_ok=True)
    ordered = sorted(entries, key=lambda e: (e.kind == "symlink", e.path.count("/"), e.path))
    files = 0
    for entry in ordered:
        target = _safe_target(into, entry.path, source)
        if entry.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            os.chmod(target, (entry.mode & PERMISSION_BITS) | 0o700)
        elif entry.kind == "file":
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(entry.data)
            os.chmod(target, entry.mode & PERMISSION_BITS)
            files += 1
        elif entry.kind == "symlink":
            target.parent.mkdir(parents=True, exist_ok=True)
            if not _link_stays_inside(entry.path, entry.link):
                raise RunFileError(source, f"snapshot entry {entry.path!r} is a link that leads "
                                           f"outside its tree ({entry.link!r})")
            if target.exists() or target.is_symlink():
                raise RunFileError(source, f"snapshot entry {entry.path!r} is given twice")
            os.symlink(entry.link, target)
    return files
