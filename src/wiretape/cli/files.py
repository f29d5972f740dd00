"""Files the command line writes for a person (HAR, HTML report, JUnit XML):
each written whole or not at all, so an interrupted or failed write never
leaves half a file where a finished one is expected."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from wiretape.errors import UsageError


def check_folder(path: Path) -> None:
    """Refuse, before any work, a file to write whose folder does not exist
    (a typo in ``-o`` would otherwise make a tree of folders): the report
    and a HAR export go only into a folder that is there. Raises UsageError
    (one line)."""
    folder = path.parent
    if not folder.exists() and not folder.is_symlink():
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist; create it "
                         f"first (mkdir -p {folder}) or name a file in a folder that exists")


def write_whole(path: Path, data: bytes, *, make_folder: bool = False) -> None:
    """Write ``data`` to ``path``: first to a temporary file beside it, then
    renamed over it, so ``path`` holds either its old content or all of the
    new. ``make_folder``: make its folder when missing (the JUnit file, as
    pytest's ``--junitxml`` does); else a missing folder is refused
    (:func:`check_folder`). Raises UsageError (one line) when it cannot be
    written."""
    import tempfile  # here: ``wiretape --help`` does not need it

    folder = path.parent
    if not make_folder:
        check_folder(path)
    try:
        if make_folder:
            folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp makes the file 0600; a finished file gets the usual mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def text_bytes(text: str) -> bytes:
    """``text`` as UTF-8, with a character UTF-8 cannot hold (a file name or
    argument that was not UTF-8, kept as a lone surrogate) written as a
    backslash escape: in JSON and in JavaScript that is the escape of the
    same character, so nothing is lost and nothing fails."""
    return text.encode("utf-8", "backslashreplace")
