"""The replay sandbox: every snapshot restored into a fresh temporary
directory, the agent's paths mapped into it, and the outcome compared.

Two ways to show the sandbox to the agent: at the original absolute paths
(bind mounts in a private mount namespace, where Linux allows; prompts keep
their bytes), or by mapping — the working directory, ``HOME`` when a
snapshot lies under it, and argv entries naming paths in snapshotted trees
point into the sandbox, and the mapping is a declared substitution. Knows
nothing of proxies.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wiretape.errors import UsageError
from wiretape.matching import correspond
from wiretape.matching.correspond import Learned
from wiretape.matching.volatile import VolatileComparison, compare_volatile, equal_up_to
from wiretape.model import FileDifference, FilesFacet, FileSides, FileVolatile
from wiretape.playback.decide import Substitution
from wiretape.snapshot.restore import check_roots, restore, system_folder
from wiretape.snapshot.tree import (
    DEFAULT_EXCLUDES,
    LEGACY,
    ChangeJSON,
    ChangeKind,
    Entry,
    SnapshotPolicy,
    compare,
    walk,
)

#: Folders left out of snapshots that a replay shows as they are, read-only.
TOOL_FOLDERS = DEFAULT_EXCLUDES - {".wiretape"}

MAPPING_WARNING = (
    "wiretape: paths are mapped into the sandbox, not shown at their original places: an "
    "agent can still reach the original files through absolute paths in its own files "
    "(its config, say)"
)

#: The prefix of a sandbox directory's name, under the temporary directory.
PREFIX = "wiretape-sandbox-"
#: In a sandbox's root: "PID START" of the process that made it (START from
#: /proc/PID/stat where there is one, so a reused pid is told apart).
PID_FILE = "wiretape.pid"


@dataclass(frozen=True)
class Copy:
    snapshot_id: int
    original: Path
    copy: Path
    entries: tuple[Entry, ...]


@dataclass
class Sandbox:
    """Restored copies of a run's snapshots under ``root``."""

    root: Path
    copies: list[Copy] = field(default_factory=list)
    home: Path | None = None
    #: what the recording's snapshots took: the agent's changes are read the same way
    policy: SnapshotPolicy = LEGACY
    #: the run file the snapshots came from (named in messages)
    source: Path | None = None
    _after: dict[int, dict[str, Entry]] = field(default_factory=dict)

    @classmethod
    def restore(cls, snapshots: Sequence[tuple[int, str, list[Entry]]], *, source: Path,
                home: str | None, policy: SnapshotPolicy = LEGACY) -> Sandbox:
        """Restore every snapshot into a new temporary directory. A tree
        under ``home`` keeps its place under a sandbox home. Raises
        RunFileError for unsafe entries (the directory is removed). What
        the snapshots left out is not there, and is not looked at after
        the agent ran either (``policy``)."""
        home_path = _home(home)
        check_roots([original for _, original, _ in snapshots], source)
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        box = cls(root, policy=policy, source=source)
        try:
            (root / PID_FILE).write_text(_process_mark(os.getpid()) or str(os.getpid()))
            for index, (snapshot_id, original, entries) in enumerate(snapshots):
                orig = Path(original)
                if home_path is not None and _is_under(orig, home_path):
                    box.home = root / "home"
                    target = box.home / orig.relative_to(home_path)
                else:
                    target = root / f"{index}-{orig.name or 'root'}"
                restore(entries, target, source=source)
                box.copies.append(Copy(snapshot_id, orig, target, tuple(entries)))
        except BaseException:
            _remove_tree(root)
            raise
        return box

    def binds(self, path: str | None = None) -> list[tuple[str, str]]:
        """(sandbox copy, original path) pairs for same-path bind mounts.
        Raises UsageError when a copy would cover a system folder
        (``snapshot.restore.system_folder``) or a folder on ``path``
        (default: this process's ``PATH``): the run's files would stand in
        for the system's or the user's programs there."""
        for c in self.copies:
            if system_folder(str(c.original)):
                raise UsageError(
                    f"run file {self.source}: its snapshot root {c.original} is a system "
                    "folder: shown at the original paths, the run's files would stand in for "
                    "the system's own there; replay with --no-same-paths (the snapshot is then "
                    "restored elsewhere)")
        for original, folder in shadowed(self.copies, os.environ.get("PATH", "")
                                         if path is None else path):
            raise UsageError(
                f"the snapshot root {original} of run file {self.source} holds {folder}, a "
                "folder on your PATH: a replay at the original paths would run the run's files "
                "in place of your programs there; replay with --no-same-paths (or without that "
                "folder on PATH)")
        return [(str(c.copy), str(c.original)) for c in self.copies]

    def tool_folders(self) -> list[tuple[str, str]]:
        """(original folder, its place in the sandbox copy) for each folder
        at the top of a snapshotted tree that snapshots leave to the tools
        that make them (``.venv``, ``node_modules``, ...: ``TOOL_FOLDERS``)
        and that exists here."""
        return [(str(c.original / name), str(c.copy / name))
                for c in self.copies for name in sorted(TOOL_FOLDERS)
                if (c.original / name).is_dir() and not (c.original / name).is_symlink()]

    def tool_binds(self) -> list[tuple[str, str]]:
        """:meth:`tool_folders`, each place made as a folder to bind the
        original on. Shown read-only, the agent's interpreter and packages
        are there in a replay as they were, and stay unwritten."""
        pairs = self.tool_folders()
        for _original, place in pairs:
            os.makedirs(place, exist_ok=True)
        return pairs

    def link_tools(self) -> list[str]:
        """Where the system cannot bind them read-only: each of
        :meth:`tool_folders` linked at its place (a symbolic link to the
        original, which the agent could write through). Returns the
        originals linked."""
        linked = []
        for original, place in self.tool_folders():
            if not os.path.lexists(place):
                os.symlink(original, place, target_is_directory=True)
                linked.append(original)
        return linked

    def on_host(self, path: str) -> str:
        """Where a path in a sandbox copy is found on this machine: inside
        a tool folder, in the original folder shown there; else itself."""
        for c in self.copies:
            for name in TOOL_FOLDERS:
                place = str(c.copy / name)
                if path == place or path.startswith(place + os.sep):
                    return str(c.original / name) + path[len(place):]
        return path

    def left_out_folder(self, path: str) -> tuple[str, str] | None:
        """(folder name, original folder) when a path in a sandbox copy lies
        in a tool folder (``.venv``, ...) that does not exist here."""
        for c in self.copies:
            for name in sorted(TOOL_FOLDERS):
                place = str(c.copy / name)
                if (path == place or path.startswith(place + os.sep)) and not (
                        c.original / name).is_dir():
                    return name, str(c.original / name)
        return None

    def _pairs(self) -> list[tuple[str, str]]:
        return sorted(((str(c.original), str(c.copy)) for c in self.copies),
                      key=lambda p: len(p[0]), reverse=True)

    def map_path(self, value: str) -> str:
        """``value`` with an original tree's path prefix replaced by its copy."""
        for original, copy in self._pairs():
            if value == original or value.startswith(original + os.sep):
                return copy + value[len(original):]
        return value

    def map_arg(self, arg: str) -> str:
        """An argv entry with every original tree path in it mapped."""
        out = arg
        for original, copy in self._pairs():
            out = out.replace(original, copy)
        return out

    def substitutions(self) -> tuple[Substitution, ...]:
        """The mapping as declared substitutions (recorded = original)."""
        return tuple(Substitution(o.encode(), c.encode()) for o, c in self._pairs())

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        if self.home is not None:
            env["HOME"] = str(self.home)
        if "PWD" in env:
            env["PWD"] = self.map_path(env["PWD"])
        return env

    def changes(self, redact: Callable[[Entry], Entry] = lambda e: e,
                ) -> dict[int, list[ChangeJSON]]:
        """What the agent changed in each copy, as Change.to_json rows;
        each file is first redacted (``redact``) as the recording's were."""
        out = {}
        for c in self.copies:
            after = {e.path: redact(e) for e in walk(c.copy, policy=self.policy)}
            self._after[c.snapshot_id] = after
            out[c.snapshot_id] = [
                ch.to_json() for ch in compare({e.path: e for e in c.entries}, after)
            ]
        return out

    def content(self, snapshot_id: int, path: str) -> bytes | None:
        """A file's bytes as :meth:`changes` last found them (None: no such file)."""
        entry = self._after.get(snapshot_id, {}).get(path)
        return entry.data if entry is not None and entry.kind == "file" else None

    def remove(self) -> None:
        _remove_tree(self.root)

    def release(self) -> None:
        """Keep the sandbox: it is no longer this process's to sweep."""
        with contextlib.suppress(OSError):
            (self.root / PID_FILE).unlink()


def _process_mark(pid: int) -> str | None:
    """``"PID START"`` for a running process (START: its start time in
    clock ticks since boot, from /proc), or None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything.
    fields = data[data.rfind(b")") + 2:].split()
    return f"{pid} {int(fields[19])}" if len(fields) > 19 else None


def _alive(mark: str) -> bool:
    """Whether the process a pid file names still runs (the same one)."""
    parts = mark.split()
    if not parts or not parts[0].isdigit():
        return False
    pid = int(parts[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    now = _process_mark(pid)
    return len(parts) < 2 or now is None or now == mark


def sweep_stale(parent: Path | None = None) -> list[Path]:
    """Remove the sandboxes under ``parent`` (default: the temporary
    directory) that this user's killed replays left behind: those whose pid
    file names a process that no longer runs. Returns what was removed."""
    base = Path(parent or tempfile.gettempdir())
    removed = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return []
    for path in candidates:
        try:
            info = path.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            mark = (path / PID_FILE).read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if not _alive(mark):
            _remove_tree(path)
            removed.append(path)
    return removed


def _remove_tree(root: Path) -> None:
    """Remove ``root`` and everything in it, also folders the agent made
    read-only (made writable again first; links are never followed)."""
    shutil.rmtree(root, ignore_errors=True)
    if not root.exists():
        return
    with contextlib.suppress(OSError):
        os.chmod(root, stat.S_IRWXU)
    for folder, names, _files in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


def shadowed(copies: Sequence[Copy], path: str) -> list[tuple[Path, str]]:
    """(snapshot root, folder) for each folder of ``path`` (a ``PATH``
    value) that a copy shown at its root would cover; folders the tools
    keep (``.venv/bin``: shown as they are, read-only) do not count."""
    out = []
    for folder in path.split(os.pathsep):
        if not folder.startswith("/"):
            continue
        # As written, and as the system resolves it (a link to a folder).
        for place in {Path(posixpath.normpath(folder)), Path(os.path.realpath(folder))}:
            for c in copies:
                if place == c.original or _is_under(place, c.original):
                    rel = place.relative_to(c.original).parts
                    if not (rel and rel[0] in TOOL_FOLDERS) and (c.original, folder) not in out:
                        out.append((c.original, folder))
    return out


def _home(value: str | None) -> Path | None:
    """This user's home directory, when it is an absolute path a tree can
    lie under (a snapshot under it keeps its place under a sandbox home)."""
    if not value or not value.startswith("/"):
        return None
    return Path(posixpath.normpath(value))


def _is_under(path: Path, parent: Path) -> bool:
    try:
        path.relative_to(parent)
    except ValueError:
        return False
    return path != parent


Content = Callable[[int, str, str | None], "bytes | None"]


def files_facet(recorded: Mapping[int, list[ChangeJSON]],
                replayed: Mapping[int, list[ChangeJSON]],
                recorded_content: Content | None = None,
                replayed_content: Content | None = None, *,
                since: float | None = None, learned: Learned | None = None,
                ignore: Sequence[str] = ()) -> FilesFacet:
    """The outcome's files part: same when both runs changed the same paths
    the same way. A file both runs added or modified whose bytes differ
    only in timestamps and timings (:mod:`wiretape.matching.volatile`)
    counts as the same and is listed under ``volatile`` with what differed;
    the ``*_content(snapshot_id, path, after_hash)`` callables give each
    side's bytes (None when not kept: then the bytes must be equal). Else
    the differing paths, each with both sides' change and diff, cut short,
    and the first real differences when both sides' bytes are known.

    With ``learned`` (what a replay learned of its ids and clock shift,
    matching.correspond), a file is also the same when it differs only by
    those values, and a file whose name differs only by them is paired with
    its recorded counterpart (``paired``); ``learned`` grows by what the
    files hold. Paths matching an ``ignore`` pattern (fnmatch, relative to
    the snapshot root) are left out and listed under ``ignored``."""
    def key(rows: list[ChangeJSON]) -> dict[str, tuple[ChangeKind, str | None]]:
        return {r["path"]: (r["change"], r["after_hash"]) for r in rows}

    differing: list[FileDifference] = []
    volatile: list[FileVolatile] = []
    ignored: list[str] = []
    paired: list[list[str]] = []

    def kept(rows: list[ChangeJSON]) -> list[ChangeJSON]:
        out = []
        for row in rows:
            if ignores(row["path"], ignore):
                ignored.append(row["path"])
            else:
                out.append(row)
        return out

    for sid in sorted(set(recorded) | set(replayed)):
        rec_rows, rep_rows = kept(recorded.get(sid, [])), kept(replayed.get(sid, []))
        if learned is not None:
            rep_rows = _pair_names(rec_rows, rep_rows, learned, paired)
        renamed = dict(paired)
        rec, rep = key(rec_rows), key(rep_rows)
        by_path_rec = {r["path"]: r for r in rec_rows}
        by_path_rep = {r["path"]: r for r in rep_rows}
        for path in sorted(set(rec) | set(rep)):
            if rec.get(path) == rep.get(path):
                continue
            row: FileSides = {"path": path,
                              "recorded": _describe(by_path_rec.get(path)),
                              "replayed": _describe(by_path_rep.get(path))}
            compared = _compare_contents(sid, path, rec.get(path), rep.get(path),
                                         recorded_content, replayed_content, since,
                                         learned, renamed.get(path, path))
            if compared is not None and compared.same:
                volatile.append({**row, "values": compared.summary(),
                                 "count": sum(compared.volatile.values()),
                                 "examples": [list(e) for e in compared.examples]})
                continue
            diffs = _diff(by_path_rec.get(path)), _diff(by_path_rep.get(path))
            if compared is not None:
                differing.append({**row, "real": [list(r) for r in compared.real],
                                  "recorded_diff": diffs[0], "replayed_diff": diffs[1]})
            else:
                differing.append({"path": path, "recorded": row["recorded"],
                                  "replayed": row["replayed"], "recorded_diff": diffs[0],
                                  "replayed_diff": diffs[1]})
    changed = sum(len(v) for v in replayed.values())
    facet: FilesFacet = {"same": not differing, "changed": changed,
                         "differing": differing[:20], "differing_count": len(differing),
                         "volatile": volatile[:20], "volatile_count": len(volatile)}
    if ignored:
        facet["ignored"] = sorted(set(ignored))
    if paired:
        facet["paired"] = paired
    return facet


def ignores(path: str, patterns: Sequence[str]) -> bool:
    """Whether an outcome-ignore pattern (fnmatch) matches ``path`` or a
    folder it is in (``backups`` leaves out ``backups/1.bak`` too)."""
    parts = path.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:n]), pattern.rstrip("/") or pattern)
               for pattern in patterns for n in range(1, len(parts) + 1))


def _pair_names(recorded: list[ChangeJSON], replayed: list[ChangeJSON], learned: Learned,
                paired: list[list[str]]) -> list[ChangeJSON]:
    """The replayed rows, each whose path exists only on its side renamed to
    the recorded-only path it equals up to ``learned`` (a session file
    named by its id, a backup named by its time); each pair is noted in
    ``paired`` as ``[recorded, replayed]``."""
    rec_paths = {r["path"] for r in recorded}
    rep_paths = {r["path"] for r in replayed}
    alone = sorted(rec_paths - rep_paths)
    out = []
    for row in replayed:
        path = row["path"]
        if path not in rec_paths:
            for candidate in alone:
                found = correspond.compare(candidate, path, learned, "name")
                if found.equivalent:
                    learned.hold(found.learned)
                    alone.remove(candidate)
                    paired.append([candidate, path])
                    row = {**row, "path": candidate}
                    break
        out.append(row)
    return out


def _compare_contents(sid: int, path: str, rec: tuple[ChangeKind, str | None] | None,
                      rep: tuple[ChangeKind, str | None] | None, recorded_content: Content | None,
                      replayed_content: Content | None,
                      since: float | None, learned: Learned | None = None,
                      replayed_path: str | None = None) -> VolatileComparison | None:
    """Both sides' resulting bytes compared with timestamps and timings set
    aside (added on one side and modified on the other compares the same
    way), or None when a side deleted the file or its bytes are not known."""
    if (rec is None or rep is None or "deleted" in (rec[0], rep[0])
            or recorded_content is None or replayed_content is None):
        return None
    old = recorded_content(sid, path, rec[1])
    new = replayed_content(sid, replayed_path or path, rep[1])
    if old is None or new is None:
        return None
    compared = compare_volatile(old, new, since=since)
    if not compared.same and learned is not None:
        return equal_up_to(old, new, learned) or compared
    return compared


def _diff(row: ChangeJSON | None) -> str:
    """A side's diff of a file, cut short."""
    return row.get("diff", "")[:800] if row is not None else ""


def _describe(row: ChangeJSON | None) -> str:
    if row is None:
        return "unchanged"
    size = row.get("after_size")
    return f"{row['change']}" + (f" ({size} bytes)" if size is not None else "")
