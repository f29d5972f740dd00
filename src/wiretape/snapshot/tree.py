"""Reading a directory tree into entries, and comparing a tree with them.

An entry is one file, directory or symbolic link under a root, named by its
POSIX path relative to the root. Symbolic links are recorded as links (their
target text), never followed. Other file types (sockets, FIFOs, devices)
are skipped. Knows nothing of run files or sandboxes.

What a snapshot leaves out is a :class:`SnapshotPolicy`: folders tools
regenerate (never listed), files that hold secrets, the repository's
``.git``, run files, and binary files (whose bytes cannot be checked for
secrets); each left out is reported as a :class:`LeftOut`. A binary file left out is still
read to hash it, so the outcome can tell whether the agent changed it.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias, TypedDict

from wiretape.errors import UsageError
from wiretape.limits import DEFAULT_SNAPSHOT_MAX_BYTES
from wiretape.model import SnapshotPolicyJSON

#: Folders never snapshotted: tools regenerate them and they are large.
DEFAULT_EXCLUDES: frozenset[str] = frozenset(
    {".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", ".wiretape"}
)
DEFAULT_MAX_BYTES = DEFAULT_SNAPSHOT_MAX_BYTES
_DIFF_MAX_CHARS = 4000

#: Why a path is left out of a snapshot.
Reason: TypeAlias = Literal["secrets", "private key", "repository", "run file", "binary"]

#: Names (matched against a file's or folder's name) a snapshot leaves out
#: unless told to take them, by reason.
LEFT_OUT_NAMES: tuple[tuple[Reason, tuple[str, ...]], ...] = (
    ("secrets", (".env", ".env.*", ".envrc", ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass",
                 ".git-credentials", "credentials*.json", "*.p12", "*.pfx", "*.jks",
                 "*.keystore", "*.kdbx", ".ssh", ".aws", ".gnupg")),
    ("private key", ("*.pem", "*.key", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*")),
    ("repository", (".git",)),
    ("run file", ("*.wtape", "*.wtape-wal", "*.wtape-shm", "*.wtape-journal", ".wiretape")),
)
#: Relative paths left out (matched against the whole path).
LEFT_OUT_PATHS: tuple[tuple[Reason, tuple[str, ...]], ...] = (
    ("secrets", (".docker/config.json", "*/.docker/config.json")),
)

_PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_SNIFF = 64 * 1024


@dataclass(frozen=True)
class SnapshotPolicy:
    """What a snapshot takes. ``include``: patterns (``fnmatch``, against a
    name or a path relative to the tree) taken even when the rules above
    would leave them out; ``binary``: take binary files too. ``guarded``
    False is the policy of runs recorded before there was one: everything
    but the regenerated folders."""

    include: tuple[str, ...] = ()
    binary: bool = False
    guarded: bool = True

    def to_json(self) -> SnapshotPolicyJSON:
        return {"include": list(self.include), "binary": self.binary, "guarded": self.guarded}

    @classmethod
    def from_json(cls, value: object) -> SnapshotPolicy:
        """The policy a run stored (untrusted: odd members fall back);
        LEGACY when it stored none."""
        if not isinstance(value, dict):
            return LEGACY
        include = value.get("include")
        return cls(tuple(str(p) for p in include) if isinstance(include, list) else (),
                   bool(value.get("binary", False)), bool(value.get("guarded", True)))

    def included(self, rel: str, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(rel, p)
                   or fnmatch.fnmatchcase(rel, p.rstrip("/")) for p in self.include)

    def reason(self, rel: str, name: str) -> Reason | None:
        """Why the file or folder at ``rel`` is left out by its name (None:
        it is taken)."""
        if not self.guarded or self.included(rel, name):
            return None
        for reason, patterns in LEFT_OUT_NAMES:
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return reason
        for reason, patterns in LEFT_OUT_PATHS:
            if any(fnmatch.fnmatchcase(rel, p) for p in patterns):
                return reason
        return None

    def path_reason(self, path: str) -> Reason | None:
        """Why the entry at ``path`` is left out by its name or by a folder
        it is in (None: it is taken)."""
        parts = path.split("/")
        for i, name in enumerate(parts):
            reason = self.reason("/".join(parts[:i + 1]), name)
            if reason is not None:
                return reason
        return None


#: Take everything but the regenerated folders (runs recorded before policies).
LEGACY = SnapshotPolicy(guarded=False, binary=True)
DEFAULT_POLICY = SnapshotPolicy()


@dataclass(frozen=True)
class LeftOut:
    """A path a snapshot left out (a folder's path ends in ``/``)."""

    path: str
    reason: Reason


@dataclass(frozen=True)
class Entry:
    """``path``: relative POSIX path; ``kind``: file, dir or symlink; ``mode``:
    permission bits; ``data``: file bytes (b"" otherwise); ``link``: a
    symlink's target. A file left out (``left_out``: binary) has no data;
    ``sha256`` and ``size`` stand for its bytes."""

    path: str
    kind: str
    mode: int
    data: bytes = b""
    link: str = ""
    left_out: str = ""
    sha256: str = field(default="", repr=False)
    size: int = 0

    @property
    def digest(self) -> str:
        if self.left_out:
            return self.sha256
        payload = self.data if self.kind == "file" else self.link.encode()
        return hashlib.sha256(payload).hexdigest()

    @property
    def nbytes(self) -> int:
        """The file's size in bytes (also when its bytes were left out)."""
        return self.size if self.left_out else len(self.data)


def _read(full: Path, size: int, room: int | None,
          too_big: UsageError) -> tuple[bytes | None, str, int]:
    """A file's bytes when it is text (else None), its sha256 and size.
    Raises ``too_big`` for a text file over ``room`` bytes."""
    with open(full, "rb") as fh:
        head = fh.read(_SNIFF)
        if _text_start(head, size > len(head)) and room is not None and size > room:
            raise too_big
        if not _text_start(head, size > len(head)):
            digest = hashlib.sha256(head)
            total = len(head)
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
                total += len(block)
            return None, digest.hexdigest(), total
        data = head + fh.read()
    text = is_text(data)
    return (data if text else None), hashlib.sha256(data).hexdigest(), len(data)


def _text_start(head: bytes, more: bool) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return more and exc.start >= len(head) - 3  # a character cut at the end
    return True


def walk(
    root: Path,
    *,
    exclude: frozenset[Path] = frozenset(),
    skip_names: frozenset[str] = DEFAULT_EXCLUDES,
    max_bytes: int | None = None,
    policy: SnapshotPolicy = LEGACY,
    left_out: list[LeftOut] | None = None,
) -> Iterator[Entry]:
    """Every entry under ``root`` in a stable order, as ``policy`` takes
    them: a file it leaves out by name is not yielded, a folder it leaves
    out is yielded empty (its contents are not), a binary file it leaves
    out is yielded with ``left_out`` set and no data; each is added to
    ``left_out`` when given. Raises UsageError when the files taken together
    exceed ``max_bytes``."""
    total = 0
    excluded = {p.resolve() for p in exclude}

    def leave(rel: str, reason: Reason) -> None:
        if left_out is not None:
            left_out.append(LeftOut(rel, reason))

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        rel_dir = base.relative_to(root)
        keep: list[str] = []
        emptied: list[Entry] = []
        for name in sorted(dirnames):
            full = base / name
            if name in skip_names or full.resolve() in excluded:
                continue
            if full.is_symlink():
                filenames.append(name)
                continue
            rel = (rel_dir / name).as_posix()
            reason = policy.reason(rel, name)
            if reason is not None:
                # The folder keeps its place, empty: an agent that looks
                # for it (a .git) finds it in the sandbox as it did here.
                leave(rel + "/", reason)
                emptied.append(Entry(rel, "dir", stat.S_IMODE(full.lstat().st_mode)))
                continue
            keep.append(name)
        dirnames[:] = keep
        yield from emptied
        if rel_dir != Path("."):
            yield Entry(rel_dir.as_posix(), "dir", stat.S_IMODE(base.lstat().st_mode))
        for name in sorted(filenames):
            full = base / name
            if full.resolve() in excluded:
                continue
            rel = (rel_dir / name).as_posix()
            reason = policy.reason(rel, name)
            if reason is not None:
                leave(rel, reason)
                continue
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                yield Entry(rel, "symlink", 0o777, link=os.readlink(full))
            elif stat.S_ISREG(info.st_mode):
                entry = _file(full, rel, info, policy, max_bytes, total, root)
                if entry.left_out:
                    leave(rel, "binary" if entry.left_out == "binary" else "private key")
                    if entry.left_out != "binary":
                        continue
                total += len(entry.data)
                yield entry


def _file(full: Path, rel: str, info: os.stat_result, policy: SnapshotPolicy,
          max_bytes: int | None, total: int, root: Path) -> Entry:
    mode = stat.S_IMODE(info.st_mode)
    too_big = UsageError(
        f"the snapshot of {root} is over {max_bytes} bytes (--snapshot-max): "
        "snapshot fewer paths with --snapshot PATH, or raise the limit, or "
        "use --no-snapshot")
    try:
        if not policy.guarded:
            if max_bytes is not None and total + info.st_size > max_bytes:
                raise too_big
            return Entry(rel, "file", mode, data=full.read_bytes())
        room = None if max_bytes is None else max_bytes - total
        data, digest, size = _read(full, info.st_size, room, too_big)
    except OSError as exc:
        raise UsageError(
            f"cannot read {full} for the snapshot ({exc.strerror}): snapshot other "
            "paths with --snapshot PATH, or use --no-snapshot") from exc
    name = full.name
    if data is not None and _PRIVATE_KEY.search(data) and not policy.included(rel, name):
        return Entry(rel, "file", mode, left_out="private key")
    if data is None and not (policy.binary or policy.included(rel, name)):
        return Entry(rel, "file", mode, left_out="binary", sha256=digest, size=size)
    if data is None:
        data = full.read_bytes()
    if max_bytes is not None and total + len(data) > max_bytes:
        raise too_big
    return Entry(rel, "file", mode, data=data)


def summary(left_out: Sequence[LeftOut], names: int = 4) -> str:
    """One line for what a snapshot left out: counts by reason, a few names."""
    if not left_out:
        return ""
    counts: dict[str, int] = {}
    for item in left_out:
        counts[item.reason] = counts.get(item.reason, 0) + 1
    if len(left_out) == names + 1:
        names += 1  # a name is as short as "and 1 more"
    shown = ", ".join(item.path for item in left_out[:names])
    more = f", and {len(left_out) - names} more" if len(left_out) > names else ""
    by_reason = ", ".join(f"{n} {reason}" for reason, n in counts.items())
    return f"{len(left_out)} path(s) ({by_reason}): {shown}{more}"


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
        files = [e for e in (b, a) if e is not None and e.kind == "file"]
        binary = any(e.left_out or not is_text(e.data) for e in files)
        diff = ""
        if not binary and (b is None or b.kind == "file") and (a is None or a.kind == "file"):
            diff = _text_diff(path, b.data if b else b"", a.data if a else b"")
        out.append(Change(path, change, b.digest if b else None, a.digest if a else None,
                          b.nbytes if b else None, a.nbytes if a else None, binary, diff))
    return out
