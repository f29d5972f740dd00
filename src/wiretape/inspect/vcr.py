"""VCR cassettes into runs: VCR.py and pytest-recording (``interactions``:
``request`` {method, uri, headers as name -> [values], body},
``response`` {status {code, message}, headers, body {string}}) and Ruby VCR
(``http_interactions``, bodies as {encoding, string | base64_string},
``recorded_at``), so the cassettes people already have can be inspected
and replayed.

Cassettes are untrusted: YAML is read with PyYAML's SafeLoader, which builds
only plain data; the one extension is that the ``!!python/str``,
``!!python/unicode`` and ``!!python/tuple`` tags that older VCR.py versions
wrote are read as the string or list they hold (never an object). A
pydantic-ai style ``parsed_body`` is serialised back to JSON and noted as
not the wire bytes. VCR stores no timing, header order or frame boundaries:
each import says so in its notes. Knows nothing of the CLI.
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from wiretape.errors import UsageError
from wiretape.inspect import interop
from wiretape.model import Ending, Exchange, Headers, Redaction, Request, Response

#: An object of a cassette: untrusted YAML (Any), its members checked where
#: they are read; a member of the wrong type raises TypeError or ValueError,
#: which import_vcr reports as a cassette it cannot read.
_Untrusted = dict[str, Any]


class CassetteLoader(yaml.SafeLoader):
    """SafeLoader, plus three tags that hold only plain data."""


def _as_str(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return str(loader.construct_scalar(node))


def _as_list(loader: yaml.SafeLoader, node: yaml.Node) -> list[object]:
    assert isinstance(node, yaml.SequenceNode)
    return list(loader.construct_sequence(node))


CassetteLoader.add_constructor("tag:yaml.org,2002:python/str", _as_str)
CassetteLoader.add_constructor("tag:yaml.org,2002:python/unicode", _as_str)
CassetteLoader.add_constructor("tag:yaml.org,2002:python/tuple", _as_list)


class _Bad(Exception):
    pass


def _bytes(value: object, what: str) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise _Bad(f"{what} is neither text nor bytes")


def _body(body: object, what: str, notes: list[str]) -> bytes:
    if not isinstance(body, dict):
        return _bytes(body, what)
    if "base64_string" in body:  # Ruby VCR, binary bodies
        import base64

        return base64.b64decode(str(body["base64_string"]))
    if "string" in body:
        return _bytes(body["string"], what)
    if "parsed_body" in body:
        notes.append(f"{what}: parsed_body serialised back to JSON (not the wire bytes)")
        return json.dumps(body["parsed_body"]).encode("utf-8")
    return b""


def _headers(headers: object) -> Headers:
    out = []
    for name, values in (headers.items() if isinstance(headers, dict) else ()):
        for value in values if isinstance(values, list) else [values]:
            out.append((str(name).encode("latin-1", "replace"),
                        str(value).encode("latin-1", "replace")))
    return tuple(out)


def _recorded_at(value: object) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return interop.epoch_ns(email.utils.parsedate_to_datetime(value))
    except (TypeError, ValueError):
        return 0


def _interactions(data: object) -> list[_Untrusted]:
    if isinstance(data, dict):
        found = data.get("interactions", data.get("http_interactions"))
        if isinstance(found, list) and all(isinstance(i, dict) for i in found):
            return found
    raise _Bad("it has no list of interactions (not a VCR.py or Ruby VCR cassette)")


def import_vcr(source: Path, out: Path | None,
               advance: Callable[[], None] = lambda: None,
               on_total: Callable[[int], None] = lambda n: None) -> interop.Imported:
    """Read the cassette at ``source`` into a new run. Raises UsageError."""
    try:
        data = yaml.load(source.read_bytes(), Loader=CassetteLoader)  # a SafeLoader subclass
        interactions = _interactions(data)
        on_total(len(interactions))
        notes = [("VCR stores no timing, header order or frame boundaries: exchanges have no "
                  "timing, headers are in the cassette's order, SSE bodies are cut per event")]
        urls = []
        for n, i in enumerate(interactions):
            request = i.get("request")
            if not isinstance(request, dict) or not isinstance(request.get("uri"), str):
                raise _Bad(f"interaction {n} has no request uri")
            base, _, target = interop.split_url(request["uri"])
            urls.append((base, target))
        origins = interop.plan_origins(urls)
        start = _recorded_at(interactions[0].get("recorded_at")) if interactions else 0
        info = interop.new_info(f"vcr:{source.name}", list(origins.values()), start)
        exchanges: list[tuple[Exchange, list[Redaction]]] = []
        for n, (i, (base, target)) in enumerate(zip(interactions, urls, strict=True)):
            req, resp = i["request"], i.get("response")
            request = Request(str(req.get("method", "GET")).upper().encode("latin-1"),
                              target.encode("latin-1"), _headers(req.get("headers")),
                              _body(req.get("body"), f"interaction {n} request", notes))
            response = None
            if isinstance(resp, dict):
                status: _Untrusted = resp["status"] if isinstance(resp.get("status"), dict) else {}
                body = _body(resp.get("body"), f"interaction {n} response", notes)
                response = Response(int(status.get("code", 200)),
                                    str(status.get("message") or "").encode("latin-1", "replace"),
                                    _headers(resp.get("headers")),
                                    interop.sse_frames(body, 0))
                response, fixed = interop.repair_response(response, f"interaction {n}")
                notes.extend(fixed)
            started = _recorded_at(i.get("recorded_at")) or info.started_at_ns
            exchanges.append((Exchange(
                n, n, origins[base].name, started + n * 1000, request, response,
                Ending.COMPLETE if response else Ending.ORIGIN_UNREACHABLE,
                0 if response else None, 0), []))
    except OSError as exc:
        raise UsageError(f"cannot read cassette {source}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"{source} is not a cassette wiretape can read safely: "
                         f"{' '.join(str(exc).split())[:300]}") from exc
    except (_Bad, ValueError, TypeError) as exc:
        raise UsageError(f"{source} is not a VCR cassette wiretape can read: {exc}") from exc
    return interop.write_run(exchanges, info, out, notes, advance)
