"""TLS interception for one run or replay: which hosts, the run's CA and CA
bundle, and the child's proxy and trust variables.

For agents whose origin is compiled in (no base URL to point elsewhere):
the child gets ``HTTPS_PROXY`` naming wiretape and a CA bundle holding the
usual roots plus a CA made for this run alone. The CA key lives in memory;
leaf keys exist only for an instant in a private (0700) directory that is
removed at the end with the bundle. Nothing of it is stored in the run file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlsplit

from wiretape.errors import UsageError
from wiretape.intercept.ca import RunCA
from wiretape.model import TOOL_ORIGIN_PREFIX, Request
from wiretape.origins import KNOWN_ORIGINS, UpstreamOptions, parse_resolve
from wiretape.proxy.connect import tool_origin
from wiretape.proxy.http1 import ErrorBody, Handler, Responder

#: Variables naming the forward proxy. Both cases: curl reads only the
#: lower-case ``http_proxy``; httpx and requests prefer lower case when both
#: are set (urllib.request.getproxies).
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
#: Variables naming the CA bundle: OpenSSL-based clients (Python ssl, httpx)
#: read SSL_CERT_FILE, requests REQUESTS_CA_BUNDLE, curl CURL_CA_BUNDLE,
#: Node NODE_EXTRA_CA_CERTS (added to its own roots).
TRUST_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
_HOST = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)
#: Loopback stays direct (a local tool server, a fake provider).
NO_PROXY = "localhost,127.0.0.1,::1"


@dataclass(frozen=True)
class InterceptSettings:
    """``--intercept``: the hosts intercepted besides the known provider
    hosts (``--intercept-host``); ``tools`` (``--tools``): every other host
    the agent reaches through the proxy is intercepted too and its
    exchanges recorded as tool exchanges, except ``tools_except`` (left
    direct: named in ``NO_PROXY``)."""

    extra_hosts: tuple[str, ...] = ()
    tools: bool = False
    tools_except: tuple[str, ...] = ()


#: The run metadata (``RunInfo.extra``) keys saying a run recorded tool
#: exchanges (``"1"``) and which hosts it left out (comma-separated).
TOOLS_KEY = "tools"
TOOLS_EXCEPT_KEY = "tools_except"


def tools_extra(settings: InterceptSettings | None) -> dict[str, str]:
    """What ``RunInfo.extra`` keeps of ``--tools``: nothing without it."""
    if settings is None or not settings.tools:
        return {}
    return {TOOLS_KEY: "1", TOOLS_EXCEPT_KEY: ",".join(settings.tools_except)}


def recorded_tools(extra: Mapping[str, str]) -> InterceptSettings | None:
    """The ``--tools`` settings a run was recorded with (from
    ``RunInfo.extra``), or None when it recorded no tool traffic."""
    if extra.get(TOOLS_KEY) != "1":
        return None
    hosts = tuple(h for h in extra.get(TOOLS_EXCEPT_KEY, "").split(",") if h)
    return InterceptSettings(tools=True, tools_except=hosts)


class InterceptionArguments(TypedDict):
    """The ``intercept`` and ``upstream_options`` arguments of a recording."""

    intercept: InterceptSettings | None
    upstream_options: UpstreamOptions


def interception_settings(hosts: Sequence[str] | None, upstream_ca: str | os.PathLike[str] | None,
                          resolve: Sequence[str], *, tools: bool = False,
                          tools_except: Sequence[str] = ()) -> InterceptionArguments:
    """The ``intercept`` and ``upstream_options`` arguments of a recording:
    ``hosts`` None (no interception) or the extra hosts to intercept;
    ``resolve``: ``HOST=IP:PORT`` strings; ``tools``: record the agent's
    other HTTP(S) traffic as tool exchanges (implies interception), but for
    the ``tools_except`` hosts. Raises UsageError for a missing CA file or
    a malformed host or address."""
    for flag, names in (("--intercept-host", hosts or ()), ("--tools-except", tools_except)):
        for host in names:
            if not _HOST.fullmatch(host.strip()):
                raise UsageError(f"{flag} {host!r}: expected a host name such as "
                                 "api.example.com (no scheme, port or path)")
    if tools_except and not tools:
        raise UsageError("--tools-except needs --tools")
    _check_tools_except(tools_except, hosts or ())
    if tools and hosts is None:
        hosts = ()
    ca = Path(upstream_ca) if upstream_ca is not None else None
    if ca is not None and not ca.is_file():
        raise UsageError(f"--upstream-ca {os.fspath(ca)}: no such file (give a PEM file of CA "
                         "certificates)")
    settings = (InterceptSettings(tuple(hosts), tools,
                                  tuple(dict.fromkeys(h.strip().lower() for h in tools_except)))
                if hosts is not None else None)
    return {"intercept": settings,
            "upstream_options": UpstreamOptions(ca, parse_resolve(resolve))}


def _check_tools_except(tools_except: Sequence[str], hosts: Sequence[str]) -> None:
    """Raises UsageError for a ``--tools-except`` host that is a model
    provider's (or a domain of one: ``NO_PROXY`` matches by suffix), or
    that ``--intercept-host`` names too: left out, the agent's model calls
    there would go past the recorder, to the real provider."""
    providers = known_hosts()
    extra = {h.strip().lower() for h in hosts}
    for raw in tools_except:
        host = raw.strip().lower()
        if host in extra:
            raise UsageError(f"--tools-except {raw}: also given to --intercept-host; a host is "
                             "either recorded as a model origin or left out, not both")
        covered = sorted(p for p in providers if p == host or p.endswith("." + host))
        if covered:
            raise UsageError(f"--tools-except {raw}: {covered[0]} is a model provider's host "
                             f"({providers[covered[0]]}), always recorded; left out, its model "
                             "calls would go past the recorder (drop it from --tools-except)")


def known_hosts() -> dict[str, str]:
    """Provider host to origin name, from the origins table."""
    out = {}
    for spec in KNOWN_ORIGINS:
        host = urlsplit(spec.default_upstream).hostname
        if host:
            out[host.lower()] = spec.name
    return out


def intercept_hosts(extra: Sequence[str]) -> dict[str, str]:
    """Host to origin name: the known provider hosts, then each extra host
    (named by itself)."""
    hosts = known_hosts()
    for host in extra:
        hosts.setdefault(host.strip().lower(), host.strip().lower())
    return hosts


def forward_proxy_port(ports: Sequence[tuple[str | None, int]]) -> int:
    """The forward proxy's port: ``--port N`` (or ``--port proxy=N``), else any.
    Raises UsageError for a port named after an origin."""
    for name, port in ports:
        if name in (None, "proxy"):
            return port
        raise UsageError(f"--port {name}={port}: with --intercept there is one port, the "
                         "forward proxy's: give --port N")
    return 0


def plain_http_refusal(error_body: ErrorBody,
                       on_refused: Callable[[int, str], None] | None = None) -> Handler:
    """The handler for requests sent to the forward proxy without CONNECT
    (plain ``http://`` through ``HTTP_PROXY``): 400, never forwarded."""
    async def refuse(conn: Responder, request: Request) -> None:
        if on_refused is not None:
            on_refused(400, "plain_http_not_intercepted")
        headers, body = error_body(
            400, "plain_http_not_intercepted",
            "wiretape --intercept captures HTTPS (CONNECT) only; plain-HTTP requests through "
            "the proxy are not forwarded")
        await conn.answer(400, b"Bad Request", headers, body, keep_alive=False)

    return refuse


def tool_http_handler(handler_for: Callable[[str, str], Handler], excepted: Sequence[str],
                      error_body: ErrorBody,
                      on_refused: Callable[[int, str], None] | None = None) -> Handler:
    """The handler for plain-HTTP requests sent to the forward proxy
    (absolute-form target, RFC 9112 §3.2.2) with ``--tools``: each is
    handed, its target made origin-form, to ``handler_for(origin,
    upstream)`` (``tool:http://host[:port]``, ``http://host[:port]``). A
    target that is not an absolute ``http://`` URL, or names an excepted
    host, gets 400 and is never forwarded."""
    left_out = {h.lower() for h in excepted}

    async def handle(conn: Responder, request: Request) -> None:
        found = _absolute_http(request.target)
        if found is None or found[0] in left_out:
            code = "plain_http_not_absolute" if found is None else "tool_host_excepted"
            if on_refused is not None:
                on_refused(400, code)
            why = (f"expected an absolute http:// target, got {request.target[:200]!r}"
                   if found is None else
                   f"{found[0]} is left out of the tool recording (--tools-except)")
            headers, body = error_body(400, code, f"wiretape forward proxy: {why}")
            await conn.answer(400, b"Bad Request", headers, body, keep_alive=False)
            return
        host, port, target = found
        origin = tool_origin("http", host, port)
        handler = handler_for(origin, origin.removeprefix(TOOL_ORIGIN_PREFIX))
        await handler(conn, Request(request.method, target, request.headers, request.body,
                                    request.http_version))

    return handle


def _absolute_http(target: bytes) -> tuple[str, int, bytes] | None:
    """(host lower-cased, port, origin-form target) of an absolute-form
    ``http://`` request-target; None when it is not one."""
    try:
        parts = urlsplit(target.decode("ascii"))
        port = parts.port or 80
    except (UnicodeDecodeError, ValueError):
        return None
    if parts.scheme.lower() != "http" or not parts.hostname:
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname.lower(), port, path.encode("ascii")


def proxy_environment(
    env: Mapping[str, str], port: int, bundle: Path, direct: Sequence[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """``env`` with the forward proxy at ``127.0.0.1:port`` and ``bundle``
    trusted, loopback and the ``direct`` hosts left direct (``NO_PROXY``);
    returns it with the names set."""
    out = dict(env)
    names: list[str] = []
    url = f"http://127.0.0.1:{port}"
    for var in PROXY_VARS:
        out[var] = out[var.lower()] = url
        names += [var, var.lower()]
    out["NO_PROXY"] = out["no_proxy"] = ",".join([NO_PROXY, *direct])
    names += ["NO_PROXY", "no_proxy"]
    for var in TRUST_VARS:
        out[var] = str(bundle)
        names.append(var)
    return out, names


class Interception:
    """One run's (or replay's) CA and bundle; :meth:`close` removes both."""

    def __init__(self) -> None:
        self.ca = RunCA.create()
        self.bundle = self.ca.write_bundle(self.ca.directory / "ca-bundle.pem")

    def close(self) -> None:
        self.ca.close()
