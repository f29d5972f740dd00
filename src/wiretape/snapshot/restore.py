"""Restoring snapshot entries into a sandbox directory, safely; and what a
snapshot read from a run file may hold at all.

A run file is untrusted input: an entry's path must be relative, without
``..`` components, within the system's limits (a name of at most 255
bytes, a path of at most 4095, at most ``MAX_DEPTH`` folders deep), and
must not lead through a symbolic link; links are created last, as links,
and never written through, and a link must resolve inside the restored
tree, following the links already in it (else the agent could write
through it to a file of the user's). A snapshot's root (where the copy is
shown in a same-paths replay) must be an absolute, normalised path other
than ``/``, given once; :func:`system_folder` says where a same-paths
replay must not show one. Modes keep their
permission bits only (no setuid, setgid or sticky bit). Nothing is written
outside ``into``. Knows nothing of run files.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from wiretape.errors import RunFileError, WiretapeError
from wiretape.snapshot.tree import Entry

#: What to do about a run file a check refuses.
NEXT_STEP = "record the run again, or ask its author for the original"

#: The longest name of one file or folder, and the longest path (bytes), a
#: Linux file system takes (NAME_MAX, PATH_MAX less its NUL).
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4095
#: The deepest entry a snapshot may hold (folders below its root).
MAX_DEPTH = 256
#: Links followed while resolving one link, as the kernel does (MAXSYMLINKS).
MAX_LINK_HOPS = 40

#: Folders of the system (and everything under them) a snapshot root may
#: not be: a same-paths replay shows the snapshot in their place, so the
#: run's files would stand in for the system's programs and settings.
SYSTEM_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                  "/proc", "/run", "/sbin", "/sys", "/usr", "/var")
#: Folders under a system folder that may hold snapshots (temporary files).
SYSTEM_EXCEPTIONS = ("/var/tmp",)


def _refused(source: Path, reason: str) -> RunFileError:
    return RunFileError(source, f"{reason} ({NEXT_STEP})")


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def check_root(value: str, source: Path, what: str = "snapshot root") -> Path:
    """A path the run file names as a tree's original place: absolute and
    normalised (no ``..``, ``.`` or doubled ``/``), so that where it is
    restored is decided by the sandbox alone, and not ``/``. Raises
    RunFileError naming ``source``."""
    if (not value.startswith("/") or "\x00" in value
            or posixpath.normpath(value) != value):
        raise _refused(source, f"it names an unsafe {what} {value!r} (not an absolute, "
                               "normalised path): it is not a run wiretape wrote")
    if value == "/":
        raise _refused(source, f"its {what} is the root folder '/': a run wiretape wrote "
                               "never snapshots the whole system")
    if len(os.fsencode(value)) > MAX_PATH_BYTES:
        raise _refused(source, f"its {what} {value[:60]!r}... is longer than "
                               f"{MAX_PATH_BYTES} bytes")
    return Path(value)


def system_folder(root: str) -> bool:
    """Whether ``root`` is a system folder or lies under one (``/var/tmp``
    excepted): a same-paths replay must not show a snapshot there."""
    return (any(_under(root, f) for f in SYSTEM_FOLDERS)
            and not any(_under(root, f) for f in SYSTEM_EXCEPTIONS))


def check_roots(roots: Sequence[str], source: Path) -> None:
    """Every root checked (:func:`check_root`), and none given twice."""
    seen: set[str] = set()
    for root in roots:
        check_root(root, source)
        if root in seen:
            raise _refused(source, f"it names the snapshot root {root!r} twice: a run "
                                   "wiretape wrote takes each folder once")
        seen.add(root)


def check_path(rel: str, source: Path, root: str = "",
               what: str = "it holds a snapshot entry") -> tuple[str, ...]:
    """The components of an entry's path: relative, without ``..``, within
    the system's limits (also below ``root``). ``what`` begins a message
    about it. Raises RunFileError."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\x00" in rel:
        raise _refused(source, f"{what} with an unsafe path {rel[:200]!r}")
    if len(pure.parts) > MAX_DEPTH:
        raise _refused(source, f"{what} {len(pure.parts)} folders deep ({rel[:60]!r}...), "
                               f"deeper than the {MAX_DEPTH} wiretape restores")
    if any(len(os.fsencode(part)) > MAX_NAME_BYTES for part in pure.parts):
        raise _refused(source, f"{what} with a name longer than {MAX_NAME_BYTES} bytes "
                               f"({rel[:60]!r}...), which no file system takes")
    if len(os.fsencode(root)) + 1 + len(os.fsencode(rel)) > MAX_PATH_BYTES:
        raise _refused(source, f"{what} whose path is longer than {MAX_PATH_BYTES} bytes "
                               f"({rel[:60]!r}...)")
    return pure.parts


def _link_lands_inside(rel: str, link: str, links: dict[str, str]) -> bool:
    """Whether the link at ``rel`` pointing to ``link`` resolves inside its
    tree, following the other links of the tree (``links``: path to
    target) as the kernel would; a chain longer than the kernel follows
    ends nowhere, so it stays inside."""
    if not link or link.startswith("/") or "\x00" in link:
        return False
    here = rel.split("/")[:-1]
    todo = list(reversed(link.split("/")))
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                return False
            here.pop()
            continue
        here.append(part)
        target = links.get("/".join(here))
        if target is None:
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            return True  # ELOOP: the kernel resolves it to nothing
        if not target or target.startswith("/") or "\x00" in target:
            return False
        here.pop()
        todo.extend(reversed(target.split("/")))
    return True


def check_entries(entries: Iterable[Entry], source: Path, root: str = "") -> None:
    """Every entry of one snapshot (of ``root``, named in messages): a safe
    path (:func:`check_path`), given once, and every link resolving inside
    the tree, also through the other links. Raises RunFileError naming
    ``source``."""
    what = f"its snapshot of {root} holds an entry" if root else "it holds a snapshot entry"
    links: dict[str, str] = {}
    seen: set[str] = set()
    for entry in entries:
        parts = check_path(entry.path, source, root, what)
        key = "/".join(parts)
        if key in seen:
            raise _refused(source, f"{what} given twice ({entry.path[:200]!r})")
        seen.add(key)
        if entry.kind == "symlink":
            links[key] = entry.link
    for path, link in links.items():
        if not _link_lands_inside(path, link, links):
            raise _outside(path, link, source, root)


def _outside(rel: str, link: str, source: Path, root: str = "") -> RunFileError:
    where = f" of its snapshot of {root}" if root else ""
    return _refused(source, f"snapshot entry {rel[:200]!r}{where} is a link that leads outside "
                            f"its tree ({link[:200]!r})")


def _safe_target(into: Path, rel: str, source: Path) -> Path:
    pure = PurePosixPath(*check_path(rel, source))
    target = into.joinpath(*pure.parts)
    parent = target.parent
    # No component between the sandbox root and the target may be a link.
    probe = into
    for part in pure.parts[:-1]:
        probe = probe / part
        if probe.is_symlink():
            raise _refused(source, f"snapshot entry {rel!r} leads through a symbolic link")
    if not str(parent.resolve()).startswith(str(into.resolve())):
        raise _refused(source, f"snapshot entry {rel!r} would be restored outside the sandbox")
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


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def restore(entries: Iterable[Entry], into: Path, *, source: Path) -> int:
    """Write ``entries`` under ``into`` (created); return the files written.

    Raises RunFileError (naming ``source``) for an unsafe entry, WiretapeError
    when the sandbox cannot be written (a full disk).
    """
    listed = list(entries)
    check_entries(listed, source)
    into.mkdir(parents=True, exist_ok=True)
    ordered = sorted(listed, key=lambda e: (e.kind == "symlink", e.path.count("/"), e.path))
    files = 0
    made: list[Path] = []
    for entry in ordered:
        target = _safe_target(into, entry.path, source)
        try:
            files += _restore_one(entry, target, source)
        except OSError as exc:
            if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                raise _refused(source, f"its snapshot entry {entry.path[:200]!r} cannot be "
                                       f"restored: {exc.strerror}") from None
            raise WiretapeError(f"cannot restore the snapshot of run file {source} into "
                                f"{into}: {exc.strerror or exc}") from None
        if entry.kind == "symlink":
            made.append(target)
    # However the links combine, each must land inside the tree.
    top = os.path.realpath(into)
    for link in made:
        if not _inside(os.path.realpath(link), top):
            rel = link.relative_to(into).as_posix()
            raise _outside(rel, os.readlink(link), source)
    return files


def _restore_one(entry: Entry, target: Path, source: Path) -> int:
    if entry.kind == "dir":
        target.mkdir(parents=True, exist_ok=True)
        os.chmod(target, (entry.mode & PERMISSION_BITS) | 0o700)
    elif entry.kind == "file":
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(entry.data)
        os.chmod(target, entry.mode & PERMISSION_BITS)
        return 1
    elif entry.kind == "symlink":
        target.parent.mkdir(parents=True, exist_ok=True)
        if not _link_stays_inside(entry.path, entry.link):
            raise _outside(entry.path, entry.link, source)
        if target.exists() or target.is_symlink():
            raise _refused(source, f"snapshot entry {entry.path!r} is given twice")
        os.symlink(entry.link, target)
    return 0
