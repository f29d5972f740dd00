"""Opening, writing and reading run files (DESIGN.md, "The run file").

Owns the mapping between model values and rows. Each exchange is written in
one transaction when it ends (``BEGIN IMMEDIATE`` … ``COMMIT``), so a
SIGKILL loses at most the exchanges in flight and a write that fails half
way leaves nothing of its exchange. While a run is being written the file
is in WAL mode; a clean close checkpoints it back into one self-contained
file.

A run file is untrusted input: it is opened read-only, its schema must be
exactly one wiretape wrote before anything else is read, nothing read from
it is executed, every stored value is checked before it becomes a model
value, and every body is read back within bounds (``store.blobs``). A
replay's log is kept beside the run, never in it (``store.replaylog``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, cast, get_type_hints

import zstandard

from wiretape.errors import RunFileError, RunFileWriteError, write_failure_reason
from wiretape.model import (
    ConnectReportJSON,
    Ending,
    Exchange,
    Frame,
    Headers,
    Message,
    Opcode,
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
from wiretape.snapshot.restore import check_entries, check_path, check_roots
from wiretape.snapshot.tree import Change, ChangeJSON, Entry
from wiretape.store import blobs, schema, shapes
from wiretape.store.database import connect_read, connect_write, transaction
from wiretape.store.locate import replay_log_path
from wiretape.store.replaylog import LogError, ReplayLog, replay_record, request_row

_ENDINGS = tuple(e.value for e in Ending)
_OPCODES = tuple(o.value for o in Opcode)
#: Bytes committed (about) after which the background thread checkpoints
#: the WAL (SQLite's own default is 1000 pages: about 4 MiB).
_FOLD_BYTES = 4 << 20
#: What an exchange's rows add besides its bodies (about).
_ROW_BYTES = 2048
#: Bodies below this size (bytes) are compressed by the commit itself even
#: when the rest is compressed later (``write_exchange``): that costs less
#: than a later transaction. A request this small is compressed on its own.
_COMPRESS_NOW = 16 * 1024
#: A WebSocket message payload of at least this many bytes is stored as a
#: body (content-addressed, compressed: ``store.blobs``) and its row names
#: it; a smaller one is kept in its row as it is (a body's row and hash
#: would cost more than compressing it saves).
MESSAGE_INLINE_MAX = 1024
_KINDS = ("file", "dir", "symlink")
_CHANGES = ("added", "modified", "deleted")


def _path_to_sql(path: str) -> str | bytes:
    """A file name for a TEXT column: as text when it is UTF-8, else its
    bytes as a BLOB (a name that is not UTF-8 comes from the file system
    decoded with surrogateescape; ``os.fsencode`` gives back its bytes)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape")
    return path


def _stored_path(value: object, what: str) -> str:
    """A file name as :func:`_path_to_sql` stored it: text, or the bytes of
    a name that is not UTF-8. Raises shapes.StoredValueError for anything
    else."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return shapes.text(value, what)


def _headers_to_json(headers: Headers) -> str:
    return json.dumps([[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers])


def _headers_from_json(value: object, what: str) -> Headers:
    pairs = shapes.json_value(value, list[list[str]], what)
    out = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise shapes.StoredValueError(f"{what}[{i}] is not a name and a value")
        try:
            out.append((pair[0].encode("latin-1"), pair[1].encode("latin-1")))
        except UnicodeEncodeError as exc:
            raise shapes.StoredValueError(f"{what}[{i}] is not latin-1 text") from exc
    return tuple(out)


P = ParamSpec("P")
R = TypeVar("R")

#: What reading a damaged or hostile file may raise below the run file's
#: own checks; each becomes one RunFileError line naming the file.
_DAMAGE = (sqlite3.DatabaseError, zstandard.ZstdError, KeyError, ValueError, TypeError,
           OverflowError, RecursionError, UnicodeError, LogError)


def _one_line(text: str) -> str:
    """``text`` with control characters (stored text quoted in a message may
    hold any) written as escapes: an error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _as_input_error(path: Path, exc: BaseException) -> RunFileError:
    if isinstance(exc, LogError | blobs.UnknownCodecError):
        return RunFileError(path, _one_line(str(exc)))
    if isinstance(exc, KeyError):
        reason = f"it names a body it does not hold ({str(exc.args[0])[:12]!r})"
    elif isinstance(exc, sqlite3.DatabaseError | zstandard.ZstdError | ValueError):
        reason = str(exc)
    else:
        reason = f"a stored value cannot be read ({type(exc).__name__}: {exc})"
    return RunFileError(path, _one_line(f"{reason}; the file is damaged or was edited (record "
                                        "the run again, or ask its author for the original)"))


def _damage_is_an_input_error(
        method: Callable[Concatenate[RunFile, P], R]) -> Callable[Concatenate[RunFile, P], R]:
    """Turn a damaged page, a bad stored value or a body that cannot be read
    back, met after opening, into a RunFileError naming the file, instead of
    a traceback."""

    @functools.wraps(method)
    def wrapper(self: RunFile, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except RunFileError:
            raise
        except _DAMAGE as exc:
            raise _as_input_error(self.path, exc) from exc

    return wrapper


def _meta_shapes() -> dict[str, Any]:
    hints = get_type_hints(RunMeta)
    hints["extra"] = dict[str, str]
    return hints


_META = _meta_shapes()


@dataclass(frozen=True)
class SpooledBody:
    """A response body staged in parts (:meth:`RunFile.stage_part`):
    ``token`` names its parts (32 hex digits), ``sizes`` their bytes in
    order (each at least 1), ``sha256`` the hex digest of the whole."""

    token: str
    sizes: tuple[int, ...]
    sha256: str

    @property
    def size(self) -> int:
        return sum(self.sizes)


class RunFile:
    """A run file opened for reading, or created for writing.

    Use ``RunFile.create(path, info)`` to start a recording and
    ``open_run(path)`` for everything else: it opens the file read-only.
    All methods are safe to call from one thread at a time (a lock
    serialises them). A file being recorded has a thread of its own that
    compresses what was committed raw (``write_exchange``) and checkpoints
    the WAL; ``close`` waits for it.
    """

    def __init__(self, path: Path, db: sqlite3.Connection, *, writable: bool,
                 replay_logs: Path | None = None) -> None:
        self.path = path
        self._db = db
        self._writable = writable
        self._replay_logs = replay_logs
        self._lock = threading.RLock()
        self._cache: dict[str, bytes] = {}
        #: the last request body committed (hash, bytes): the next one's reference
        self._last_request: tuple[str, bytes] | None = None
        self._packer = blobs.Packer()
        self._background_packer = blobs.Packer(blobs.FAST_LEVEL)
        #: the thread compressing bodies committed raw (write_exchange), and
        #: the last thing queued on it
        self._background: concurrent.futures.ThreadPoolExecutor | None = None
        self._queued: concurrent.futures.Future[None] | None = None
        #: bodies committed raw, not yet handed to it (``start_compressing``):
        #: per exchange, (hash, bytes, reference) of each, its request, and
        #: that request's number (in commit order)
        self._deferred: list[tuple[list[tuple[str, bytes, blobs.Reference | None]],
                                   tuple[str, bytes], int]] = []
        #: request bodies committed with ``compress_later``, and the number of
        #: the one last made the reference of the next (``_refer_to``)
        self._requests = 0
        self._referred = 0
        #: guards the five above: held only to hand work over, never by a write
        self._deferred_lock = threading.Lock()
        self._closing = False
        self._checkpoints_deferred = False
        #: the background thread's own connection, for checkpoints (``_fold``),
        #: and the bytes committed since its last one (guarded by _deferred_lock)
        self._folder: sqlite3.Connection | None = None
        self._unfolded = 0
        #: why a background compression failed (its bodies stay raw)
        self.background_failures: list[str] = []
        self._log: ReplayLog | None = None
        self._content_hash: str | None = None
        self._log_note: str | None = None

    # -- opening -----------------------------------------------------------

    @classmethod
    def create(cls, path: Path, info: RunInfo) -> RunFile:
        """Create a new run file at ``path`` (its directory is made).

        The file appears only once its schema and ``info`` are in it: it is
        made under a hidden name beside ``path`` and linked into place, so a
        process killed while creating leaves no half-made run. Raises
        RunFileError when the path exists or cannot be written.
        """
        path = Path(path)
        exists = RunFileError(
            path, "it already exists and is never overwritten; choose another -o path")
        if path.exists() or path.is_symlink():
            raise exists
        partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
            db = connect_write(partial)
            try:
                # Pages a body left when it was compressed after its commit
                # are given back when the file is closed (``close``).
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                with transaction(db):
                    schema.create(db)
                    _write_meta(db, _info_meta(info))
                    _write_origins(db, info.origins)
            finally:
                db.close()
            _link_new(partial, path)
            db = connect_write(path)
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
        except FileExistsError as exc:
            raise exists from exc
        except (OSError, sqlite3.Error) as exc:
            raise RunFileError(path, getattr(exc, "strerror", None) or str(exc)) from exc
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
        return cls(path, db, writable=True)

    @classmethod
    def open(cls, path: Path, *, replay_logs: Path | None = None,
             write: bool = False) -> RunFile:
        """Open an existing run file to read it. Nothing is written to it;
        an older schema version is read as it is (``schema.later_tables``).
        ``write``: to write it as well (a file wiretape has just made, such
        as a scrubbed copy): its schema is checked, and an older one
        migrated, in one transaction.

        ``replay_logs``: the folder of replay logs (default
        ``store.locate.replay_logs_dir()``, looked up when first needed).
        Raises RunFileError (or SchemaTooNew) when the file
        cannot be read, or is not exactly what wiretape writes.
        """
        path = Path(path)
        if not path.is_file():
            raise RunFileError(path, "no such file")
        try:
            with open(path, "rb") as fh:
                magic = fh.read(16)
            if magic != b"SQLite format 3\x00":
                raise RunFileError(path, "it is not a wiretape run file (not SQLite)")
            if write:
                db = connect_write(path)
                try:
                    schema.migrate(db, path)
                    with transaction(db):  # what a killed recording left staged
                        blobs.sweep_parts(db)
                except BaseException:
                    db.close()
                    raise
                return cls(path, db, writable=True, replay_logs=replay_logs)
            db = connect_read(path)
            try:
                version = schema.check(db, path)
                for stmt in schema.later_tables(version):
                    db.execute(stmt)
                db.execute("PRAGMA query_only = ON")
            except BaseException:
                db.close()
                raise
        except RunFileError:
            raise
        except (OSError, sqlite3.Error) as exc:
            raise RunFileError(path, f"{getattr(exc, 'strerror', None) or exc}; the file may "
                                     "be damaged") from exc
        return cls(path, db, writable=False, replay_logs=replay_logs)

    def prepare_for_writes(self) -> None:
        """Open this run's replay log for writing (a replay is about to
        start). The run file itself is never written by a replay: the log
        lives in the folder of replay logs (``store.replaylog``). When that
        cannot be written (or holds a log wiretape did not write), the log
        is kept in memory for this process only (:meth:`replay_log_notes`
        says so)."""
        with self._lock:
            log = self._replay_log()
            try:
                log.check_writable()
            except LogError as exc:
                self._log = ReplayLog(None, log.run_hash)
                self._log_note = (f"wiretape: this replay's verdict is not kept: {exc}; "
                                  "set WIRETAPE_HOME to a folder you can write")

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection, for a copy made table by table
        (``store.rewrite``): read-only, and its schema checked, when the
        file was opened to read."""
        return self._db

    def replay_log_notes(self) -> tuple[str, ...]:
        """What to tell about where this run's replay log went, if anything."""
        return (self._log_note,) if self._log_note else ()

    def close(self, *, compact: bool = False) -> None:
        """Close; with ``compact`` (a file being written) fold the WAL back
        so the file stands alone. Waits first for the bodies still being
        compressed (:meth:`settle`); a file being written then loses the
        staged parts of any body never committed."""
        self.settle()
        with self._deferred_lock:
            self._closing = True
        if self._background is not None:
            self._background.shutdown(wait=True)
        if self._folder is not None:
            self._folder.close()
        with self._lock:
            if self._writable:
                with contextlib.suppress(RunFileWriteError):
                    self.sweep()
            if compact and self._writable:
                try:
                    # The free pages (raw bodies since compressed) go first
                    # (a script: each step of this pragma frees one page).
                    self._db.executescript("PRAGMA incremental_vacuum;")
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    self._db.execute("PRAGMA journal_mode = DELETE")
                except sqlite3.Error:
                    pass  # another reader holds it; the WAL is folded in on its close
            if self._log is not None:
                self._log.close()
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

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction on a file being written: all of it or none."""
        if not self._writable:
            raise RunFileError(self.path, "it was opened for reading; a run file is written "
                                          "only while it is recorded")
        with self._lock:
            try:
                with transaction(self._db) as db:
                    yield db
            except sqlite3.Error as exc:  # all of this write is rolled back
                raise RunFileWriteError(self.path, write_failure_reason(exc)) from exc

    # -- metadata ----------------------------------------------------------

    def _set_meta(self, values: RunMeta) -> None:
        with self._write() as db:
            _write_meta(db, values)

    def set_origins(self, origins: Sequence[Origin]) -> None:
        with self._write() as db:
            db.execute("DELETE FROM origins")
            _write_origins(db, origins)

    def set_intercept(self, hosts: Sequence[str]) -> None:
        """Mark the run as recorded with TLS interception of ``hosts``."""
        self._set_meta({"intercept": list(hosts)})

    def set_credential_env(self, names: Sequence[str]) -> None:
        """The names of the variables that carried the agent's credentials
        (RunInfo.credential_env); never their values."""
        self._set_meta({"credential_env": list(names)})

    def add_extra(self, values: Mapping[str, str]) -> None:
        """Add ``values`` to the run's ``extra`` metadata (RunInfo.extra:
        strings), keeping what is there."""
        extra = dict(self._meta().get("extra", {}))
        extra.update(values)
        self._set_meta({"extra": extra})

    def set_connect_report(self, report: ConnectReportJSON) -> None:
        """What the forward proxy saw (ConnectReport.to_json): intercepted
        hosts, tunnels (host, port, byte counts), rejected certificates."""
        self._set_meta({"connect": report})

    @_damage_is_an_input_error
    def connect_report(self) -> ConnectReportJSON | None:
        report: ConnectReportJSON | None = self._meta().get("connect")
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

    def _meta(self) -> RunMeta:
        """The meta table, each value checked against RunMeta."""
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM meta").fetchall()
        meta: dict[str, Any] = {}
        for key, value in rows:
            name = shapes.text(key, "a metadata key")
            meta[name] = shapes.json_value(value, _META.get(name, Any), f"metadata {name!r}")
        notes = meta.get("extra", {}).get("import_notes")
        if notes is not None:
            shapes.json_value(notes, list[str], "metadata 'extra.import_notes'")
        return cast(RunMeta, meta)

    @_damage_is_an_input_error
    def info(self) -> RunInfo:
        meta = self._meta()
        with self._lock:
            rows = self._db.execute(
                "SELECT name, upstream, port, env_vars FROM origins ORDER BY rowid").fetchall()
        origins = tuple(
            Origin(shapes.text(name, "an origin's name"),
                   shapes.text(upstream, f"origin {name!r}: its upstream"),
                   shapes.integer(port, f"origin {name!r}: its port", 0, 65535),
                   tuple(shapes.json_value(env, list[str], f"origin {name!r}: its variables")))
            for name, upstream, port, env in rows)
        if "run_id" not in meta:
            raise RunFileError(self.path, "it has no run metadata; the file is damaged (its "
                                          "recording may have been killed as it began)")
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
            allow=tuple(name for name in meta.get("allow", ()) if name in _ALLOWANCES),
            credential_env=tuple(shapes.variable_name(name, "metadata 'credential_env'")
                                 for name in meta.get("credential_env", ())),
        )

    # -- exchanges ---------------------------------------------------------

    def pack_request(self, body: bytes, digest: str) -> blobs.Packed | None:
        """A request body (whose sha256 hex is ``digest``) compressed ahead
        of its commit against the request body before it
        (:meth:`blobs.Packer.pack_ahead`; a growing conversation: spliced,
        about its new bytes, in well under a millisecond), for
        ``write_exchange(..., request_packed=)``; None when that does not
        help. Takes no lock a write holds: for a worker thread, as soon as
        the request is in."""
        try:
            return self._background_packer.pack_ahead(body, digest)
        except (zstandard.ZstdError, MemoryError):
            return None

    def write_exchange(self, exchange: Exchange, redactions: Sequence[Redaction] = (), *,
                       compress_later: bool = False, request_digest: str | None = None,
                       request_packed: blobs.Packed | None = None) -> None:
        """Commit one ended exchange, already redacted, in one transaction:
        its bodies, its row, its frames and its redactions are all in the
        file, or (the write failed) none of them.

        ``compress_later``: the bodies this stores are committed raw (the
        cheapest write, for a commit something waits for; a body under
        16 KiB is compressed at once, as cheap) and compressed
        afterwards on this file's background thread (from
        :meth:`start_compressing` on), one transaction each, under the same
        hashes (:meth:`settle` waits for that; :meth:`close` does). A
        process killed before leaves a correct, bigger file.
        ``request_digest``: the sha256 hex of the request's body, when the
        caller has it; ``request_packed``: that body as :meth:`pack_request`
        made it (stored so when its reference is as it was, else raw).
        Raises RunFileWriteError.
        """
        resp = exchange.response
        resp_body = b"".join([f.data for f in resp.frames]) if resp is not None else b""

        def put_response(db: sqlite3.Connection,
                         later: list[tuple[str, bytes, blobs.Reference | None]]) -> str | None:
            if resp is None:
                return None
            return self._put_body(db, resp_body, later, compress_later)

        frames = ((f.offset_ns, len(f.data)) for f in resp.frames) if resp is not None else ()
        self._commit(exchange, redactions, put_response, frames, len(resp_body), compress_later,
                     request_digest, request_packed)

    def _commit(self, exchange: Exchange, redactions: Sequence[Redaction],
                put_response: Callable[[sqlite3.Connection,
                                        list[tuple[str, bytes, blobs.Reference | None]]],
                                       str | None],
                frames: Iterable[tuple[int, int]], response_bytes: int, compress_later: bool,
                digest: str | None, packed: blobs.Packed | None) -> None:
        """One exchange in one transaction: its request body (as
        :meth:`write_exchange` says), its response body (``put_response``,
        which adds what it committed raw to the list it is given), its row,
        frames and redactions. Raises RunFileWriteError."""
        later: list[tuple[str, bytes, blobs.Reference | None]] = []
        if compress_later:
            self._defer_checkpoints()
        with self._write() as db:
            req_blob, written, final = self._put_request(db, exchange.request, later,
                                                         compress_later, digest, packed)
            resp_blob = put_response(db, later)
            payloads = [self._put_payload(db, m.payload, later, compress_later)
                        for m in exchange.messages]
            _insert_exchange(db, exchange, req_blob, resp_blob, frames, redactions, payloads)
        self._committed(req_blob, exchange.request.body, later, compress_later,
                        written + response_bytes + sum(len(m.payload) for m in exchange.messages),
                        final)

    def _put_payload(self, db: sqlite3.Connection, payload: bytes,
                     later: list[tuple[str, bytes, blobs.Reference | None]],
                     compress_later: bool) -> str | None:
        """Store a WebSocket message's payload of at least
        ``MESSAGE_INLINE_MAX`` bytes as a body, in the caller's transaction,
        as a response body is (``compress_later``: a large one committed raw,
        added to ``later``); its hash, or None for a payload kept in its row."""
        if len(payload) < MESSAGE_INLINE_MAX:
            return None
        return self._put_body(db, payload, later, compress_later)

    def _put_body(self, db: sqlite3.Connection, data: bytes,
                  later: list[tuple[str, bytes, blobs.Reference | None]],
                  compress_later: bool) -> str:
        """Store a response body or a large message payload in the caller's
        transaction; its hash. ``compress_later``: under ``_COMPRESS_NOW``
        bytes compressed at once with the background packer (cheaper than a
        later transaction), else committed raw and added to ``later``;
        otherwise compressed now with this file's packer."""
        if compress_later and len(data) < _COMPRESS_NOW:
            return blobs.put(db, data, packer=self._background_packer)
        if compress_later:
            digest = blobs.blob_hash(data)
            if blobs.put_raw(db, data, digest):
                later.append((digest, data, None))
            return digest
        return blobs.put(db, data, packer=self._packer)

    def _defer_checkpoints(self) -> None:
        """From the first ``compress_later`` write on, checkpoints are the
        background thread's (``_fold``): a commit never does one."""
        if not self._checkpoints_deferred:
            with self._lock:
                self._db.execute("PRAGMA wal_autocheckpoint = 0")
                self._checkpoints_deferred = True

    def _put_request(self, db: sqlite3.Connection, req: Request,
                     later: list[tuple[str, bytes, blobs.Reference | None]],
                     compress_later: bool, digest: str | None,
                     packed: blobs.Packed | None) -> tuple[str, int, int | None]:
        """Store a request body in the caller's transaction, as
        :meth:`write_exchange` says; a body to compress afterwards is added
        to ``later``. Returns its hash, about the bytes it adds to the WAL,
        and the depth of its reference chain when that is final (it was
        stored packed ahead: the next body may refer to it at once)."""
        previous = self._last_request
        if not compress_later:
            return blobs.put(db, req.body, ref=previous[0] if previous else None,
                             ref_data=previous[1] if previous else None,
                             packer=self._packer), len(req.body), None
        req_blob = digest or blobs.blob_hash(req.body)
        if (packed is not None and packed.digest == req_blob and packed.size == len(req.body)
                and blobs.put_packed(db, packed)):
            # stored as it will stay (or it was stored already: its depth is read)
            depth = blobs.ref_depth(db, req_blob)
            return req_blob, len(packed.payload), depth
        if len(req.body) < _COMPRESS_NOW:  # (on its own: no reference to wait for)
            return blobs.put(db, req.body, packer=self._background_packer), len(req.body), None
        if blobs.put_raw(db, req.body, req_blob) and len(req.body) >= blobs.MIN_COMPRESS:
            ref = blobs.Reference(previous[0], previous[1], 0) if previous is not None else None
            later.append((req_blob, req.body, ref))
        return req_blob, len(req.body), None

    def _committed(self, req_blob: str, req_body: bytes,
                   later: list[tuple[str, bytes, blobs.Reference | None]],
                   compress_later: bool, written: int, final: int | None) -> None:
        """After a commit: only a committed body is the reference of the
        next one: at once when its depth is ``final``, else once the
        background thread has compressed it (its depth is then known); what
        was committed raw waits for :meth:`start_compressing`."""
        self._last_request = (req_blob, req_body)
        if compress_later:
            with self._deferred_lock:
                self._requests += 1
                if final is not None:
                    self._refer_to(self._requests, req_blob, req_body, final)
                    if later:
                        self._deferred.append((later, self._last_request, 0))
                elif later or len(req_body) >= _COMPRESS_NOW:  # (a reference to make ready)
                    self._deferred.append((later, self._last_request, self._requests))
                self._unfolded += written + _ROW_BYTES

    def _refer_to(self, number: int, digest: str, body: bytes, depth: int) -> None:
        """Make request body ``number`` (``digest``, ``body``, its chain
        ``depth`` as stored) the reference :meth:`pack_request` packs the
        next body against, unless a later one is already (the background
        thread may come to an earlier one after a commit made a later one
        the reference). Cheap; the caller holds ``_deferred_lock``."""
        if number > self._referred:
            self._referred = number
            self._background_packer.prepare(digest, body, depth)

    def start_compressing(self) -> None:
        """Start compressing, on the background thread, the bodies the
        writes with ``compress_later`` committed raw so far, in the order
        they were committed. Cheap and never waits for a write: called on
        the event loop once the exchange's end is sent (the compression
        does not compete with that). ``settle`` and ``close`` start it too."""
        with self._deferred_lock:
            jobs, self._deferred = self._deferred, []
            if not jobs or self._closing:
                return
            if self._background is None:
                self._background = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="wiretape-compress")
            self._queued = self._background.submit(self._compress_all, jobs)

    def _compress_all(self, jobs: list[tuple[list[tuple[str, bytes, blobs.Reference | None]],
                                             tuple[str, bytes], int]]) -> None:
        for bodies, request, number in jobs:
            self._compress(bodies, request, number)

    def _compress(self, bodies: list[tuple[str, bytes, blobs.Reference | None]],
                  request: tuple[str, bytes], number: int) -> None:
        """On the background thread: compress (holding no lock), then swap
        each raw body for its compressed form in one short transaction.
        Bodies are queued in commit order, so a body's reference was
        compressed before it: the depth read here is final. A failure
        leaves the body raw: the file stays correct, only bigger; a write
        that fails for good shows in the next commit."""
        try:
            packed = []
            for digest, data, ref in bodies:
                if ref is not None:
                    with self._lock:
                        depth = blobs.ref_depth(self._db, ref.digest)
                    ref = (blobs.Reference(ref.digest, ref.data, depth)
                           if depth is not None else None)
                packed.append((digest, len(data), self._background_packer.pack(data, ref)))
            if packed:
                with self._write() as db:
                    for digest, size, result in packed:
                        blobs.recompress(db, digest, size, result)
            # The next request body is compressed against this one (request
            # ``number``; 0: not a reference), now that its depth is known.
            if number:
                with self._lock:
                    depth = blobs.ref_depth(self._db, request[0])
                with self._deferred_lock:
                    self._refer_to(number, request[0], request[1],
                                   blobs.MAX_REF_DEPTH if depth is None else depth)
            with self._deferred_lock:
                fold, self._unfolded = self._unfolded >= _FOLD_BYTES, (
                    0 if self._unfolded >= _FOLD_BYTES else self._unfolded)
            if fold:
                self._fold()
        except Exception as exc:  # whatever it was, the bodies stay raw (and correct)
            self.background_failures.append(f"{type(exc).__name__}: {exc}")

    def _fold(self) -> None:
        """On the background thread: copy the WAL's pages back into the
        file (a checkpoint), from a connection of its own, waiting for no
        one (``PASSIVE``): the writer's commits never do it (raw bodies
        fill the WAL fast), so the end of a response never waits for it."""
        if self._folder is None:
            self._folder = connect_write(self.path)
        self._folder.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def settle(self) -> None:
        """Wait until every body queued by ``write_exchange(...,
        compress_later=True)`` is compressed (or left raw, its compression
        having failed: ``background_failures``). Blocks: not for the event
        loop."""
        self.start_compressing()
        with self._deferred_lock:
            queued = self._queued
        if queued is not None:
            concurrent.futures.wait([queued])

    # -- a response body too large to hold: staged in parts ----------------

    def stage_part(self, token: str, index: int, size: int, codec: str,
                   payload: bytes) -> None:
        """Write one part (``blobs.compress_part``'s codec and payload,
        ``size`` bytes uncompressed) of a response body being spooled as
        ``token``, in its own transaction. Nothing reaches it until
        :meth:`write_spooled_exchange` names it: a reader never sees it, and
        a crash before then leaves only rows :meth:`sweep` removes. Raises
        RunFileWriteError."""
        with self._write() as db:
            blobs.put_part(db, token, index, size, codec, payload)

    def write_spooled_exchange(self, exchange: Exchange, redactions: Sequence[Redaction],
                               body: SpooledBody, frames: Iterable[tuple[int, int]], *,
                               compress_later: bool = False, request_digest: str | None = None,
                               request_packed: blobs.Packed | None = None) -> None:
        """Commit one ended exchange whose response body was staged in
        parts (``body``), in one transaction, as :meth:`write_exchange`
        does: ``exchange`` (already redacted) has a response whose frames
        are left out; ``frames`` gives them as (offset_ns, length), in
        order, their lengths adding up to ``body.size``. The request body
        is stored as :meth:`write_exchange` stores it (``compress_later``,
        ``request_digest``, ``request_packed``). Raises RunFileWriteError."""
        if exchange.response is None:
            raise ValueError("a spooled body belongs to a response")
        self._commit(exchange, redactions,
                     lambda db, _: blobs.put_parts(db, body.sha256, body.token, list(body.sizes)),
                     frames, 0, compress_later, request_digest, request_packed)

    def sweep(self, keep: set[str] | frozenset[str] = frozenset()) -> int:
        """Delete staged parts no committed body names (a recording killed
        or failed while a long response streamed), but those of the tokens
        in ``keep``; returns how many. Raises RunFileWriteError."""
        with self._write() as db:
            return blobs.sweep_parts(db, keep)

    @_damage_is_an_input_error
    def exchange_count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM exchanges").fetchone()[0])

    @_damage_is_an_input_error
    def exchanges(self) -> list[Exchange]:
        """Every recorded exchange, in sequence order."""
        return list(self._iter_exchanges())

    def iter_exchanges(self) -> Iterator[Exchange]:
        try:
            yield from self._iter_exchanges()
        except RunFileError:
            raise
        except _DAMAGE as exc:
            raise _as_input_error(self.path, exc) from exc

    def _iter_exchanges(self) -> Iterator[Exchange]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, connection_id, origin, started_at_ns, method, target, http_version,"
                " request_headers, request_body, status, reason, response_http_version,"
                " response_headers, response_body, ending, ttfb_ns, duration_ns, error"
                " FROM exchanges ORDER BY seq"
            ).fetchall()
            frames: dict[int, list[tuple[int, int, int]]] = {}
            for seq, idx, offset_ns, start, length in self._db.execute(
                "SELECT seq, idx, offset_ns, start, length FROM frames ORDER BY seq, idx"
            ):
                what = f"frame {idx} of exchange {seq}"
                frames.setdefault(shapes.integer(seq, "a frame's exchange"), []).append(
                    (shapes.integer(offset_ns, f"{what}: its time offset"),
                     shapes.integer(start, f"{what}: its start", 0),
                     shapes.integer(length, f"{what}: its length", 0)))
            messages = self._message_rows()
        for row in rows:
            yield self._exchange_from_row(row, frames.get(row[0], []), messages.get(row[0], []))

    def _message_rows(self) -> dict[int, list[Sequence[Any]]]:
        """The rows of the WebSocket messages of every exchange that has
        any, by seq, in order (the caller holds the lock); their payloads
        are read when their exchange is built (:meth:`_messages`). Raises
        StoredValueError."""
        out: dict[int, list[Sequence[Any]]] = {}
        for row in self._db.execute(
            "SELECT seq, idx, direction, opcode, offset_ns, size, payload, blob, close_code"
            " FROM messages ORDER BY seq, idx"
        ):
            out.setdefault(shapes.integer(row[0], "a message's exchange"), []).append(row)
        return out

    def _messages(self, rows: list[Sequence[Any]]) -> tuple[Message, ...]:
        """The messages of one exchange from their rows (the caller holds
        the lock), each payload read back within the bounds of a body
        (``blobs.get``) and checked against its row's size. Raises
        StoredValueError, BlobError."""
        out: list[Message] = []
        for seq, idx, direction, opcode, offset_ns, size, inline, digest, code in rows:
            what = f"message {idx} of exchange {seq}"
            side = shapes.one_of(direction, ("client", "server"), f"{what}: its direction")
            out.append(Message(
                "client" if side == "client" else "server",
                Opcode(shapes.one_of(opcode, _OPCODES, f"{what}: its opcode")),
                self._payload(what, size, inline, digest),
                shapes.integer(offset_ns, f"{what}: its time offset"),
                shapes.optional_integer(code, f"{what}: its close code", 0, 4999)))
        return tuple(out)

    def _payload(self, what: str, size: object, inline: object, digest: object) -> bytes:
        """A message's payload as its row gives it: in the row, or in the
        body the row names, never both, and of the row's size. Raises
        StoredValueError, BlobError."""
        size = shapes.integer(size, f"{what}: its size", 0, blobs.MAX_BLOB_BYTES)
        if digest is None:
            payload = shapes.blob(inline, f"{what}: its payload")
        elif inline is not None:
            raise shapes.StoredValueError(f"{what}: it holds its payload and names a body too")
        else:
            name = shapes.text(digest, f"{what}: its payload's body")
            try:
                payload = blobs.get(self._db, name, self._cache)
            except KeyError:
                raise shapes.StoredValueError(
                    f"{what}: its payload is in the body {name[:12]!r}, which the file does "
                    "not hold") from None
        if len(payload) != size:
            raise shapes.StoredValueError(
                f"{what}: it says its payload is {size} bytes but {len(payload)} are stored")
        return payload

    def _exchange_from_row(
        self, row: Sequence[Any], frame_rows: list[tuple[int, int, int]],
        message_rows: list[Sequence[Any]],
    ) -> Exchange:
        # ``row`` is a row of the exchanges table as SQLite gives it (Any):
        # a damaged or hostile file may hold any type in any column; so are
        # ``message_rows``, its rows of the messages table.
        (seq, conn, origin, started, method, target, version, req_headers, req_blob, status,
         reason, resp_version, resp_headers, resp_blob, ending, ttfb, duration, error) = row
        seq = shapes.integer(seq, "an exchange's sequence number", 0)
        what = f"exchange {seq}"
        with self._lock:
            body = blobs.get(self._db, shapes.text(req_blob, f"{what}: its request body"),
                             self._cache)
            response = None
            if status is not None:
                resp_body = blobs.get(
                    self._db, shapes.text(resp_blob, f"{what}: its response body"), self._cache)
                frames = []
                for offset_ns, start, length in frame_rows:
                    if start + length > len(resp_body):
                        raise shapes.StoredValueError(
                            f"{what}: a frame reaches past its body's {len(resp_body)} bytes")
                    frames.append(Frame(offset_ns, resp_body[start : start + length]))
                response = Response(
                    status=shapes.integer(status, f"{what}: its status", 100, 999),
                    reason=shapes.optional_blob(reason, f"{what}: its reason") or b"",
                    headers=_headers_from_json(resp_headers, f"{what}: its response headers"),
                    frames=tuple(frames),
                    http_version=(shapes.optional_blob(resp_version, f"{what}: its response "
                                                                      "version") or b"1.1"),
                )
            messages = self._messages(message_rows)
        return Exchange(
            seq=seq,
            connection_id=shapes.integer(conn, f"{what}: its connection"),
            origin=shapes.text(origin, f"{what}: its origin"),
            started_at_ns=shapes.integer(started, f"{what}: its start"),
            request=Request(
                method=shapes.blob(method, f"{what}: its method"),
                target=shapes.blob(target, f"{what}: its target"),
                headers=_headers_from_json(req_headers, f"{what}: its request headers"),
                body=body,
                http_version=shapes.blob(version, f"{what}: its HTTP version"),
            ),
            response=response,
            ending=Ending(shapes.one_of(ending, _ENDINGS, f"{what}: its ending")),
            ttfb_ns=shapes.optional_integer(ttfb, f"{what}: its time to first byte"),
            duration_ns=shapes.integer(duration, f"{what}: its duration"),
            error=shapes.optional_text(error, f"{what}: its error"),
            messages=messages,
        )

    @_damage_is_an_input_error
    def redactions(self) -> list[tuple[int | None, Redaction]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, location, name, fingerprint FROM redactions ORDER BY rowid"
            ).fetchall()
        return [
            (shapes.optional_integer(seq, "a redaction's exchange"),
             Redaction(shapes.text(loc, "a redaction's location"),
                       shapes.text(name, "a redaction's name"),
                       shapes.text(fp, "a redaction's fingerprint")))
            for seq, loc, name, fp in rows
        ]

    def add_redactions(self, redactions: Sequence[Redaction], seq: int | None = None) -> None:
        """Store facts of redactions outside an exchange (``seq`` None): the
        command line, output, snapshot files."""
        with self._write() as db:
            db.executemany(
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
        meta = self._meta()
        policy: SnapshotPolicyJSON | None = meta.get("snapshot_policy")
        left_out: dict[str, list[list[str]]] = meta.get("left_out", {})
        return policy, left_out

    def add_scrub(self, scrub: ScrubJSON) -> None:
        """Note one ``wiretape scrub`` of this run."""
        done: list[ScrubJSON] = self._meta().get("scrubbed", [])
        self._set_meta({"scrubbed": [*done, scrub]})

    @_damage_is_an_input_error
    def stored_bytes(self) -> int:
        """Bytes of bodies as stored (compressed), for summaries."""
        with self._lock:
            return blobs.stored_bytes(self._db)

    @_damage_is_an_input_error
    def body_bytes(self) -> int:
        """Bytes of request and response bodies and of WebSocket message
        payloads, as they crossed the wire."""
        with self._lock:
            row = self._db.execute(
                "SELECT coalesce(sum(b.size), 0) FROM exchanges e JOIN blobs b"
                " ON b.hash = e.request_body OR b.hash = e.response_body"
            ).fetchone()
            messages = self._db.execute(
                "SELECT coalesce(sum(size), 0) FROM messages").fetchone()
        return sum(int(value[0]) if type(value[0]) is int else 0 for value in (row, messages))

    # -- snapshots and outcome ---------------------------------------------

    def add_snapshot(self, root: str, entries: Sequence[Entry]) -> int:
        """Store a tree's entries (bodies content-addressed) in one
        transaction; return its id."""
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO snapshots (root, taken_at_ns, files, bytes) VALUES (?, ?, ?, ?)",
                (_path_to_sql(root), time.time_ns(),
                 sum(1 for e in entries if e.kind == "file" and not e.left_out),
                 sum(len(e.data) for e in entries)))
            snapshot_id = int(cur.lastrowid or 0)
            rows = []
            for e in entries:
                if e.left_out:  # its bytes were never read into the snapshot
                    continue
                digest = blobs.put(db, e.data) if e.kind == "file" else None
                rows.append((snapshot_id, _path_to_sql(e.path), e.kind, e.mode, digest,
                             _path_to_sql(e.link)))
            db.executemany(
                "INSERT INTO snapshot_entries (snapshot_id, path, kind, mode, blob, link)"
                " VALUES (?, ?, ?, ?, ?, ?)", rows)
        return snapshot_id

    @_damage_is_an_input_error
    def snapshots(self, *, contents: bool | Callable[[str], bool] = True,
                  ) -> list[tuple[int, str, list[Entry]]]:
        """Every snapshot as (id, original root, entries), each checked as
        a replay would restore it (``snapshot.restore``: safe roots, safe
        paths within the system's limits, links that stay inside their
        tree). ``contents``: whether files come with their bytes (False, or
        a test of the entry's path: to check a run's snapshots without
        reading all its bodies). Raises RunFileError."""
        out = self._snapshots(contents)
        check_roots([root for _, root, _ in out], self.path)
        for _, root, entries in out:
            check_entries(entries, self.path, root)
        return out

    def _snapshots(self, contents: bool | Callable[[str], bool],
                   ) -> list[tuple[int, str, list[Entry]]]:
        wanted = contents if callable(contents) else (lambda _path: bool(contents))
        with self._lock:
            roots = self._db.execute("SELECT id, root FROM snapshots ORDER BY id").fetchall()
            out = []
            for snapshot_id, root in roots:
                sid = shapes.integer(snapshot_id, "a snapshot's id")
                rows = self._db.execute(
                    "SELECT path, kind, mode, blob, link FROM snapshot_entries"
                    " WHERE snapshot_id = ? ORDER BY path", (sid,)).fetchall()
                entries = []
                for path, kind, mode, blob, link in rows:
                    where = f"snapshot {sid} entry {str(path)[:60]!r}"
                    kind = shapes.one_of(kind, _KINDS, f"{where}: its kind")
                    digest = shapes.optional_text(blob, f"{where}: its body")
                    if kind == "file" and digest is None:
                        raise shapes.StoredValueError(f"{where}: a file with no body")
                    name = _stored_path(path, f"snapshot {sid}: an entry's path")
                    entries.append(Entry(
                        name, kind, shapes.integer(mode, f"{where}: its mode", 0, 0o7777),
                        blobs.get(self._db, digest, self._cache) if digest and wanted(name)
                        else b"",
                        _stored_path(link or "", f"{where}: its link")))
                out.append((sid, _stored_path(root, f"snapshot {sid}: its root"), entries))
        return out

    def set_outcome_changes(self, snapshot_id: int, changes: Sequence[Change],
                            contents: Mapping[str, bytes] | None = None) -> None:
        """Store the recorded outcome of one snapshot in one transaction.
        ``contents`` (path to bytes) keeps the resulting bytes of added or
        modified files, under their ``after_hash``, compressed against the
        bytes before: a replay compares its own result with them
        (:meth:`content`)."""
        contents = contents or {}
        with self._write() as db:
            for c in changes:
                data = contents.get(c.path)
                if data is not None and c.after_hash is not None:
                    blobs.put(db, data, ref=c.before_hash)
            db.executemany(
                "INSERT INTO outcome_changes (snapshot_id, path, change, detail) "
                "VALUES (?,?,?,?)",
                [(snapshot_id, _path_to_sql(c.path), c.change, json.dumps(c.to_json()))
                 for c in changes],
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
            sid = shapes.integer(snapshot_id, "a recorded change's snapshot")
            change: ChangeJSON = shapes.json_value(detail, ChangeJSON,
                                                   f"a recorded change of snapshot {sid}")
            # A path the outcome names is a path in the snapshot's tree.
            check_path(change["path"], self.path,
                       what=f"it holds a recorded change of snapshot {sid}")
            out.setdefault(sid, []).append(change)
        return out

    # -- replays (kept in the replay log, beside the run: store.replaylog) ----

    def content_hash(self) -> str:
        """The sha256 of the run file's bytes (and of its WAL, when one is
        beside it): what ties a replay log's entries to this content."""
        with self._lock:
            if self._content_hash is None:
                digest = hashlib.sha256()
                for name in (self.path, Path(f"{self.path}-wal")):
                    try:
                        with open(name, "rb") as fh:
                            while chunk := fh.read(1 << 20):
                                digest.update(chunk)
                    except FileNotFoundError:
                        continue
                self._content_hash = digest.hexdigest()
            return self._content_hash

    def _replay_log(self) -> ReplayLog:
        if self._log is None:
            try:
                run_id = self._meta().get("run_id", "")
            except _DAMAGE as exc:
                raise _as_input_error(self.path, exc) from exc
            content = self.content_hash()
            self._log = ReplayLog(replay_log_path(run_id, content, self._replay_logs), content)
        return self._log

    def start_replay(self, replay_id: str, mode: str, settings: ReplaySettingsJSON, *,
                     serve_only: bool = False) -> None:
        """Write a replay's start to the replay log (not to the run).
        ``serve_only`` (no command of its own: ``serve --replay``,
        ``replaying()``): written with its first decided request, so one
        that answered nobody is never stored."""
        with self._lock:
            log = self._replay_log()
        try:
            log.start(replay_id, mode, settings, self.path, lazy=serve_only)
        except LogError as exc:
            raise RunFileError(self.path, str(exc)) from exc

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
        *,
        decided_at_ns: int | None = None,
    ) -> None:
        """Write one request's outcome to the replay log, decided at
        ``decided_at_ns`` (epoch ns; None: now)."""
        with self._lock:
            log = self._replay_log()
        try:
            log.add_request(replay_id, idx, kind, seq, served, method, target, detail,
                            decided_at_ns=decided_at_ns)
        except LogError as exc:
            raise RunFileError(self.path, str(exc)) from exc

    def finish_replay(
        self,
        replay_id: str,
        exit_status: int | None,
        stdout: bytes,
        stderr: bytes,
        outcome: Outcome,
    ) -> None:
        with self._lock:
            log = self._replay_log()
        try:
            log.finish(replay_id, exit_status, stdout, stderr, outcome)
        except LogError as exc:
            raise RunFileError(self.path, str(exc)) from exc

    @_damage_is_an_input_error
    def replays(self, *, source: Path | None = None) -> list[ReplayRecord]:
        """Every replay of this run, oldest first: id, started/ended ns,
        mode, settings, outcome. Those of the replay log when it has any
        (``source``: only those that replayed the file at that path); else,
        for a run from before replay logs, those kept inside the file
        (never with ``source``: a file cannot vouch for its own replays)."""
        with self._lock:
            logged = self._replay_log().replays(source)
            if logged or source is not None:
                return logged
            rows = self._db.execute(
                "SELECT id, started_at_ns, ended_at_ns, mode, settings, exit_status, outcome"
                " FROM replays ORDER BY started_at_ns, rowid"
            ).fetchall()
            return [replay_record(row, "the run file's") for row in rows]

    @_damage_is_an_input_error
    def replay_requests(self, replay_id: str) -> list[ReplayRow]:
        with self._lock:
            logged = self._replay_log().requests(replay_id)
            if logged is not None:
                return logged
            rows = self._db.execute(
                "SELECT idx, kind, seq, served, method, target, decided_at_ns, detail"
                " FROM replay_requests WHERE replay_id = ? ORDER BY idx",
                (replay_id,),
            ).fetchall()
            return [request_row(row, "the run file's") for row in rows]


def _insert_exchange(db: sqlite3.Connection, exchange: Exchange, req_blob: str,
                     resp_blob: str | None, frames: Iterable[tuple[int, int]],
                     redactions: Sequence[Redaction], payloads: Sequence[str | None]) -> None:
    """The exchange's row, its frames ((offset_ns, length), in order), its
    redactions and its WebSocket messages (``payloads``: per message, the
    hash of the body holding its payload, or None to keep it in the row),
    in the caller's transaction."""
    req, resp = exchange.request, exchange.response
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
        db.executemany(
            "INSERT INTO frames (seq, idx, offset_ns, start, length) VALUES (?, ?, ?, ?, ?)",
            _frame_rows(exchange.seq, frames))
    db.executemany(
        "INSERT INTO redactions (seq, location, name, fingerprint) VALUES (?,?,?,?)",
        [(exchange.seq, r.location, r.name, r.fingerprint) for r in redactions],
    )
    db.executemany(
        "INSERT INTO messages (seq, idx, direction, opcode, offset_ns, size, payload, blob,"
        " close_code) VALUES (?,?,?,?,?,?,?,?,?)",
        [(exchange.seq, idx, m.direction, m.opcode.value, m.offset_ns, len(m.payload),
          m.payload if digest is None else None, digest, m.close_code)
         for idx, (m, digest) in enumerate(zip(exchange.messages, payloads, strict=True))])


def _frame_rows(seq: int, frames: Iterable[tuple[int, int]],
                ) -> Iterator[tuple[int, int, int, int, int]]:
    start = 0
    for idx, (offset_ns, length) in enumerate(frames):
        yield seq, idx, offset_ns, start, length
        start += length


#: The allowance names a run may carry (matching.correspond.ALLOWANCES,
#: which the store does not import); others in a run file are ignored.
_ALLOWANCES = frozenset({"ids", "clock", "key-order", "durations", "paths"})


def _info_meta(info: RunInfo) -> RunMeta:
    return {
        "run_id": info.run_id,
        "wiretape_version": info.wiretape_version,
        "argv": list(info.argv),
        "cwd": info.cwd,
        "env_names": list(info.env_names),
        "started_at_ns": info.started_at_ns,
        "mode": info.mode,
        "extra": info.extra,
        **({"allow": list(info.allow)} if info.allow else {}),
        "credential_env": list(info.credential_env),
    }


def _write_meta(db: sqlite3.Connection, values: RunMeta) -> None:
    db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                   [(key, json.dumps(value)) for key, value in values.items()])


def _write_origins(db: sqlite3.Connection, origins: Sequence[Origin]) -> None:
    db.executemany(
        "INSERT INTO origins (name, upstream, port, env_vars) VALUES (?, ?, ?, ?)",
        [(o.name, o.upstream, o.port, json.dumps(list(o.env_vars))) for o in origins])


def _link_new(partial: Path, path: Path) -> None:
    """Put ``partial`` at ``path``, never over an existing file. Raises
    FileExistsError."""
    try:
        os.link(partial, path)
    except FileExistsError:
        raise
    except OSError:
        # A filesystem without hard links: check, then rename (a race with
        # another process making the same path is then possible).
        if path.exists():
            raise FileExistsError(path) from None
        os.replace(partial, path)


def open_run(path: Path | str, *, replay_logs: Path | None = None) -> RunFile:
    """Open the run file at ``path`` to read it. Raises RunFileError /
    SchemaTooNew."""
    return RunFile.open(Path(path), replay_logs=replay_logs)
