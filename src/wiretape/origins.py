"""Provider origins as plain values: the table of known origins, upstream
URLs split into their parts, and how origins are reached.

One row per provider origin: its default upstream and every environment
variable its client libraries read as a base URL. Each row is verified with
the real client library in tests/e2e/test_origins.py. Keep it the one place
that knows these names.

Pure: no sockets and no HTTP client (that is ``wiretape.proxy.upstream``'s),
so reading a run, replaying one or planning a launch names origins without
loading an upstream client.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from wiretape.errors import InvalidUpstream, UsageError

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True)
class OriginSpec:
    name: str
    default_upstream: str
    env_vars: tuple[str, ...]


KNOWN_ORIGINS: tuple[OriginSpec, ...] = (
    # openai-python reads OPENAI_BASE_URL; LiteLLM's OpenAI provider reads
    # OPENAI_BASE_URL, else OPENAI_API_BASE (as do LangChain and openai<1).
    OriginSpec("openai", "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
    # anthropic-sdk-python reads ANTHROPIC_BASE_URL.
    OriginSpec("anthropic", "https://api.anthropic.com", ("ANTHROPIC_BASE_URL",)),
    # google-genai reads GOOGLE_GEMINI_BASE_URL for the Gemini Developer API
    # (not for Vertex AI, which has its own hosts); it appends the API version
    # and method path (/v1/models/M:generateContent) itself.
    OriginSpec("gemini", "https://generativelanguage.googleapis.com", ("GOOGLE_GEMINI_BASE_URL",)),
)


def parse_upstream(value: str) -> tuple[str, str, str]:
    """Split an upstream URL into (scheme://host[:port], host header, base path).

    Raises InvalidUpstream.
    """
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidUpstream(value, str(exc)) from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidUpstream(value, "the scheme must be http or https")
    if not parts.hostname:
        raise InvalidUpstream(value, "it names no host")
    if parts.query or parts.fragment:
        raise InvalidUpstream(value, "it must not carry a query or fragment")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{netloc}", netloc, parts.path.rstrip("/")
    del port


@dataclass(frozen=True)
class UpstreamOptions:
    """How origins are reached. ``ca_file``: a PEM file of CA certificates
    trusted for origins besides the usual roots (``--upstream-ca``: a private
    gateway, a test server); ``resolve``: host to the (address, port)
    actually dialled (``--resolve HOST=IP:PORT``, as curl's option), with
    the certificate still checked against the host's name (SNI, RFC 6066 §3)."""

    ca_file: Path | None = None
    resolve: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def verify(self) -> ssl.SSLContext | bool:
        """The TLS verification setting for the client: always on. Raises
        UsageError for a ``ca_file`` that is not a PEM file of certificates."""
        return True if self.ca_file is None else _trusting(self.ca_file)


@functools.lru_cache(maxsize=8)
def _trusting(ca_file: Path) -> ssl.SSLContext:
    """The usual roots plus ``ca_file``, read once per file."""
    import ssl

    import certifi

    context = ssl.create_default_context(cafile=certifi.where())
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot read --upstream-ca {ca_file}: {exc} (give a PEM file "
                         "of CA certificates)") from exc
    return context


def parse_resolve(values: Sequence[str]) -> dict[str, tuple[str, int]]:
    """``HOST=IP:PORT`` pairs (``--resolve``). Raises UsageError."""
    out = {}
    for value in values:
        host, eq, address = value.partition("=")
        ip, colon, port = address.rpartition(":")
        if not (eq and host and colon and ip and port.isdigit() and 0 < int(port) < 65536):
            raise UsageError(f"invalid --resolve {value!r}: expected HOST=IP:PORT, "
                             "e.g. api.openai.com=127.0.0.1:8443")
        out[host.strip().lower()] = (ip.strip("[]"), int(port))
    return out
