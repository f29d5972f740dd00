"""Opening, writing and reading run files (DESIGN.md, "The run file").

Owns the mapping between model values and rows. Each exchange is written in
one transaction when it ends, so a SIGKILL loses at most the exchanges in
flight. While a run is being written the file is in WAL mode; a clean close
checkpoints it back into one self-contained file.

A run file is untrusted input: nothing read from it is executed.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import zstandard

from wiretape.errors import RunFileError, RunFileWriteError, write_failure_reason
from wiretape.model import (
    ConnectReportJSON,
    Ending,
    Exchange,
    Frame,
    Headers,
    Origin,
    Outcome,
    Redaction,
    ReplayKind,
    ReplayRecord,
    ReplayRow,
    ReplaySettingsJSON,
    Request,
    RequestDetail,
    Response,
    RunInfo,
    RunMeta,
    ScrubJSON,
    SnapshotPolicyJSON,
)
from wiretape.snapshot.tree import Change, ChangeJSON, Entry
from wiretape.store import blobs, schema


def _path_to_sql(path: str) -> str | bytes:
    """A file name for a TEXT column: as text when it is UTF-8, else its
    bytes as a BLOB (a name that is not UTF-8 comes from the file system
    decoded with surrogateescape; ``os.fsencode`` gives back its bytes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape")
    return path


def _path_from_sql(value: str | bytes) -> str:
    """A file name as :func:`_path_to_sql` stored it."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _headers_to_json(headers: Headers) -> str:
    return json.dumps([[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers])


def _headers_from_json(text: str) -> Headers:
    return tuple((k.encode("latin-1"), v.encode("latin-1")) for k, v in json.loads(text))


P = ParamSpec("P")
R = TypeVar("R")


def _damage_is_an_input_error(
        method: Callable[Concatenate[RunFile, P], R]) -> Callable[Concatenate[RunFile, P], R]:
    """Turn a damaged page or blob met after opening into a RunFileError
    naming the file, instead of a traceback."""

    @functools.wraps(method)
    def wrapper(self: RunFile, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.DatabaseError, zstandard.ZstdError, KeyError, ValueError) as exc:
            raise RunFileError(self.path, f"{exc}; the file is damaged") from exc

    return wrapper


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    db.execute("PRAGMA busy_timeout = 30000")
    return db


class RunFile:
    """A run file opened for reading and (for the owner) writing.

    Use ``RunFile.create(path, info)`` to start a recording and
    ``open_run(path)`` for everything else. All methods are safe to call from
    one thread at a time (a lock serialises them).
    """

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db = db
        self._lock = threading.RLock()
        self._cache: dict[str, bytes] = {}
        self._last_request_blob: str | None = None

    # -- opening -----------------------------------------------------------

    @classmethod
    def create(cls, path: Path, info: RunInfo) -> RunFile:
        """Create a new run file at ``path`` (its directory is made).

        Raises RunFileError when the path exists or cannot be written.
        """
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
            db = _connect(path)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            schema.create(db)
        except FileExistsError as exc:
            raise RunFileError(
                path, "it already exists and is never overwritten; choose another -o path"
            ) from exc
        except (OSError, sqlite3.Error) as exc:
            raise RunFileError(path, str(exc)) from exc
        run = cls(path, db)
        run._write_info(info)
        return run

    @classmethod
    def open(cls, path: Path) -> RunFile:
        """Open an existing run file, migrating it forward if needed.

        Raises RunFileError (or SchemaTooNew) when it cannot be read.
        """
        path = Path(path)
        if not path.is_file():
            raise RunFileError(path, "no such file")
        try:
            with open(path, "rb") as fh:
                magic = fh.read(16)
            if magic != b"SQLite format 3\x00":
                raise RunFileError(path, "it is not a wiretape run file (not SQLite)")
            db = _connect(path)
            schema.migrate(db, path)
            db.execute("SELECT count(*) FROM exchanges").fetchone()
        except RunFileError:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise RunFileError(path, f"{exc}; the file may be damaged") from exc
        return cls(path, db)

    def prepare_for_writes(self) -> None:
        """Switch an opened file to WAL with NORMAL sync for a replay's log:
        each row survives a killed process without an fsync per row. A
        ``close(compact=True)`` folds it back into one file."""
        with self._lock:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as exc:
                raise RunFileWriteError(self.path, f"{write_failure_reason(exc)} (for the "
                                                   "replay log)") from exc

    def close(self, *, compact: bool = False) -> None:
        """Close; with ``compact`` fold the WAL back so the file stands alone."""
        with self._lock:
            if compact:
                try:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    self._db.execute("PRAGMA journal_mode = DELETE")
                except sqlite3.Error:
                    pass  # another reader holds it; the WAL is folded in on its close
            self._db.close()

    def __enter__(self) -> RunFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- metadata ----------------------------------------------------------

    def _set_meta(self, values: RunMeta) -> None:
        with self._lock, self._db:
            for key, value in values.items():
                self._db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    (key, json.dumps(value)),
                )

    def _write_info(self, info: RunInfo) -> None:
        self._set_meta(
            {
                "run_id": info.run_id,
                "wiretape_version": info.wiretape_version,
                "argv": list(info.argv),
                "cwd": info.cwd,
                "env_names": list(info.env_names),
                "started_at_ns": info.started_at_ns,
                "mode": info.mode,
                "extra": info.extra,
            }
        )
        self.set_origins(info.origins)

    def set_origins(self, origins: Sequence[Origin]) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM origins")
            for o in origins:
                self._db.execute(
                    "INSERT INTO origins (name, upstream, port, env_vars) VALUES (?, ?, ?, ?)",
                    (o.name, o.upstream, o.port, json.dumps(list(o.env_vars))),
                )

    def set_intercept(self, hosts: Sequence[str]) -> None:
        """Mark the run as recorded with TLS interception of ``hosts``."""
        self._set_meta({"intercept": list(hosts)})

    def set_connect_report(self, report: ConnectReportJSON) -> None:
        """What the forward proxy saw (ConnectReport.to_json): intercepted
        hosts, tunnels (host, port, byte counts), rejected certificates."""
        self._set_meta({"connect": report})

    @_damage_is_an_input_error
    def connect_report(self) -> ConnectReportJSON | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'connect'").fetchone()
        report: ConnectReportJSON | None = json.loads(row[0]) if row else None
        return report

    def finish(self, exit_status: int | None, stdout: bytes, stderr: bytes) -> None:
        """Store the child's exit status and captured output."""
        self._set_meta(
            {
                "ended_at_ns": time.time_ns(),
                "exit_status": exit_status,
                "stdout": stdout.decode("latin-1"),
                "stderr": stderr.decode("latin-1"),
            }
        )

    @_damage_is_an_input_error
    def info(self) -> RunInfo:
        with self._lock:
            meta = {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}
            origins = tuple(
                Origin(name, upstream, port, tuple(json.loads(env)))
                for name, upstream, port, env in self._db.execute(
                    "SELECT name, upstream, port, env_vars FROM origins ORDER BY rowid"
                )
            )
        if "run_id" not in meta:
            raise RunFileError(self.path, "it has no run metadata")
        return RunInfo(
            run_id=meta["run_id"],
            wiretape_version=meta.get("wiretape_version", "?"),
            argv=tuple(meta.get("argv", ())),
            cwd=meta.get("cwd", ""),
            env_names=tuple(meta.get("env_names", ())),
            origins=origins,
            started_at_ns=meta.get("started_at_ns", 0),
            ended_at_ns=meta.get("ended_at_ns"),
            exit_status=meta.get("exit_status"),
            stdout=meta.get("stdout", "").encode("latin-1"),
            stderr=meta.get("stderr", "").encode("latin-1"),
            mode=meta.get("mode", "record"),
            extra=meta.get("extra", {}),
            intercept=tuple(meta.get("intercept", ())),
        )

    # -- exchanges ---------------------------------------------------------

    def write_exchange(self, exchange: Exchange, redactions: Sequence[Redaction] = ()) -> None:
        """Commit one ended exchange, already redacted, in one transaction."""
        req, resp = exchange.request, exchange.response
        with self._lock, self._db:
            db = self._db
            req_blob = blobs.put(db, req.body, ref=self._last_request_blob)
            self._last_request_blob = req_blob
            resp_blob = blobs.put(db, resp.body) if resp is not None else None
            db.execute(
                "INSERT INTO exchanges (seq, connection_id, origin, started_at_ns, method,"
                " target, http_version, request_headers, request_body, status, reason,"
                " response_http_version, response_headers, response_body, ending, ttfb_ns,"
                " duration_ns, error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    exchange.seq,
                    exchange.connection_id,
                    exchange.origin,
                    exchange.started_at_ns,
                    req.method,
                    req.target,
                    req.http_version,
                    _headers_to_json(req.headers),
                    req_blob,
                    resp.status if resp else None,
                    resp.reason if resp else None,
                    resp.http_version if resp else None,
                    _headers_to_json(resp.headers) if resp else None,
                    resp_blob,
                    exchange.ending.value,
                    exchange.ttfb_ns,
                    exchange.duration_ns,
                    exchange.error,
                ),
            )
            if resp is not None:
                start = 0
                for idx, frame in enumerate(resp.frames):
                    db.execute(
                        "INSERT INTO frames (seq, idx, offset_ns, start, length)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (exchange.seq, idx, frame.offset_ns, start, len(frame.data)),
                    )
                    start += len(frame.data)
            for r in redactions:
                db.execute(
                    "INSERT INTO redactions (seq, location, name, fingerprint) VALUES (?,?,?,?)",
                    (exchange.seq, r.location, r.name, r.fingerprint),
                )

    @_damage_is_an_input_error
    def exchange_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM exchanges").fetchone()[0])

    @_damage_is_an_input_error
    def exchanges(self) -> list[Exchange]:
        """Every recorded exchange, in sequence order."""
        return list(self.iter_exchanges())

    def iter_exchanges(self) -> Iterator[Exchange]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, connection_id, origin, started_at_ns, method, target, http_version,"
                " request_headers, request_body, status, reason, response_http_version,"
                " response_headers, response_body, ending, ttfb_ns, duration_ns, error"
                " FROM exchanges ORDER BY seq"
            ).fetchall()
            frames: dict[int, list[tuple[int, int, int]]] = {}
            for seq, offset_ns, start, length in self._db.execute(
                "SELECT seq, offset_ns, start, length FROM frames ORDER BY seq, idx"
            ):
                frames.setdefault(seq, []).append((offset_ns, start, length))
        for row in rows:
            yield self._exchange_from_row(row, frames.get(row[0], []))

    @_damage_is_an_input_error
    def _exchange_from_row(
        self, row: Sequence[Any], frame_rows: list[tuple[int, int, int]]
    ) -> Exchange:
        # ``row`` is a row of the exchanges table as SQLite gives it (Any):
        # a damaged or hostile file may hold any type in any column.
        (seq, conn, origin, started, method, target, version, req_headers, req_blob, status,
         reason, resp_version, resp_headers, resp_blob, ending, ttfb, duration, error) = row
        with self._lock:
            body = blobs.get(self._db, req_blob, self._cache)
            response = None
            if status is not None:
                resp_body = blobs.get(self._db, resp_blob, self._cache)
                response = Response(
                    status=status,
                    reason=bytes(reason or b""),
                    headers=_headers_from_json(resp_headers),
                    frames=tuple(
                        Frame(offset_ns, resp_body[start : start + length])
                        for offset_ns, start, length in frame_rows
                    ),
                    http_version=bytes(resp_version or b"1.1"),
                )
        return Exchange(
            seq=seq,
            connection_id=conn,
            origin=origin,
            started_at_ns=started,
            request=Request(
                method=bytes(method),
                target=bytes(target),
                headers=_headers_from_json(req_headers),
                body=body,
                http_version=bytes(version),
            ),
            response=response,
            ending=Ending(ending),
            ttfb_ns=ttfb,
            duration_ns=duration,
            error=error,
        )

    @_damage_is_an_input_error
    def redactions(self) -> list[tuple[int | None, Redaction]]:
        with self._lock:
            return [
                (seq, Redaction(loc, name, fp))
                for seq, loc, name, fp in self._db.execute(
                    "SELECT seq, location, name, fingerprint FROM redactions ORDER BY rowid"
                )
            ]

    def add_redactions(self, redactions: Sequence[Redaction], seq: int | None = None) -> None:
        """Store facts of redactions outside an exchange (``seq`` None): the
        command line, output, snapshot files."""
        with self._lock, self._db:
            self._db.executemany(
                "INSERT INTO redactions (seq, location, name, fingerprint) VALUES (?,?,?,?)",
                [(seq, r.location, r.name, r.fingerprint) for r in redactions])

    def set_snapshot_policy(self, policy: SnapshotPolicyJSON,
                            left_out: Mapping[int, Sequence[tuple[str, str]]]) -> None:
        """What the snapshots took, and per snapshot id what they left out."""
        self._set_meta({"snapshot_policy": policy,
                        "left_out": {str(k): [list(p) for p in v] for k, v in left_out.items()}})

    @_damage_is_an_input_error
    def snapshot_policy(self) -> tuple[SnapshotPolicyJSON | None, dict[str, list[list[str]]]]:
        """The stored policy (None: recorded before policies) and the paths
        left out per snapshot id (as text)."""
        with self._lock:
            rows = dict(self._db.execute(
                "SELECT key, value FROM meta WHERE key IN ('snapshot_policy', 'left_out')"))
        policy: SnapshotPolicyJSON | None = (json.loads(rows["snapshot_policy"])
                                             if "snapshot_policy" in rows else None)
        left_out: dict[str, list[list[str]]] = (json.loads(rows["left_out"])
                                                if "left_out" in rows else {})
        return policy, left_out

    def add_scrub(self, scrub: ScrubJSON) -> None:
        """Note one ``wiretape scrub`` of this run."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'scrubbed'").fetchone()
        done: list[ScrubJSON] = json.loads(row[0]) if row else []
        self._set_meta({"scrubbed": [*done, scrub]})

    @_damage_is_an_input_error
    def stored_bytes(self) -> int:
        """Bytes of bodies as stored (compressed), for summaries."""
        with self._lock:
            row = self._db.execute("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()
        return int(row[0])

    @_damage_is_an_input_error
    def body_bytes(self) -> int:
        """Bytes of request and response bodies as they crossed the wire."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce(sum(b.size), 0) FROM exchanges e JOIN blobs b"
                " ON b.hash = e.request_body OR b.hash = e.response_body"
            ).fetchone()
        return int(row[0])

    # -- snapshots and outcome ---------------------------------------------

    def add_snapshot(self, root: str, entries: Sequence[Entry]) -> int:
        """Store a tree's entries (bodies content-addressed); return its id."""
        with self._lock, self._db:
            cur = self._db.execute(
                "INSERT INTO snapshots (root, taken_at_ns, files, bytes) VALUES (?, ?, ?, ?)",
                (_path_to_sql(root), time.time_ns(),
                 sum(1 for e in entries if e.kind == "file" and not e.left_out),
                 sum(len(e.data) for e in entries)))
            snapshot_id = int(cur.lastrowid or 0)
            for e in entries:
                if e.left_out:  # its bytes were never read into the snapshot
                    continue
                digest = blobs.put(self._db, e.data) if e.kind == "file" else None
                self._db.execute(
                    "INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (snapshot_id, _path_to_sql(e.path), e.kind, e.mode, digest,
                     _path_to_sql(e.link)),
                )
        return snapshot_id

    @_damage_is_an_input_error
    def snapshots(self) -> list[tuple[int, str, list[Entry]]]:
        """Every snapshot as (id, original root, entries)."""
        with self._lock:
            roots = self._db.execute("SELECT id, root FROM snapshots ORDER BY id").fetchall()
            out = []
            for snapshot_id, root in roots:
                rows = self._db.execute(
                    "SELECT path, kind, mode, blob, link FROM snapshot_entries"
                    " WHERE snapshot_id = ? ORDER BY path", (snapshot_id,)).fetchall()
                entries = [Entry(_path_from_sql(path), kind, mode,
                                 blobs.get(self._db, blob, self._cache) if blob else b"",
                                 _path_from_sql(link or ""))
                           for path, kind, mode, blob, link in rows]
                out.append((snapshot_id, _path_from_sql(root), entries))
        return out

    def set_outcome_changes(self, snapshot_id: int, changes: Sequence[Change],
                            contents: Mapping[str, bytes] | None = None) -> None:
        """Store the recorded outcome of one snapshot. ``contents`` (path to
        bytes) keeps the resulting bytes of added or modified files, under
        their ``after_hash``, compressed against the bytes before: a replay
        compares its own result with them (:meth:`content`)."""
        contents = contents or {}
        with self._lock, self._db:
            for c in changes:
                data = contents.get(c.path)
                if data is not None and c.after_hash is not None:
                    blobs.put(self._db, data, ref=c.before_hash)
                self._db.execute(
                    "INSERT INTO outcome_changes (snapshot_id, path, change, detail) "
                    "VALUES (?,?,?,?)",
                    (snapshot_id, _path_to_sql(c.path), c.change, json.dumps(c.to_json())),
                )

    @_damage_is_an_input_error
    def content(self, digest: str | None) -> bytes | None:
        """Bytes stored under ``digest`` (sha256 hex), or None when absent."""
        if digest is None:
            return None
        with self._lock:
            try:
                return blobs.get(self._db, digest, self._cache)
            except KeyError:
                return None

    @_damage_is_an_input_error
    def outcome_changes(self) -> dict[int, list[ChangeJSON]]:
        """The recorded outcome: per snapshot id, its changes (Change.to_json)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT snapshot_id, detail FROM outcome_changes ORDER BY rowid").fetchall()
        out: dict[int, list[ChangeJSON]] = {}
        for snapshot_id, detail in rows:
            out.setdefault(snapshot_id, []).append(json.loads(detail))
        return out

    # -- replays -----------------------------------------------------------

    def start_replay(self, replay_id: str, mode: str, settings: ReplaySettingsJSON) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO replays (id, started_at_ns, mode, settings) VALUES (?, ?, ?, ?)",
                (replay_id, time.time_ns(), mode, json.dumps(settings)),
            )

    def add_replay_request(
        self,
        replay_id: str,
        idx: int,
        kind: ReplayKind,
        seq: int | None,
        served: bool,
        method: bytes,
        target: bytes,
        detail: RequestDetail,
    ) -> None:
        """Write one request's outcome as soon as it is decided."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO replay_requests (replay_id, idx, kind, seq, served, method, target,"
                " decided_at_ns, detail) VALUES (?,?,?,?,?,?,?,?,?)",
                (replay_id, idx, kind, seq, int(served), method, target, time.time_ns(),
                 json.dumps(detail)),
            )

    def finish_replay(
        self,
        replay_id: str,
        exit_status: int | None,
        stdout: bytes,
        stderr: bytes,
        outcome: Outcome,
    ) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE replays SET ended_at_ns = ?, exit_status = ?, stdout = ?, stderr = ?,"
                " outcome = ? WHERE id = ?",
                (time.time_ns(), exit_status, stdout, stderr, json.dumps(outcome), replay_id),
            )

    @_damage_is_an_input_error
    def replays(self) -> list[ReplayRecord]:
        """Every replay, oldest first: id, started/ended ns, mode, settings, outcome."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, started_at_ns, ended_at_ns, mode, settings, exit_status, outcome"
                " FROM replays ORDER BY started_at_ns, rowid"
            ).fetchall()
        return [
            {
                "id": rid,
                "started_at_ns": started,
                "ended_at_ns": ended,
                "mode": mode,
                "settings": json.loads(settings),
                "exit_status": exit_status,
                "outcome": json.loads(outcome) if outcome else None,
            }
            for rid, started, ended, mode, settings, exit_status, outcome in rows
        ]

    @_damage_is_an_input_error
    def replay_requests(self, replay_id: str) -> list[ReplayRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT idx, kind, seq, served, method, target, decided_at_ns, detail"
                " FROM replay_requests WHERE replay_id = ? ORDER BY idx",
                (replay_id,),
            ).fetchall()
        return [
            {
                "index": idx,
                "kind": kind,
                "seq": seq,
                "served": bool(served),
                "method": bytes(method).decode("latin-1"),
                "target": bytes(target).decode("latin-1"),
                "decided_at_ns": decided,
                "detail": json.loads(detail),
            }
            for idx, kind, seq, served, method, target, decided, detail in rows
        ]


def open_run(path: Path | str) -> RunFile:
    """Open the run file at ``path``. Raises RunFileError / SchemaTooNew."""
    return RunFile.open(Path(path))
