"""What importing a foreign recording (HAR, VCR cassette) into a run needs,
whatever the format: origins named from URLs, bodies cut into frames,
repairs that make a recording servable again, and writing the run.

Every exchange is redacted before it is written (DESIGN.md principle 6),
exactly as a recording is. A repair is never silent: each one is returned
as a note and stored in the run's metadata (``extra["import_notes"]``).
Knows nothing of HAR or YAML.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from wiretape import __version__
from wiretape.matching.documents import decoded_body
from wiretape.model import Exchange, Frame, Headers, Origin, Redaction, Response, RunInfo
from wiretape.origins import KNOWN_ORIGINS
from wiretape.redaction import REDACTED, fingerprint, redact_request, redact_response
from wiretape.store.locate import new_run_id, runs_dir
from wiretape.store.runfile import RunFile

#: A redaction fact about a value that was already the marker is no fact.
_MARKER_PRINTS = frozenset({fingerprint(REDACTED)})


@dataclass(frozen=True)
class Imported:
    path: Path
    run_id: str
    exchanges: int
    notes: tuple[str, ...]


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme://host[:port], host, request-target) of an absolute URL; the
    fragment is dropped (it never reaches the wire)."""
    parts = urlsplit(url.split("#", 1)[0])
    base = f"{parts.scheme or 'http'}://{parts.netloc}"
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return base, parts.hostname or parts.netloc, target


#: Where each known client library appends its own path to its base URL:
#: (path ending, origin name, what the library appends). An origin on an
#: unknown host whose requests end so is served through that library's
#: variables, with the base path the library expects.
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("/chat/completions", "openai", "/chat/completions"),
    ("/responses", "openai", "/responses"),
    ("/embeddings", "openai", "/embeddings"),
    ("/audio/transcriptions", "openai", "/audio/transcriptions"),
    ("/v1/messages", "anthropic", "/v1/messages"),
    (":generateContent", "gemini", "/v1beta/models/"),
    (":streamGenerateContent", "gemini", "/v1beta/models/"),
    (":batchEmbedContents", "gemini", "/v1beta/models/"),
    (":embedContent", "gemini", "/v1beta/models/"),
)


def _route(targets: Sequence[str]) -> tuple[str, str] | None:
    """(origin name, base path) that every target agrees on, else None."""
    found: set[tuple[str, str]] = set()
    for target in targets:
        path = target.split("?", 1)[0]
        match = next(((name, cut) for end, name, cut in ROUTES if path.endswith(end)), None)
        if match is None or match[1] not in path:
            return None
        found.add((match[0], path[: path.index(match[1])]))
    return found.pop() if len(found) == 1 else None


def plan_origins(urls: Sequence[tuple[str, str]]) -> dict[str, Origin]:
    """An origin per scheme://host among (base, target) pairs, by base.
    A known provider host gets its name, variables and base path (when
    every target lies under it); another host whose requests all go to one
    client library's endpoints gets that library's variables and the base
    path it expects (the first such host only); any other host is named
    after its domain and gets no variable."""
    origins: dict[str, Origin] = {}
    names: set[str] = set()
    claimed: set[str] = set()
    for base, _ in urls:
        if base in origins:
            continue
        targets = [t for b, t in urls if b == base]
        host = urlsplit(base).hostname or "origin"
        known = next(
            (k for k in KNOWN_ORIGINS if urlsplit(k.default_upstream).hostname == host), None
        )
        route = _route(targets)
        upstream, name = base, _host_name(host)
        env_vars: tuple[str, ...] = ()
        if known is not None:
            name, env_vars = known.name, known.env_vars
            path = urlsplit(known.default_upstream).path.rstrip("/")
            if all(t.startswith(path + "/") or t == path for t in targets):
                upstream = base + path
        elif route is not None and route[0] not in claimed:
            spec = next(k for k in KNOWN_ORIGINS if k.name == route[0])
            name, env_vars, upstream = spec.name, spec.env_vars, base + route[1]
        if env_vars:
            claimed.add(name)
        while name in names:
            name += "_"
        names.add(name)
        origins[base] = Origin(name, upstream, 0, env_vars)
    return origins


def _host_name(host: str) -> str:
    if host == "localhost" or host.replace(".", "").isdigit() or ":" in host:
        return "origin"
    labels = [p for p in host.split(".") if p not in ("api", "www")]
    return (labels[-2] if len(labels) >= 2 else labels[0] if labels else "origin") or "origin"


def epoch_ns(moment: dt.datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float timestamp is not);
    a time without a zone is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000


def sse_frames(body: bytes, offset_ns: int) -> tuple[Frame, ...]:
    """An SSE body as one frame per event (cut after each blank line), so
    a replay streams it event by event; anything else as one frame."""
    if not body:
        return ()
    frames, start, pos = [], 0, 0
    while True:
        cut = min((i for i in (body.find(b"\n\n", pos), body.find(b"\r\n\r\n", pos)) if i >= 0),
                  default=-1)
        if cut < 0:
            break
        end = cut + (4 if body.startswith(b"\r\n\r\n", cut) else 2)
        frames.append(Frame(offset_ns, body[start:end]))
        start = pos = end
    if start < len(body):
        frames.append(Frame(offset_ns, body[start:]))
    return tuple(frames)


def repair_response(response: Response, where: str) -> tuple[Response, list[str]]:
    """Make a foreign response servable: a ``Content-Encoding`` the body is
    not in (it was decoded when recorded) is removed, and a
    ``Content-Length`` that is not the body's length is set to it."""
    notes: list[str] = []
    headers: Headers = response.headers
    codings = [v for k, v in headers if k.lower() == b"content-encoding"
               and v.strip().lower() not in (b"", b"identity")]
    if codings and response.body and decoded_body(response) is None:
        headers = tuple((k, v) for k, v in headers if k.lower() != b"content-encoding")
        notes.append(f"{where}: removed Content-Encoding {codings[0].decode('latin-1')}: "
                     "the body was stored decoded")
    chunked = any(k.lower() == b"transfer-encoding" for k, _ in headers)
    size = str(len(response.body)).encode()
    fixed = []
    for k, v in headers:
        if k.lower() == b"content-length" and not chunked and v.strip() != size:
            notes.append(f"{where}: Content-Length {v.decode('latin-1')} set to the body's "
                         f"{len(response.body)} bytes")
            v = size
        fixed.append((k, v))
    return replace(response, headers=tuple(fixed)), notes


def redacted(exchange: Exchange) -> tuple[Exchange, list[Redaction]]:
    """The exchange with every secret replaced (as the recorder does)."""
    request, facts = redact_request(exchange.request)
    response = exchange.response
    if response is not None:
        response, more = redact_response(response)
        facts += more
    facts = [f for f in facts if f.fingerprint not in _MARKER_PRINTS]
    return replace(exchange, request=request, response=response), facts


def write_run(
    exchanges: Iterable[tuple[Exchange, Sequence[Redaction]]],
    info: RunInfo,
    out: Path | None,
    notes: Sequence[str],
    advance: Callable[[], None] = lambda: None,
) -> Imported:
    """Write an imported run (a new run id) to ``out`` or the run store."""
    run_id = new_run_id()
    path = out or runs_dir() / f"{run_id}.wtape"
    extra = dict(info.extra)
    if notes:
        extra["import_notes"] = json.dumps(list(notes))
    run = RunFile.create(path, replace(info, run_id=run_id, extra=extra))
    count = 0
    try:
        for exchange, given in exchanges:
            clean, facts = redacted(exchange)
            run.write_exchange(clean, [*given, *facts])
            count += 1
            advance()
        run.finish(info.exit_status, info.stdout, info.stderr)
    finally:
        run.close(compact=True)
    return Imported(path, run_id, count, tuple(notes))


def new_info(source: str, origins: Sequence[Origin], started_at_ns: int) -> RunInfo:
    """Metadata of a run imported from ``source`` (no command to rerun)."""
    return RunInfo(run_id="", wiretape_version=__version__, argv=(), cwd=os.getcwd(),
                   env_names=(), origins=tuple(origins),
                   started_at_ns=started_at_ns or time.time_ns(), mode="import",
                   extra={"imported_from": source})
