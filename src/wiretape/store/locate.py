"""Where run files and replay logs live, and how a run id or path is
resolved to a run file."""

from __future__ import annotations

import os
import re
import secrets
import shlex
from pathlib import Path

from wiretape.errors import RunNotFound

DEFAULT_STORE = Path(".wiretape")
_RUN_ID = re.compile(r"^run_[0-9a-f]{12}$")


def new_run_id() -> str:
    """``run_`` and 12 hex digits (DESIGN.md)."""
    return "run_" + secrets.token_hex(6)


def runs_dir(base: Path | None = None) -> Path:
    """The default folder of run files: ``$WIRETAPE_HOME`` or ``./.wiretape``, plus ``runs``."""
    root = Path(os.environ.get("WIRETAPE_HOME", "")) if os.environ.get("WIRETAPE_HOME") else None
    return (root or (base or Path.cwd()) / DEFAULT_STORE) / "runs"


def run_ref(path: Path, run_id: str) -> str:
    """How to name the run at ``path`` (whose id is ``run_id``) on the
    command line: its run id when it is ``<run-id>.wtape`` in the default
    runs folder (where :func:`resolve_run` finds it by id), else its path
    (quoted for a POSIX shell where needed)."""
    try:
        if (path.name == f"{run_id}.wtape" and _RUN_ID.match(run_id)
                and path.resolve().parent == runs_dir().resolve()):
            return run_id
    except (OSError, RuntimeError):
        pass
    return shlex.quote(str(path))


def replay_logs_dir() -> Path:
    """Where replay logs are kept: ``$WIRETAPE_HOME/replays`` when the store
    is moved there, else the user's own state folder
    (``$XDG_STATE_HOME/wiretape/replays``, by default
    ``~/.local/state/wiretape/replays``): outside every working tree, and
    the same from any directory."""
    home = os.environ.get("WIRETAPE_HOME")
    if home:
        return Path(home) / "replays"
    state = os.environ.get("XDG_STATE_HOME")
    if not state:
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory at all
            return runs_dir().parent / "replays"
    return Path(state) / "wiretape" / "replays"


def replay_log_path(run_id: object, run_hash: str, folder: Path | None = None) -> Path:
    """The replay log of a run: ``<run-id>.replays`` in ``folder`` (default
    :func:`replay_logs_dir`), named by the run's content hash when its id is
    not one wiretape makes (the id comes from the file)."""
    name = run_id if isinstance(run_id, str) and _RUN_ID.match(run_id) else "run_" + run_hash[:16]
    return (folder if folder is not None else replay_logs_dir()) / f"{name}.replays"


def store_paths(run_path: Path) -> frozenset[Path]:
    """What a snapshot never includes: the store and the run file itself
    (with SQLite's files beside it)."""
    base = run_path.resolve()
    return frozenset({runs_dir().parent.resolve(), base, Path(str(base) + "-wal"),
                      Path(str(base) + "-shm"), Path(str(base) + "-journal")})


def resolve_run(ref: str, base: Path | None = None) -> Path:
    """The run file named by ``ref``: a path, or a run id under ``runs_dir()``.

    Raises RunNotFound.
    """
    candidate = Path(ref).expanduser()
    if candidate.is_file():
        return candidate
    store = runs_dir(base)
    if _RUN_ID.match(ref) and (store / f"{ref}.wtape").is_file():
        return store / f"{ref}.wtape"
    if candidate.is_dir():
        raise RunNotFound(ref, store, "is a folder, not a run file")
    if candidate.exists():  # a FIFO, a socket, a device: never opened
        raise RunNotFound(ref, store, "is not a regular file")
    raise RunNotFound(ref, store)
