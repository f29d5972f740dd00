"""Provider origins as plain values: the table of known origins, upstream
URLs split into their parts, and how origins are reached.

One row per provider origin: its default upstream, every environment
variable its client libraries read as a base URL, and those they read its
credential from. Each base-URL variable is verified with the real client
library in tests/e2e/test_origins.py. Keep it the one place that knows these
names.

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
    """A known origin: its name, default upstream, the variables its client
    libraries read as a base URL (``env_vars``) and those they read a
    credential from (``key_vars``)."""

    name: str
    default_upstream: str
    env_vars: tuple[str, ...]
    key_vars: tuple[str, ...] = ()


KNOWN_ORIGINS: tuple[OriginSpec, ...] = (
    # openai-python reads OPENAI_BASE_URL; LiteLLM's OpenAI provider reads
    # OPENAI_BASE_URL, else OPENAI_API_BASE (as do LangChain and openai<1).
    # Its key: OPENAI_API_KEY (openai-python, LiteLLM, Codex).
    OriginSpec("openai", "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
               ("OPENAI_API_KEY",)),
    # anthropic-sdk-python reads ANTHROPIC_BASE_URL; its key from
    # ANTHROPIC_API_KEY (x-api-key), a bearer token from ANTHROPIC_AUTH_TOKEN
    # (as Claude Code does).
    OriginSpec("anthropic", "https://api.anthropic.com", ("ANTHROPIC_BASE_URL",),
               ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")),
    # google-genai reads GOOGLE_GEMINI_BASE_URL for the Gemini Developer API
    # (not for Vertex AI, which has its own hosts); it appends the API version
    # and method path (/v1/models/M:generateContent) itself. Its key:
    # GOOGLE_API_KEY, else GEMINI_API_KEY (gemini-cli reads GEMINI_API_KEY).
    OriginSpec("gemini", "https://generativelanguage.googleapis.com", ("GOOGLE_GEMINI_BASE_URL",),
               ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
)

#: What a replay gives the agent for a credential variable its environment
#: lacks: the provider is never asked, so any value will do, but a client
#: may check a key's form before sending it. By the variable's prefix, a
#: value shaped like that provider's keys; else the plain placeholder.
KEY_PLACEHOLDER = "wiretape-replay-placeholder"
KEY_PLACEHOLDERS: tuple[tuple[str, str], ...] = (
    ("ANTHROPIC_", "sk-ant-" + KEY_PLACEHOLDER),
    ("OPENAI_", "sk-" + KEY_PLACEHOLDER),
    ("AZURE_OPENAI_", KEY_PLACEHOLDER.replace("-", "") + "0" * 7),  # 32 characters
    # Google API keys: "AIza" and 35 more characters.
    ("GEMINI_", "AIza" + KEY_PLACEHOLDER.replace("-", "_") + "_" + "0" * 7),
    ("GOOGLE_", "AIza" + KEY_PLACEHOLDER.replace("-", "_") + "_" + "0" * 7),
)


def key_placeholder(name: str) -> str:
    """The placeholder a replay sets for the credential variable ``name``."""
    return next((value for prefix, value in KEY_PLACEHOLDERS if name.startswith(prefix)),
                KEY_PLACEHOLDER)


def key_variables(origin_names: Sequence[str]) -> tuple[str, ...]:
    """The credential variables of the known origins among ``origin_names``."""
    return tuple(var for spec in KNOWN_ORIGINS if spec.name in origin_names
                 for var in spec.key_vars)


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
