"""The origins a recording listens for and the child variables that point
at them. The table of known origins itself is ``wiretape.origins``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wiretape.errors import InvalidUpstream, UsageError
from wiretape.origins import KNOWN_ORIGINS, key_placeholder, parse_upstream
from wiretape.redaction import is_credential_name


@dataclass(frozen=True)
class PlannedOrigin:
    """An origin to listen for: name, upstream URL, wanted port (0: any)."""

    name: str
    upstream: str
    port: int
    env_vars: tuple[str, ...]


def parse_pairs(
    values: Sequence[str], what: str, shape: str = "NAME=VALUE"
) -> list[tuple[str, str]]:
    """``NAME=VALUE`` pairs, in order. Raises UsageError."""
    pairs = []
    for value in values:
        name, eq, rest = value.partition("=")
        if not eq or not name or not rest:
            raise UsageError(f"invalid {what} {value!r}: expected {shape}")
        pairs.append((name.strip(), rest.strip()))
    return pairs


def plan_origins(
    upstreams: Sequence[tuple[str, str]],
    ports: Sequence[tuple[str | None, int]],
    environ: Mapping[str, str] | None = None,
    *,
    include_known: bool = True,
) -> list[PlannedOrigin]:
    """The origins a recording listens for.

    Precedence for each origin's upstream (DESIGN.md): ``--upstream
    NAME=URL``, else the parent's own value of the origin's variable, else
    the built-in default. Origins named only by ``--upstream`` are added
    after the known ones. With ``include_known`` False (attach mode) only
    the ``--upstream`` origins are planned. A port given without a name belongs to the first
    ``--upstream`` origin, else to ``openai``. Raises InvalidUpstream or
    UsageError.
    """
    env = os.environ if environ is None else environ
    given = dict(upstreams)
    if len(given) != len(upstreams):
        raise UsageError("an origin is named twice in --upstream")
    planned: list[PlannedOrigin] = []
    for spec in KNOWN_ORIGINS if include_known else ():
        inherited = next((env[v] for v in spec.env_vars if env.get(v)), None)
        url = given.get(spec.name) or inherited or spec.default_upstream
        planned.append(PlannedOrigin(spec.name, url, 0, spec.env_vars))
    planned_names = {p.name for p in planned}
    for name, url in upstreams:
        if name not in planned_names:
            known = next((k for k in KNOWN_ORIGINS if k.name == name), None)
            planned.append(PlannedOrigin(name, url, 0, known.env_vars if known else ()))
    for p in planned:
        try:
            parse_upstream(p.upstream)
        except InvalidUpstream as exc:
            source = "--upstream" if p.name in given else "the environment"
            raise InvalidUpstream(
                f"{p.name}={p.upstream}", f"{exc.reason} (from {source})"
            ) from exc
    primary = upstreams[0][0] if upstreams else "openai"
    by_name = {p.name: p for p in planned}
    for port_name, port in ports:
        target = port_name or primary
        if target not in by_name:
            raise UsageError(f"--port names origin {target!r}, which is not being recorded")
        p = by_name[target]
        by_name[target] = PlannedOrigin(p.name, p.upstream, port, p.env_vars)
    return [by_name[p.name] for p in planned]


def proxy_url(upstream: str, port: int) -> str:
    """The URL the child uses for an origin: loopback port plus the
    upstream's base path, so request targets pass through unchanged."""
    _, _, base = parse_upstream(upstream)
    return f"http://127.0.0.1:{port}{base}"


def child_environment(
    origins: Sequence[tuple[str, int, Sequence[str]]], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The child's environment and the names of the variables set.

    ``origins`` are (upstream, listening port, variables) triples.
    """
    env = dict(os.environ if environ is None else environ)
    names = []
    for upstream, port, env_vars in origins:
        for var in env_vars:
            env[var] = proxy_url(upstream, port)
            names.append(var)
    return env, names


def key_placeholders(names: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """A placeholder for each credential variable of ``names`` (a run's
    ``credential_env``) that ``environ`` lacks or leaves empty: the replayed
    agent starts as it did when recorded, and no request reaches a provider.
    A run file is untrusted, so only names that hold credentials get one
    (``PATH`` or ``LD_PRELOAD`` never do)."""
    known = {var for spec in KNOWN_ORIGINS for var in spec.key_vars}
    return {name: key_placeholder(name) for name in names
            if is_credential_name(name, known) and not environ.get(name)}


def placeholder_note(names: Sequence[str]) -> str:
    """The one line that says which variables got a placeholder."""
    listed = (names[0] if len(names) == 1
              else ", ".join(names[:-1]) + " and " + names[-1])
    verb, what = ("is", "a placeholder") if len(names) == 1 else ("are", "placeholders")
    return (f"wiretape: {listed} {verb} not set here; the agent gets {what}: "
            "a replay needs no key")
