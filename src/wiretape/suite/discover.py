"""Finding run files: the files named, and every ``*.wtape`` under the
folders named, recursively. Knows nothing of what a run holds."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from wiretape.errors import UsageError

SUFFIX = ".wtape"


def find_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The run files named by ``paths``, in order, each once.

    A file is taken as it is (whatever its name); a folder contributes every
    ``*.wtape`` below it, sorted, skipping hidden folders (``.git``,
    ``.venv``, ``.wiretape``) unless a hidden folder is named itself.
    Raises UsageError for a path that does not exist.
    """
    found: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(_walk(path))
        else:
            raise UsageError(f"{raw}: no such file or folder (give run files or folders of "
                             f"*{SUFFIX} files)")
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    return found


def _walk(root: Path) -> Iterable[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.endswith(SUFFIX):
                yield Path(folder) / name
