"""The same redaction rules applied to the run's places other than its
exchanges: snapshot entries, the command line and variable names, the
agent's output. Each redaction becomes a run-level fact whose location
names the place (``argv``, ``stdout``, ``snapshot:PATH``, ...).

Used while recording (before anything is written), while replaying (the
replay's own output and files, before they are compared and stored) and
by ``scrub``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from wiretape.model import Redaction, RunInfo
from wiretape.redaction import (
    Facts,
    Rules,
    dotenv_values,
    redact_argument,
    redact_str,
    redact_text,
)
from wiretape.snapshot.tree import Entry, LeftOut, SnapshotPolicy, is_text

#: Largest secrets file read for values to look for elsewhere.
_SECRETS_FILE_MAX = 256 * 1024

#: A text redactor: (bytes, location) to bytes, adding facts as it goes.
Redact = Callable[[bytes, str], bytes]


def rules_redactor(rules: Rules, facts: Facts) -> Redact:
    return lambda data, location: redact_text(data, location, rules, facts)[0]


def redact_entry(entry: Entry, redact: Redact, prefix: str = "snapshot") -> Entry:
    """A text file's entry with its secrets masked (``prefix:PATH``);
    other entries as they are."""
    if entry.kind != "file" or entry.left_out or not is_text(entry.data):
        return entry
    data = redact(entry.data, f"{prefix}:{entry.path}")
    return entry if data == entry.data else replace(entry, data=data)


def redact_entries(entries: Iterable[Entry], redact: Redact,
                   prefix: str = "snapshot") -> list[Entry]:
    return [redact_entry(e, redact, prefix) for e in entries]


def redact_info(info: RunInfo, rules: Rules, facts: Facts) -> RunInfo:
    """The run's command line and variable names redacted (``argv``,
    ``env-names``): a header, URL, JSON or form argument's credential
    fields too (``redaction.redact_argument``)."""
    return replace(info, argv=tuple(redact_argument(a, "argv", rules, facts) for a in info.argv),
                   env_names=tuple(redact_str(n, "env-names", rules, facts)
                                   for n in info.env_names))


def secrets_file_values(root: Path, left_out: Sequence[LeftOut]) -> list[tuple[str, bytes]]:
    """Values set in the secrets files a snapshot of ``root`` left out
    (``.env``, ``.npmrc``, ...): looked for everywhere else in the run."""
    out: list[tuple[str, bytes]] = []
    for item in left_out:
        if item.reason != "secrets" or item.path.endswith("/"):
            continue
        path = root / item.path
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size > _SECRETS_FILE_MAX:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        out.extend(dotenv_values(data, item.path))
    return out


#: What makes a secrets file one, whatever a snapshot was told to take.
_BY_NAME = SnapshotPolicy(binary=True)


def is_secrets_file(path: str) -> bool:
    """Whether the entry at ``path`` is a secrets file (``.env``,
    ``.npmrc``, a file in ``.aws/``, ...) by its name or its folder's."""
    return _BY_NAME.path_reason(path) == "secrets"


def stored_secrets_values(entries: Iterable[Entry]) -> list[tuple[str, bytes]]:
    """Values set in the secrets files among ``entries`` (a snapshot told
    to take ``.env`` with ``--snapshot-include``, or one recorded before
    secrets files were left out): secrets wherever else they turn up, and
    in the file itself."""
    out: list[tuple[str, bytes]] = []
    for entry in entries:
        if (entry.kind == "file" and not entry.left_out and is_secrets_file(entry.path)
                and len(entry.data) <= _SECRETS_FILE_MAX):
            out.extend(dotenv_values(entry.data, entry.path))
    return out


def unique(facts: Iterable[Redaction]) -> list[Redaction]:
    """Facts without repeats, in the order first found."""
    return list(dict.fromkeys(facts))
