"""Reading a directory tree into entries, and comparing a tree with them.

An entry is one file, directory or symbolic link under a root, named by its
POSIX path relative to the root. Symbolic links are recorded as links (their
target text), never followed. Other file types (sockets, FIFOs, devices)
are skipped. Knows nothing of run files or sandboxes.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias, TypedDict

from wiretape.errors import UsageError

#: Folders never snapshotted: tools regenerate them and they are large.
DEFAULT_EXCLUDES: frozenset[str] = frozenset(
    {".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", ".wiretape"}
)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_DIFF_MAX_CHARS = 4000


@dataclass(frozen=True)
class Entry:
    """``path``: relative POSIX path; ``kind``: file, dir or symlink; ``mode``:
    permission bits; ``data``: file bytes (b"" otherwise); ``link``: a
    symlink's target."""

    path: str
    kind: str
    mode: int
    data: bytes = b""
    link: str = ""

    @property
    def digest(self) -> str:
        payload = self.data if self.kind == "file" else self.link.encode()
        return hashlib.sha256(payload).hexdigest()


def walk(
    root: Path,
    *,
    exclude: frozenset[Path] = frozenset(),
    skip_names: frozenset[str] = DEFAULT_EXCLUDES,
    max_bytes: int | None = None,
) -> Iterator[Entry]:
    """Every entry under ``root`` in a stable order. Raises UsageError when
    the files together exceed ``max_bytes``."""
    total = 0
    excluded = {p.resolve() for p in exclude}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        keep = []
        for name in sorted(dirnames):
            full = base / name
            if name in skip_names or full.resolve() in excluded:
                continue
            if full.is_symlink():
                filenames.append(name)
                continue
            keep.append(name)
        dirnames[:] = keep
        rel_dir = base.relative_to(root)
        if rel_dir != Path("."):
            yield Entry(rel_dir.as_posix(), "dir", stat.S_IMODE(base.lstat().st_mode))
        for name in sorted(filenames):
            full = base / name
            if full.resolve() in excluded:
                continue
            rel = (rel_dir / name).as_posix()
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                yield Entry(rel, "symlink", 0o777, link=os.readlink(full))
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if max_bytes is not None and total > max_bytes:
                    raise UsageError(
                        f"the snapshot of {root} is over {max_bytes} bytes (--snapshot-max): "
                        "snapshot fewer paths with --snapshot PATH, or raise the limit, or "
                        "use --no-snapshot")
                try:
                    data = full.read_bytes()
                except OSError as exc:
                    raise UsageError(
                        f"cannot read {full} for the snapshot ({exc.strerror}): snapshot other "
                        "paths with --snapshot PATH, or use --no-snapshot") from exc
                yield Entry(rel, "file", stat.S_IMODE(info.st_mode), data=data)


ChangeKind: TypeAlias = Literal["added", "modified", "deleted"]


class ChangeJSON(TypedDict):
    """A Change as the run file keeps the recorded outcome (and as a
    replay's changes are compared with it)."""

    path: str
    change: ChangeKind
    before_hash: str | None
    after_hash: str | None
    before_size: int | None
    after_size: int | None
    binary: bool
    diff: str


@dataclass(frozen=True)
class Change:
    """One difference between a snapshot and a tree after the agent ran."""

    path: str
    change: ChangeKind
    before_hash: str | None
    after_hash: str | None
    before_size: int | None
    after_size: int | None
    binary: bool
    diff: str

    def to_json(self) -> ChangeJSON:
        return {"path": self.path, "change": self.change, "before_hash": self.before_hash,
                "after_hash": self.after_hash, "before_size": self.before_size,
                "after_size": self.after_size, "binary": self.binary, "diff": self.diff}


def is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes: shown and compared as text."""
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _text_diff(path: str, before: bytes, after: bytes) -> str:
    lines = difflib.unified_diff(before.decode().splitlines(keepends=True),
                                 after.decode().splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=1)
    text = "".join(lines)
    return text if len(text) <= _DIFF_MAX_CHARS else text[:_DIFF_MAX_CHARS] + "\n... (cut)\n"


def compare(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> list[Change]:
    """What changed from ``before`` to ``after`` (both keyed by path);
    directories only count when added or deleted."""
    out = []
    for path in sorted(set(before) | set(after)):
        b, a = before.get(path), after.get(path)
        if b is not None and a is not None and (b.kind, b.digest) == (a.kind, a.digest):
            continue
        if b is not None and a is not None and b.kind == a.kind == "dir":
            continue
        change: ChangeKind = "added" if b is None else "deleted" if a is None else "modified"
        datas = [e.data for e in (b, a) if e is not None and e.kind == "file"]
        binary = not all(is_text(d) for d in datas)
        diff = ""
        if not binary and (b is None or b.kind == "file") and (a is None or a.kind == "file"):
            diff = _text_diff(path, b.data if b else b"", a.data if a else b"")
        out.append(Change(path, change, b.digest if b else None, a.digest if a else None,
                          len(b.data) if b else None, len(a.data) if a else None, binary, diff))
    return out
