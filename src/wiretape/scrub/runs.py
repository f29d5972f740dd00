"""``wiretape scrub`` and ``wiretape scan``: a run's secrets after the fact.

``scrub`` copies a run with more rules applied everywhere it keeps text
(exchanges with their coded bodies and frames, the command line, variable
names, output, snapshot files, the outcome, replays, the connect report),
drops snapshot entries a snapshot leaves out today (``.env``, ``.git``,
keys), then puts the copy in the run's place in one rename. Each
replacement is a redaction fact like those of a recording, so a replay
learns a scrubbed value back by its fingerprint (from its environment, or
from a live request at the place of the mask) and still matches.

``scan`` does the same copy into a file it throws away and reports what
the rules found, and what the file's bytes hold outside any record.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import secrets
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wiretape.errors import RunFileError, RunFileWriteError, UsageError, write_failure_reason
from wiretape.model import Exchange, Redaction
from wiretape.redaction import (
    STANDARD,
    Facts,
    Rules,
    fingerprint,
    redact_argument,
    redact_exchange,
    redact_json,
    redact_text,
)
from wiretape.scrub.places import is_secrets_file, stored_secrets_values, unique
from wiretape.snapshot.tree import SnapshotPolicy
from wiretape.store.rewrite import rewrite
from wiretape.store.runfile import RunFile

#: How places are named in a report, by the first part of a fact's location.
PLACES = {
    "request-header": "request headers", "response-header": "response headers",
    "query": "request targets", "target": "request targets",
    "request-body": "request bodies", "response-body": "response bodies",
    "error": "exchange errors", "argv": "command line", "env-names": "variable names",
    "stdout": "stdout", "stderr": "stderr", "snapshot": "snapshot files",
    "outcome": "outcome files", "replay": "replays", "connect": "connect report",
    "origins": "origins", "extra": "run metadata", "meta": "run metadata",
}


def place_of(location: str) -> str:
    return PLACES.get(location.split(":", 1)[0], location.split(":", 1)[0])


def rules_for(matches: Sequence[str], rules_file: Path | None) -> tuple[Rules, list[str]]:
    """The standard rules plus ``--match`` texts and the regexes of
    ``--rules FILE`` (one a line; blank lines and ``#`` comments skipped),
    and their labels. Raises UsageError."""
    rules = STANDARD.with_literals(
        (f"match {n}", m.encode("utf-8")) for n, m in enumerate(matches, 1) if m)
    labels = [f"match {n}" for n, m in enumerate(matches, 1) if m]
    if rules_file is not None:
        try:
            lines = rules_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --rules {rules_file}: {exc}") from exc
        patterns = []
        for n, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                pattern = re.compile(text.encode("utf-8"))
            except re.error as exc:
                raise UsageError(f"--rules {rules_file} line {n} is not a regular expression "
                                 f"({exc}): fix or remove it") from exc
            if pattern.fullmatch(b""):
                raise UsageError(f"--rules {rules_file} line {n} matches empty text: it would "
                                 "find a secret everywhere")
            patterns.append((f"rule {n}", pattern))
            labels.append(f"rule {n}")
        rules = rules.with_patterns(patterns)
    return rules, labels


@dataclass
class _Scrubber:
    """The Rewriter of a scrub or a scan: the rules applied to every
    value, what they found, what the snapshot policy drops."""

    rules: Rules
    policy: SnapshotPolicy
    #: patterns of snapshot entries to drop besides what the policy leaves out
    drop: tuple[str, ...] = ()
    facts: Facts = field(default_factory=Facts)
    exchange_facts: list[Redaction] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    binaries: list[str] = field(default_factory=list)
    #: secrets seen in binary files (which are copied as they are)
    in_binaries: list[Redaction] = field(default_factory=list)

    def exchange(self, exchange: Exchange) -> tuple[Exchange, list[Redaction]]:
        stored, found = redact_exchange(exchange, self.rules)
        self.exchange_facts.extend(found)
        return stored, found

    def text(self, data: bytes, place: str) -> bytes:
        return redact_text(data, place, self.rules, self.facts)[0]

    def json(self, value: object, place: str) -> object:
        if place == "argv" and isinstance(value, list):  # (a header, a URL, a form)
            return [redact_argument(v, place, self.rules, self.facts) if isinstance(v, str)
                    else redact_json(v, place, self.rules, self.facts) for v in value]
        return redact_json(value, place, self.rules, self.facts)

    def keep(self, path: str, empty: bool) -> bool:
        """Not when a snapshot leaves it out today: a file, or anything in
        a folder, left out; a folder left out stays, empty (as a recording
        now keeps it)."""
        parts = path.split("/")
        for i, name in enumerate(parts):
            rel = "/".join(parts[:i + 1])
            reason: str | None = self.policy.reason(rel, name)
            if reason is None and any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(rel, p)
                                      for p in self.drop):
                reason = "--drop"
            if reason is not None and not (empty and i == len(parts) - 1 and reason != "--drop"):
                self.dropped.setdefault(rel, reason)
                return False
        return True

    def binary(self, data: bytes, place: str) -> None:
        if place not in self.binaries:
            self.binaries.append(place)
        for label, pattern in self.rules.all_shapes():
            for m in pattern.finditer(data):
                fact = Redaction(place, label or self.rules.label(m.group(0)),
                                 fingerprint(m.group(0)))
                if fact not in self.in_binaries:
                    self.in_binaries.append(fact)

    def run_facts(self) -> list[Redaction]:
        return unique(self.facts.items)

    def found(self) -> list[Redaction]:
        """Every fact of a replacement (not of a body coded again)."""
        return [f for f in self.exchange_facts + self.facts.items
                if not f.name.startswith("recoded:")]


@dataclass
class ScrubReport:
    """What a scrub or a scan found: replacements per place, each fact
    (location, rule, fingerprint), snapshot paths dropped (path to
    reason), binary places not read, and (scan) secrets in the file's
    bytes outside any record."""

    path: Path
    counts: dict[str, int]
    facts: list[Redaction]
    dropped: dict[str, str]
    binary: list[str]
    loose: list[Redaction] = field(default_factory=list)
    recoded: int = 0
    #: secrets in binary files, which are never rewritten
    in_binary: list[Redaction] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return bool(self.facts or self.dropped or self.loose or self.in_binary)

    def to_json(self) -> dict[str, object]:
        return {"path": str(self.path), "counts": self.counts,
                "found": [{"where": f.location, "rule": f.name, "fingerprint": f.fingerprint}
                          for f in self.facts],
                "dropped": [{"path": p, "reason": r} for p, r in self.dropped.items()],
                "not_read_binary": self.binary,
                "outside_records": [{"rule": f.name, "fingerprint": f.fingerprint}
                                    for f in self.loose],
                "in_binary_files": [{"where": f.location, "rule": f.name,
                                     "fingerprint": f.fingerprint} for f in self.in_binary],
                "recoded_bodies": self.recoded}


def _report(path: Path, scrubber: _Scrubber) -> ScrubReport:
    found = scrubber.found()
    counts = Counter(place_of(f.location) for f in found)
    recoded = sum(1 for f in scrubber.exchange_facts if f.name.startswith("recoded:"))
    return ScrubReport(path, dict(counts), unique(found), dict(scrubber.dropped),
                       list(scrubber.binaries), recoded=recoded,
                       in_binary=list(scrubber.in_binaries))


def scrub_run(path: Path, rules: Rules, labels: Sequence[str], *, out: Path | None = None,
              include: Sequence[str] = (), drop: Sequence[str] = ()) -> ScrubReport:
    """Rewrite the run at ``path`` (into ``out``, else in its place) with
    ``rules`` everywhere, dropping snapshot entries a snapshot leaves out
    unless ``include`` matches them, and those ``drop`` matches. Written to a temporary file beside
    the target and renamed over it, so a reader sees the old run or the
    new one, never half of one. Raises RunFileError, UsageError."""
    target = Path(out) if out is not None else Path(path)
    if out is not None and target.exists():
        raise UsageError(f"{target} already exists and is never overwritten; choose another -o "
                         "path, or leave -o out to scrub the run in place")
    with RunFile.open(path) as run:
        recorded_policy, _ = run.snapshot_policy()
        rules, found_in_files = _with_stored_secrets(run, rules)
    if found_in_files:
        labels = [*labels, "secrets files"]
    old = SnapshotPolicy.from_json(recorded_policy)
    policy = SnapshotPolicy(include=tuple(include), binary=True)
    scrubber = _Scrubber(rules, policy, tuple(drop))
    tmp = target.with_name(f".{target.name}.scrub-{secrets.token_hex(4)}")
    try:
        rewrite(Path(path), tmp, scrubber)
        report = _report(target, scrubber)
        with RunFile.open(tmp, write=True) as copy:
            # Replays read the sandbox as the snapshot now is: what was
            # dropped is not looked at after the agent ran either.
            kept = SnapshotPolicy(include=tuple(include), binary=old.binary)
            _, left_out = copy.snapshot_policy()
            copy.set_snapshot_policy(kept.to_json(), {int(k): [(p[0], p[1]) for p in v]
                                                      for k, v in left_out.items()
                                                      if k.isdigit()})
            copy.add_scrub({"at_ns": time.time_ns(), "rules": ["key shapes", *labels],
                            "counts": report.counts})
            copy.close(compact=True)
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # a read-only folder: nothing was made there
            tmp.unlink(missing_ok=True)
        if isinstance(exc, RunFileError) and exc.path == tmp:
            raise _write_error(target, exc) from exc
        if isinstance(exc, OSError | sqlite3.Error):
            raise RunFileWriteError(target, write_failure_reason(exc)) from exc
        raise
    for suffix in ("-wal", "-shm", "-journal"):  # the old file's, if any: never the new one's
        Path(str(target) + suffix).unlink(missing_ok=True)
    return report


def _with_stored_secrets(run: RunFile, rules: Rules) -> tuple[Rules, bool]:
    """``rules`` plus the values set in the secrets files the run's
    snapshots hold (a ``.env`` a scrub drops, or one taken on request):
    secrets wherever else the run keeps them, and in the file itself; and
    whether there were any. Checks the snapshots as a replay would: a run
    a replay refuses is refused here too (RunFileError)."""
    snapshots = run.snapshots(contents=is_secrets_file)
    values = [value for _, _, entries in snapshots for value in stored_secrets_values(entries)]
    return rules.with_literals(values), bool(values)


def _write_error(target: Path, exc: RunFileError) -> RunFileWriteError:
    """A failure to write the scrub's temporary copy, said of the run."""
    return RunFileWriteError(target, exc.reason)


def scan_run(path: Path, rules: Rules = STANDARD) -> ScrubReport:
    """What ``rules`` find in the run at ``path`` (nothing is changed):
    every place a scrub would rewrite, snapshot entries a snapshot leaves
    out today, and secrets in the file's bytes outside any record (free
    pages, a journal beside it). Raises RunFileError."""
    with RunFile.open(path) as run:
        rules, _ = _with_stored_secrets(run, rules)
    scrubber = _Scrubber(rules, SnapshotPolicy(binary=True))
    with tempfile.TemporaryDirectory(prefix="wiretape-scan-") as tmp:
        rewrite(Path(path), Path(tmp) / "copy.wtape", scrubber)
    report = _report(Path(path), scrubber)
    known = {f.fingerprint for f in report.facts + report.in_binary}
    loose: dict[str, Redaction] = {}
    for file in (Path(path), Path(str(path) + "-wal"), Path(str(path) + "-journal")):
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunFileError(file, exc.strerror or str(exc)) from exc
        for label, pattern in rules.all_shapes():
            for m in pattern.finditer(data):
                # In a page, the bytes after a known secret may run on into it.
                text = m.group(0)
                if any(fingerprint(text[:n]) in known for n in range(1, len(text) + 1)):
                    continue
                loose.setdefault(fingerprint(text), Redaction(
                    "file bytes", label or rules.label(text), fingerprint(text)))
    report.loose = list(loose.values())
    return report


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
