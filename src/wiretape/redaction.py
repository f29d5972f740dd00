"""Redaction on the way in: secrets are removed before a byte is written.

Owns which header values, query parameters and text shapes are secrets,
and what replaces them: the rules (:class:`Rules`), applied the same way to
every place a run stores text: requests and responses (bodies in their
decoded form, see :mod:`wiretape.codings`), the command line, the names
of the agent's variables, its output, the files of a snapshot and what the
agent changed in them. The same functions are applied to live requests
and to a replay's own output before they are compared, so redaction never
turns an exact match into a divergence. Knows nothing of storage.

Pure (values in, values out), so every part that meets a request can use
it: the recorder and the replayer, the header comparison of a divergence
report, imports of other tools' recordings, ``scrub`` and ``scan``.

Replacements keep the text's length (a Content-Length stays true, frame
boundaries and line positions stay where they were); header and query
values become a fixed marker so a replay with another key still matches.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import itertools
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wiretape import codings
from wiretape.model import (
    Exchange,
    Frame,
    Headers,
    Message,
    Redaction,
    Request,
    Response,
    header_values,
)

REDACTED = b"<redacted>"

#: Header names whose values are secrets (compared lower-case).
SECRET_HEADERS: frozenset[bytes] = frozenset(
    {
        b"authorization",
        b"proxy-authorization",
        b"x-api-key",
        b"api-key",
        b"x-goog-api-key",
        b"cookie",
        b"set-cookie",
    }
)

#: Query parameters whose values are secrets (Gemini accepts ``?key=``);
#: any other credential-named one is too (:func:`is_credential_field`).
SECRET_QUERY_PARAMS: frozenset[bytes] = frozenset({b"key", b"api_key"})

#: The words of a header, parameter or member name (split at ``-``, ``_``,
#: ``.`` and camelCase: ``X-Amz-Security-Token``, ``apiKey``, ``client_secret``).
_NAME_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

#: A word that makes a name a credential's name (whole words only: never
#: ``tokens`` as in ``max_tokens``, nor ``keyboard``).
_CREDENTIAL_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "passphrase", "pwd",
    "credential", "credentials", "signature", "auth", "authorization",
    "accesstoken", "authtoken", "apitoken", "accesskey", "secretkey", "privatekey",
    "clientsecret", "sessiontoken", "refreshtoken", "idtoken", "subscriptionkey",
})

#: A word that makes a credential-looking name something else: a WebSocket
#: handshake's nonce, an idempotency key, a page cursor, a token count or
#: type, a public key, a key that names or routes something (OpenAI's
#: ``prompt_cache_key``, a partition, sort or object key).
_NOT_CREDENTIAL_WORDS = frozenset({
    "websocket", "idempotency", "page", "cursor", "continuation", "next", "sync",
    "public", "publishable", "type", "method", "mode", "scheme", "length", "count",
    "limit", "max", "usage", "expires", "expiry", "ttl",
    "cache", "partition", "routing", "sort", "primary", "foreign", "shard", "dedupe",
    "object", "lookup",
})

#: Names that are credentials only as a whole name (``?sig=`` of a shared
#: access signature).
_CREDENTIAL_NAMES = frozenset({"sig"})


def _name_words(name: str) -> list[str]:
    return [w.lower() for w in _NAME_WORD.findall(name)]


def is_credential_field(name: str | bytes) -> bool:
    """Whether a header, query parameter, form field or JSON member called
    ``name`` carries a credential: one of its words (split at ``-``, ``_``,
    ``.`` and camelCase) is ``key``, ``token``, ``secret``, ``password``,
    ``passwd``, ``signature``, ``auth``, ``credential(s)`` or such a word run
    together (``apikey``, ``accessToken``), or the whole name is ``sig``;
    and none of its words says it is something else (``Sec-WebSocket-Key``,
    ``Idempotency-Key``, ``page_token``, ``token_type``, ``prompt_cache_key``).
    Whole words only:
    ``max_tokens``, ``input_tokens``, ``Content-Length`` are not."""
    return _is_credential_text(name.decode("latin-1") if isinstance(name, bytes) else name)


@functools.lru_cache(maxsize=4096)  # (the same few names, on every exchange)
def _is_credential_text(text: str) -> bool:
    if text.lower() in _CREDENTIAL_NAMES:
        return True
    words = _name_words(text)
    # (``api_key``, ``access-token``, ``WebSocket``: two words that make one)
    words += [a + b for a, b in itertools.pairwise(words)]
    if any(w in _NOT_CREDENTIAL_WORDS for w in words):
        return False
    return any(w in _CREDENTIAL_WORDS for w in words)


def is_secret_header(name: bytes) -> bool:
    """Whether a header's value is a secret: one of :data:`SECRET_HEADERS`
    or a credential-named one (``X-Subscription-Token``,
    ``Ocp-Apim-Subscription-Key``, ``X-Amz-Security-Token``)."""
    return name.lower() in SECRET_HEADERS or is_credential_field(name)


def is_secret_param(name: bytes) -> bool:
    """Whether a query parameter's or form field's value is a secret: one
    of :data:`SECRET_QUERY_PARAMS` or a credential-named one
    (``access_token``, ``apiKey``, ``X-Amz-Signature``, ``sig``)."""
    return name.lower() in SECRET_QUERY_PARAMS or is_credential_field(name)


def _is_secret_member(name: bytes) -> bool:
    """A JSON member whose string value is a secret: credential-named, but
    not a bare ``key`` (a key-value store's key, a sort key)."""
    return name.lower() != b"key" and is_credential_field(name)

#: Known secret shapes, looked for in every text: (label, pattern).
KEY_SHAPES: tuple[tuple[str, re.Pattern[bytes]], ...] = (
    ("anthropic-key", re.compile(rb"(?<![A-Za-z0-9_])sk-ant-[A-Za-z0-9_\-]{20,}")),
    (
        "openai-key",
        re.compile(rb"(?<![A-Za-z0-9_])sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ),
    ("google-key", re.compile(rb"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_\-]{35}")),
    ("github-token", re.compile(rb"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,}")),
    ("github-token", re.compile(rb"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{40,}")),
    ("slack-token", re.compile(rb"(?<![A-Za-z0-9_])xox[abprs]-[A-Za-z0-9\-]{10,}")),
    ("aws-access-key", re.compile(rb"(?<![A-Za-z0-9_])AKIA[0-9A-Z]{16}")),
    ("groq-key", re.compile(rb"(?<![A-Za-z0-9_])gsk_[A-Za-z0-9]{20,}")),
    ("huggingface-token", re.compile(rb"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}")),
    ("stripe-key", re.compile(rb"(?<![A-Za-z0-9_])[rs]k_live_[A-Za-z0-9]{20,}")),
    ("private-key", re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"
                               rb"[A-Za-z0-9+/=\s:,\-]{16,}?"
                               rb"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")),
)

#: A replacement as written by :func:`_mask` (looked for when learning).
_MASK = re.compile(rb"<redacted\**>|\*{4,}")


def _load_re2() -> Any:
    """The RE2 module (linear-time, one pass for many alternatives), or
    None where it is not installed: a pure-Python search stands in."""
    try:
        return importlib.import_module("re2")
    except ImportError:
        return None


_re2: Any = _load_re2()


def _re2_compile(pattern: bytes) -> Any:
    """``pattern`` compiled by RE2 over bytes (Latin-1: a byte is a
    character, whatever the text's encoding), or None without RE2."""
    if _re2 is None:
        return None
    options = _re2.Options()
    options.encoding = _re2.Options.Encoding.LATIN1
    return _re2.compile(pattern, options)


def _re2_escape(value: bytes) -> bytes:
    return b"".join(bytes([c]) if chr(c).isascii() and chr(c).isalnum() else b"\\x%02x" % c
                    for c in value)


#: Up to this many literal secrets, each is looked for with ``bytes.find``.
_FEW_LITERALS = 8


def fingerprint(secret: bytes) -> str:
    """First 8 hex digits of the secret's sha256."""
    return hashlib.sha256(secret).hexdigest()[:8]


def _mask(n: int) -> bytes:
    """A same-length stand-in for an n-byte secret found in a text."""
    if n >= 10:
        return b"<redacted" + b"*" * (n - 10) + b">"
    return b"*" * n


# -- the rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """What counts as a secret in a text: the known key shapes, plus
    ``literals`` (exact values, each with the label of the rule that found
    it: a variable's name, ``--match``) and ``patterns`` (more shapes, as
    ``scrub --rules`` gives them). Header and query rules always apply."""

    shapes: tuple[tuple[str, re.Pattern[bytes]], ...] = KEY_SHAPES
    literals: tuple[tuple[str, bytes], ...] = ()
    patterns: tuple[tuple[str, re.Pattern[bytes]], ...] = ()
    _literal_re: re.Pattern[bytes] | None = field(init=False, compare=False, repr=False)
    _labels: dict[bytes, str] = field(init=False, compare=False, repr=False)
    #: the literals to look for, longest first (the order of ``_literal_re``)
    _literals: tuple[bytes, ...] = field(init=False, compare=False, repr=False)
    #: many literals: one search for all of them (``finditer``)
    _literal_finder: Any = field(init=False, compare=False, repr=False)
    #: the key shapes' starts and the literals in one RE2 search, when no
    #: literal can meet a mask (holds none of ``<>*``, is not in ``redacted``):
    #: then a literal found nowhere in a text is nowhere after its masks
    _fused: Callable[[bytes, int], int] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        wanted = {v: label for label, v in self.literals if v and not _is_mask(v)}
        ordered = tuple(sorted(wanted, key=len, reverse=True))
        alternatives = b"|".join(re.escape(v) for v in ordered)
        literal_re = re.compile(alternatives) if wanted else None
        finder: Any = None
        if len(ordered) > _FEW_LITERALS:
            finder = _re2_compile(b"|".join(_re2_escape(v) for v in ordered)) or literal_re
        object.__setattr__(self, "_labels", wanted)
        object.__setattr__(self, "_literal_re", literal_re)
        object.__setattr__(self, "_literals", ordered)
        object.__setattr__(self, "_literal_finder", finder)
        fused = None
        if ordered and self.shapes is KEY_SHAPES and not any(
                b"<" in v or b">" in v or b"*" in v or v in b"redacted" for v in ordered):
            fused = _re2_search(b"|".join([_CANDIDATES_RE2, *map(_re2_escape, ordered)]))
        object.__setattr__(self, "_fused", fused)

    def label(self, secret: bytes) -> str:
        """The label of a literal secret (``literal`` when unknown)."""
        return self._labels.get(secret, "literal")

    def with_literals(self, more: Iterable[tuple[str, bytes]]) -> Rules:
        known = {v for _, v in self.literals}
        added = tuple((label, v) for label, v in more if v and v not in known)
        return self if not added else replace(self, literals=self.literals + added)

    def with_patterns(self, more: Iterable[tuple[str, re.Pattern[bytes]]]) -> Rules:
        return replace(self, patterns=self.patterns + tuple(more))

    def all_shapes(self) -> Iterable[tuple[str, re.Pattern[bytes]]]:
        yield from self.shapes
        yield from self.patterns
        if self._literal_re is not None:
            yield "", self._literal_re


#: The rules of every run: the known key shapes.
STANDARD = Rules()


def _is_mask(value: bytes) -> bool:
    return _MASK.fullmatch(value) is not None or set(value) <= set(b"*")


#: Variable names that hold secrets: a part of the name (between ``_``,
#: ``-`` or ``.``) is one of these words.
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_.\-])(?:api[_\-]?key|apikey|key|token|secret|password|passwd|credentials?"
    r"|auth|private[_\-]?key|access[_\-]?key)(?:$|[_.\-])")


def is_secret_name(name: str) -> bool:
    """Whether a variable called ``name`` holds a secret (``OPENAI_API_KEY``,
    ``GITHUB_TOKEN``, ``DB_PASSWORD``)."""
    return _SECRET_NAME.search(name) is not None


def plausible_secret(value: str) -> bool:
    """Whether ``value`` looks like a secret rather than a setting: at least
    8 characters, no spaces, not a path or plain URL, and letters with
    digits (or at least 20 characters)."""
    if len(value) < 8 or any(c.isspace() for c in value):
        return False
    if value.startswith(("/", "~", "./", "../")) or ("://" in value and "@" not in value):
        return False
    letters = any(c.isalpha() for c in value)
    digits = any(c.isdigit() for c in value)
    return (letters and digits) or len(value) >= 20


#: A variable's name as a run may store it (POSIX: letters, digits, ``_``).
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def is_credential_name(name: str, known: Iterable[str] = ()) -> bool:
    """Whether ``name`` may name a credential variable a replay sets a
    placeholder for: one of ``known`` (a provider's key variable), or a
    well-formed secret-named variable. Never ``PATH``, ``LD_PRELOAD`` or the
    like, whatever a run file says."""
    return _VARIABLE_NAME.fullmatch(name) is not None and (
        name in set(known) or is_secret_name(name))


def credential_names(env: Mapping[str, str], facts: Iterable[Redaction],
                     known: Iterable[str] = ()) -> list[str]:
    """The names, never the values, of ``env``'s variables that carried a
    credential: each of ``known`` (the recorded origins' key variables) set
    to a non-empty value, and each secret-named variable whose value one of
    ``facts`` redacted (same fingerprint: a gateway's key in ``api-key``, a
    token in ``Authorization``). Sorted."""
    known = tuple(known)
    prints = {f.fingerprint for f in facts if not f.name.startswith("recoded:")}
    found = {name for name in known if env.get(name)}
    found |= {name for name, value in env.items()
              if len(value) >= 4 and is_credential_name(name)
              and fingerprint(value.encode("utf-8", "surrogateescape")) in prints}
    return sorted(found)


def secret_values(env: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """The values of ``env``'s secret-named variables that look like
    secrets, each labelled ``env:NAME``."""
    return [(f"env:{name}", value.encode("utf-8", "surrogateescape"))
            for name, value in sorted(env.items())
            if is_secret_name(name) and plausible_secret(value)]


_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([^=#\s][^=]*?)\s*=\s*(.*?)\s*$")


def dotenv_values(text: bytes, label: str) -> list[tuple[str, bytes]]:
    """The values set (``NAME=VALUE``) in a ``.env``-style file, or another
    secrets file (``.npmrc``, ``.pypirc``), that look like secrets: every
    variable of such a file counts, whatever its name. Labelled
    ``LABEL:NAME``."""
    out = []
    for line in text.decode("utf-8", "replace").splitlines():
        m = _DOTENV_LINE.match(line)
        if m is None or line.lstrip().startswith("#"):
            continue
        name, value = m.group(1), m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if plausible_secret(value):
            out.append((f"{label}:{name}", value.encode("utf-8")))
    return out


def literal_rules(literals: Iterable[tuple[str, bytes]]) -> Rules:
    """The standard rules plus ``literals``."""
    return STANDARD.with_literals(literals)


# -- facts -------------------------------------------------------------------------------------


@dataclass
class Facts:
    """Redactions as they are found (``location``, the rule's label, the
    secret's fingerprint)."""

    items: list[Redaction] = field(default_factory=list)

    def add(self, location: str, name: str, secret: bytes) -> None:
        self.items.append(Redaction(location, name, fingerprint(secret)))



# -- finding secrets ---------------------------------------------------------------------------
#
# What the shapes find is what running each shape's regex over the text,
# one after another, each over the text the ones before it masked, finds
# (``re.sub`` per shape). Found here in one pass: candidates (where a shape's
# literal start follows a non-word byte) come from one search over the
# text, then each shape's pattern is run anchored at its candidates, and at
# the end of a mask an earlier shape wrote (a mask ends in ``>`` or ``*``, so
# a start a word byte hid may follow it now). A mask has no byte a shape can
# start with or go on through, so a shape can only match where it matches
# in the original text, never later than there.

#: 1 for a word byte (``[A-Za-z0-9_]``): a key shape with a look-behind
#: never starts right after one.
_IS_WORD = bytes(1 if chr(c).isascii() and (chr(c).isalnum() or c == 0x5F) else 0
                 for c in range(256))
_LOOK_BEHIND = rb"(?<![A-Za-z0-9_])"


@dataclass(frozen=True)
class _Shape:
    """A key shape as the scanner runs it: the literal ``starts`` its
    matches begin with, ``pattern`` without the look-behind (run anchored),
    and whether a word byte before a start rules it out (``boundary``)."""

    label: str
    starts: tuple[bytes, ...]
    pattern: re.Pattern[bytes]
    boundary: bool


def _scanner_shape(label: str, pattern: re.Pattern[bytes], starts: tuple[bytes, ...]) -> _Shape:
    boundary = pattern.pattern.startswith(_LOOK_BEHIND)
    bare = pattern.pattern[len(_LOOK_BEHIND):] if boundary else pattern.pattern
    return _Shape(label, starts, re.compile(bare, pattern.flags), boundary)


#: The literal starts of each of KEY_SHAPES, in its order.
_STARTS: tuple[tuple[bytes, ...], ...] = (
    (b"sk-ant-",),
    (b"sk-",),
    (b"AIza",),
    (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"),
    (b"github_pat_",),
    (b"xoxa-", b"xoxb-", b"xoxp-", b"xoxr-", b"xoxs-"),
    (b"AKIA",),
    (b"gsk_",),
    (b"hf_",),
    (b"rk_live_", b"sk_live_"),
    (b"-----BEGIN ",),
)
_SHAPES: tuple[_Shape, ...] = tuple(
    _scanner_shape(label, pattern, starts)
    for (label, pattern), starts in zip(KEY_SHAPES, _STARTS, strict=True))
_PRIVATE_KEY = len(_SHAPES) - 1
#: Shape indexes by the first byte of their starts.
_BY_FIRST: dict[int, tuple[int, ...]] = {
    first: tuple(i for i, shape in enumerate(_SHAPES) if any(s[0] == first for s in shape.starts))
    for first in sorted({s[0] for shape in _SHAPES for s in shape.starts})}
#: Where a pure-Python search looks (a needle, and how far into a start it is).
_NEEDLES: tuple[tuple[bytes, int], ...] = (
    (b"sk-", 0), (b"AIza", 0), (b"ghp_", 0), (b"gho_", 0), (b"ghu_", 0), (b"ghs_", 0),
    (b"ghr_", 0), (b"github_pat_", 0), (b"xox", 0), (b"AKIA", 0), (b"gsk_", 0), (b"hf_", 0),
    (b"k_live_", 1), (b"-----BEGIN ", 0))
#: Whether a short text has one of _NEEDLES (one regex is quicker there).
_ANY_NEEDLE = re.compile(b"|".join(re.escape(needle) for needle, _ in _NEEDLES))
#: One search for every start after a non-word byte (or at the text's
#: start), and every private key's start; a start that is common in code
#: (``hf_hub``, ``sk-learn``) only with some of its shape's bytes after it.
_CANDIDATES_RE2 = (
    rb"(?:^|[^A-Za-z0-9_])(?:sk-[A-Za-z0-9_\-]{8}|AIza|gh[pousr]_|github_pat_|xox[abprs]-"
    rb"|AKIA|gsk_|hf_[A-Za-z0-9]{8}|[rs]k_live_)|-----BEGIN ")


def _re2_search(pattern: bytes) -> Callable[[bytes, int], int] | None:
    """Where ``pattern`` first matches in a text at or after a position
    (-1: nowhere), by RE2; None without RE2."""
    compiled = _re2_compile(pattern)
    if compiled is None:
        return None
    raw, anchor = getattr(compiled, "_regexp", None), getattr(
        getattr(getattr(_re2, "_re2", None), "RE2", None), "Anchor", None)
    if raw is not None and anchor is not None:  # the binding itself: a third of the cost
        unanchored = anchor.UNANCHORED

        def search(data: bytes, pos: int) -> int:
            return int(raw.Match(unanchored, data, pos, len(data))[0][0])
        return search

    def search_public(data: bytes, pos: int) -> int:
        m = compiled.search(data, pos)
        return -1 if m is None else int(m.start())
    return search_public


_candidate_re2 = _re2_search(_CANDIDATES_RE2)
#: Up to this many bytes, the pure-Python search is the quicker one.
_SMALL = 256


def _candidates(data: bytes, fused: Callable[[bytes, int], int] | None = None,
                literals: tuple[bytes, ...] = ()) -> tuple[list[int], bool]:
    """Positions (ascending, each once) where a shape may match in
    ``data``: a superset of those where one does, look-behind included;
    and whether one of ``literals`` may be in ``data``. ``fused``: the RE2
    search of the shapes' starts and of ``literals`` too (which then tells
    whether one is there)."""
    small = len(data) <= _SMALL
    if small and _ANY_NEEDLE.search(data) is None:
        return [], True
    if not small and (fused is not None or _candidate_re2 is not None):
        searched = _searched(data, fused, literals)
        if searched is not None:
            return searched
    found: list[int] = []
    is_word, find = _IS_WORD, data.find
    for needle, back in _NEEDLES:
        at = find(needle)
        while at >= 0:
            start = at - back
            if start == 0 or (start > 0 and (not is_word[data[start - 1]] or needle[0] == 45)):
                found.append(start)
            at = find(needle, at + 1)
    return (sorted(set(found)) if found else found), True


#: More candidates than this: RE2's search, a call each, gives way to finds.
_MANY = 256


def _searched(data: bytes, fused: Callable[[bytes, int], int] | None,
              literals: tuple[bytes, ...]) -> tuple[list[int], bool] | None:
    """:func:`_candidates` by RE2 (None: too many of them, so many a text
    of private-key headers has, for a call each)."""
    found: list[int] = []
    pos, n = 0, len(data)
    if fused is not None:  # a match may be a literal: every place a match starts
        seen = False
        while pos < n:
            at = fused(data, pos)
            if at < 0:
                break
            if not found or found[-1] < at:
                found.append(at)
            if at + 1 < n:
                found.append(at + 1)
            seen = seen or any(data.startswith(v, at) for v in literals)
            pos = at + 1
            if len(found) > _MANY:
                return None
        return found, seen
    search = _candidate_re2
    assert search is not None
    while pos < n:
        at = search(data, pos)
        if at < 0:
            break
        if not (data.startswith(b"-----BEGIN ", at) or (at == 0 and _IS_WORD[data[0]])):
            at += 1  # after the non-word byte
        found.append(at)
        pos = at + 1
        if len(found) > _MANY:
            return None
    return found, True


_PK_HEAD = re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PK_FOOT = re.compile(rb"-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----")
_PK_NOT_BODY = re.compile(rb"[^A-Za-z0-9+/=\s:,\-]")


class _PrivateKeys:
    """The private-key shape matched at increasing positions of one text,
    in linear time overall: a header's body runs to the first footer at
    least 16 bytes on within the same run of body bytes, and both the run's
    end and the next footer are remembered for the headers after it."""

    def __init__(self, text: bytes | bytearray) -> None:
        self.text = text
        self.run_from = self.run_to = -1
        self.foot_from, self.foot = -1, -1

    def _footer(self, start: int) -> int:
        """The first footer at or after ``start`` (len(text) when none)."""
        if not (self.foot_from <= start <= self.foot):
            self.foot_from, self.foot = start, self._next_footer(start)
        return self.foot

    def _next_footer(self, start: int) -> int:
        text, at = self.text, self.text.find(b"-----END ", start)
        while at >= 0 and _PK_FOOT.match(text, at) is None:
            at = text.find(b"-----END ", at + 1)
        return at if at >= 0 else len(text)

    def match(self, at: int) -> int:
        """Where the private key starting at ``at`` ends (-1: none does)."""
        head = _PK_HEAD.match(self.text, at)
        if head is None:
            return -1
        body = head.end()
        if not (self.run_from <= body <= self.run_to):
            stop = _PK_NOT_BODY.search(self.text, body)
            self.run_from, self.run_to = body, stop.start() if stop else len(self.text)
        foot = self._footer(body + 16)
        if foot >= self.run_to:
            return -1
        end = _PK_FOOT.match(self.text, foot)
        assert end is not None
        return end.end()


def _find_shapes(data: bytes, fused: Callable[[bytes, int], int] | None = None,
                 literals: tuple[bytes, ...] = ()) -> tuple[bytes, list[tuple[str, bytes]], bool]:
    """``data`` with every key shape masked, and (label, secret) of each,
    as running KEY_SHAPES one after another would give them; and whether
    one of ``literals`` may be in ``data`` (see :func:`_candidates`)."""
    candidates, seen = _candidates(data, fused, literals)
    if not candidates:
        return data, [], seen
    todo: list[list[int]] = [[] for _ in _SHAPES]
    for at in candidates:
        for i in _BY_FIRST.get(data[at], ()):
            todo[i].append(at)
    text: bytes | bytearray = data
    found: list[tuple[str, bytes]] = []
    # where an earlier shape's mask ends, for the later shapes that may start there
    after_mask: list[list[int]] = [[] for _ in _SHAPES]
    for i, shape in enumerate(_SHAPES):
        places = todo[i]
        if after_mask[i]:
            places = sorted({*places, *after_mask[i]})
        if not places:
            continue
        spans: list[tuple[int, int]] = []
        pos = 0
        keys = _PrivateKeys(text) if i == _PRIVATE_KEY else None
        for at in places:
            if at < pos or (shape.boundary and at and _IS_WORD[text[at - 1]]):
                continue
            if keys is not None:
                end = keys.match(at)
            else:
                m = shape.pattern.match(text, at)
                end = -1 if m is None else m.end()
            if end > at:
                spans.append((at, end))
                pos = end
        if spans:
            if not isinstance(text, bytearray):
                text = bytearray(data)
            n = len(text)
            for start, end in spans:
                found.append((shape.label, bytes(text[start:end])))
                text[start:end] = _mask(end - start)
                if end < n:
                    for later in _BY_FIRST.get(text[end], ()):
                        if later > i:
                            after_mask[later].append(end)
    return (data if not found else bytes(text)), found, seen


def _find_literals(text: bytes, literals: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """Spans of ``literals`` (longest first) in ``text``, as one regex of
    them as alternatives finds them: the leftmost, the longest there, then
    on after it."""
    after = [text.find(v) for v in literals]
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        best, size = -1, 0
        for k, value in enumerate(after):
            if 0 <= value < pos:
                value = after[k] = text.find(literals[k], pos)
            if value >= 0 and (best < 0 or value < best):
                best, size = value, len(literals[k])
        if best < 0:
            return spans
        spans.append((best, best + size))
        pos = best + size


def _redact(data: bytes, rules: Rules) -> tuple[bytes, list[tuple[str, bytes]]]:
    """``data`` masked by ``rules``, and (label, secret) of each mask, in
    the order of the rules (shapes, patterns, literals), each by position."""
    found: list[tuple[str, bytes]]
    literals = rules._literals
    if rules.shapes is KEY_SHAPES:
        fused = rules._fused if len(data) > _SMALL else None
        data, found, seen = _find_shapes(data, fused, literals)
        if not seen:
            literals = ()  # not in the text, nor where patterns mask (see Rules)
    else:
        found = []
        for label, pattern in rules.shapes:
            data = _sub(data, label, pattern, rules, found)
    for label, pattern in rules.patterns:
        data = _sub(data, label, pattern, rules, found)
    if not literals:
        return data, found
    if rules._literal_finder is None:
        spans = _find_literals(data, literals)
    else:
        spans = [m.span() for m in rules._literal_finder.finditer(data)]
    if spans:
        out = bytearray(data)
        for start, end in spans:
            secret = data[start:end]
            found.append((rules.label(secret), secret))
            out[start:end] = _mask(end - start)
        data = bytes(out)
    return data, found


def _sub(data: bytes, label: str, pattern: re.Pattern[bytes], rules: Rules,
         found: list[tuple[str, bytes]]) -> bytes:
    """``data`` with ``pattern``'s matches masked (a match that is a mask
    already, or empty, stays), each added to ``found``."""
    if pattern.search(data) is None:
        return data

    def repl(match: re.Match[bytes]) -> bytes:
        secret = match.group(0)
        if not secret or _is_mask(secret):
            return secret
        found.append((label or rules.label(secret), secret))
        return _mask(len(secret))

    return pattern.sub(repl, data)


def redact_text(data: bytes, location: str, rules: Rules = STANDARD,
                facts: Facts | None = None) -> tuple[bytes, list[Redaction]]:
    """``data`` with every secret replaced by a mask of its length, and the
    facts of what was (also added to ``facts`` when given)."""
    masked, secrets = _redact(data, rules)
    found = [Redaction(location, label, fingerprint(secret)) for label, secret in secrets]
    if facts is not None:
        facts.items.extend(found)
    return masked, found


def redact_str(text: str, location: str, rules: Rules = STANDARD,
               facts: Facts | None = None) -> str:
    """:func:`redact_text` for a string (UTF-8, other bytes kept)."""
    data = text.encode("utf-8", "surrogateescape")
    masked, _ = redact_text(data, location, rules, facts)
    return text if masked == data else masked.decode("utf-8", "surrogateescape")


def redact_body(body: bytes, location: str, facts: Facts, rules: Rules = STANDARD) -> bytes:
    """An identity-coded body with every secret masked in place."""
    return redact_text(body, location, rules, facts)[0]


def redact_json(value: object, location: str, rules: Rules = STANDARD,
                facts: Facts | None = None) -> object:
    """A JSON value with every string (member names too) redacted."""
    if isinstance(value, str):
        return redact_str(value, location, rules, facts)
    if isinstance(value, list):
        return [redact_json(v, location, rules, facts) for v in value]
    if isinstance(value, dict):
        return {redact_str(str(k), location, rules, facts): redact_json(v, location, rules, facts)
                for k, v in value.items()}
    return value


# -- requests and responses --------------------------------------------------------------------


def _redact_headers(headers: Headers, location: str, facts: Facts,
                    rules: Rules = STANDARD) -> Headers:
    out = []
    for name, value in headers:
        secret_header = is_secret_header(name)
        if secret_header and value.rsplit(b" ", 1)[-1] != REDACTED:
            secret = value.split(b" ", 1)[1] if value.lower().startswith(b"bearer ") else value
            facts.add(location, name.decode("latin-1"), secret)
            scheme = value.split(b" ", 1)[0] + b" " if b" " in value.strip() else b""
            value = scheme + REDACTED if name.lower().endswith(b"authorization") else REDACTED
        elif not secret_header:
            value = redact_text(value, location, rules, facts)[0]
        out.append((name, value))
    return tuple(out)


def _query_name(raw: bytes) -> bytes:
    """A query parameter's or form field's name, percent-decoded."""
    return urllib.parse.unquote_to_bytes(raw.replace(b"+", b" "))


def _redact_target(target: bytes, facts: Facts, rules: Rules = STANDARD) -> bytes:
    if b"?" in target:
        path, query = target.split(b"?", 1)
        parts = []
        for part in query.split(b"&"):
            key, eq, value = part.partition(b"=")
            if eq and value and value != REDACTED and is_secret_param(_query_name(key)):
                facts.add("query", key.decode("latin-1"), value)
                part = key + b"=" + REDACTED
            parts.append(part)
        target = path + b"?" + b"&".join(parts)
    return redact_text(target, "target", rules, facts)[0]


#: Where a credential-named JSON member with a string value may begin: its
#: name's opening quote (a word of the name, then ``":"``). One search over a
#: body (RE2 when installed: a model request of 1 MiB in about 2 ms).
_MEMBER_START = (rb'(?i)"[A-Za-z0-9_.\-]{0,60}(?:key|token|secret|passw|pwd|auth|sig|credential)'
                 rb'[A-Za-z0-9_.\-]{0,60}"\s*:\s*"')
_member_start_re2 = _re2_search(_MEMBER_START)
_member_start_re = re.compile(_MEMBER_START)

#: A JSON member with a string value, at its name's opening quote: the name
#: (plain characters only), what separates it from the value, the value
#: (escapes kept).
_MEMBER_AT = re.compile(
    rb'"([A-Za-z0-9_.\-]{1,64})"(\s*:\s*)"([^"\\]{0,65536}(?:\\.[^"\\]{0,65536}){0,4096})"')


def _secret_members(data: bytes) -> list[re.Match[bytes]]:
    """The credential-named members (``_is_secret_member``) of a JSON text
    that have a string value, each right after ``{`` or ``,``, in order."""
    found: list[re.Match[bytes]] = []
    pos = 0
    while True:
        if _member_start_re2 is not None:
            start = _member_start_re2(data, pos)
        else:
            m = _member_start_re.search(data, pos)
            start = -1 if m is None else m.start()
        if start < 0:
            return found
        member = _MEMBER_AT.match(data, start)
        before = start - 1
        while before >= 0 and data[before] in b" \t\r\n":
            before -= 1
        if (member is not None and before >= 0 and data[before] in b"{,"
                and _is_secret_member(member.group(1))):
            found.append(member)
            pos = member.end()
        else:
            pos = start + 1


_FORM_TYPE = b"application/x-www-form-urlencoded"


def _redact_fields(data: bytes, location: str, facts: Facts, form: bool) -> bytes:
    """A request body's credential-named fields masked, each value by a mask
    of its length: members of a JSON text (``{"api_key": "..."}``) and, in
    a form (``form``), fields (``password=...``)."""
    if form:
        parts = []
        for part in data.split(b"&"):
            key, eq, value = part.partition(b"=")
            if eq and value and not _is_mask(value) and is_secret_param(_query_name(key)):
                facts.add(location, key.decode("latin-1"), value)
                part = key + b"=" + _mask(len(value))
            parts.append(part)
        return b"&".join(parts)
    members = _secret_members(data) if b'":' in data or b'" :' in data else []
    if not members:
        return data
    out = bytearray(data)
    for m in members:
        value = m.group(3)
        if value and not _is_mask(value):
            facts.add(location, m.group(1).decode("latin-1"), value)
            out[m.start(3):m.end(3)] = _mask(len(value))
    return bytes(out)


#: A command-line argument that is a header (``-H 'X-Auth-Token: ...'``).
_HEADER_ARGUMENT = re.compile(rb"\A(\s*([A-Za-z0-9_\-]{1,64})\s*:\s*)(\S.*?)\s*\Z", re.S)


def redact_argument(arg: str, location: str, rules: Rules = STANDARD,
                    facts: Facts | None = None) -> str:
    """A command-line argument redacted as text (:func:`redact_str`), then as
    what it may be: a secret header (``X-Subscription-Token: ...``, as
    ``curl -H`` takes it), a URL with credential query parameters
    (``...?access_token=...``), a JSON text or a form with credential-named
    fields (``curl --data``). Each value becomes a mask of its length."""
    facts = facts if facts is not None else Facts()
    arg = redact_str(arg, location, rules, facts)  # (the shapes first: their findings stay)
    data = arg.encode("utf-8", "surrogateescape")
    header = _HEADER_ARGUMENT.match(data)
    if header is not None and not header.group(2).isdigit() and is_secret_header(
            header.group(2)) and not _is_mask(header.group(3)):
        value = header.group(3)
        facts.add(location, header.group(2).decode("latin-1"), value)
        data = header.group(1) + _mask(len(value))
    elif data.lstrip().startswith((b"{", b"[")):
        data = _redact_fields(data, location, facts, form=False)
    elif b"=" in data and not any(c in data for c in b" \t\n"):
        head, mark, query = data.rpartition(b"?")
        data = head + mark + _redact_fields(query, location, facts, form=True)
    return data.decode("utf-8", "surrogateescape")


#: Largest request body whose credential fields :func:`masked_values` reads
#: (a tool's request; bytes).
_FIELDS_MAX = 256 * 1024


def masked_values(request: Request, body: bool = False) -> list[tuple[str, bytes]]:
    """The values of ``request``'s secret headers and query parameters (and,
    ``body``, of its body's credential fields, a body of up to 256 KiB) that
    look like secrets (:func:`plausible_secret`), each labelled
    ``echo:NAME``: what to look for as literals in the rest of its exchange
    (a service that echoes a token back) and in the run's output."""
    out = []
    for name, value in request.headers:
        if is_secret_header(name):
            secret = value.strip().rsplit(b" ", 1)[-1]
            out.append((f"echo:{name.decode('latin-1')}", secret))
    if b"?" in request.target:
        for part in request.target.split(b"?", 1)[1].split(b"&"):
            key, eq, value = part.partition(b"=")
            if eq and is_secret_param(_query_name(key)):
                out.append((f"echo:{key.decode('latin-1')}", value))
                decoded = urllib.parse.unquote_to_bytes(value)
                if decoded != value:
                    out.append((f"echo:{key.decode('latin-1')}", decoded))
    if body and request.body and len(request.body) <= _FIELDS_MAX:
        plain = _plain(request)
        form = any(v.split(b";", 1)[0].strip().lower() == _FORM_TYPE
                   for v in header_values(request.headers, b"content-type"))
        if form:
            for part in plain.split(b"&"):
                key, eq, value = part.partition(b"=")
                if eq and is_secret_param(_query_name(key)):
                    out.append((f"echo:{key.decode('latin-1')}", value))
        elif b'":' in plain or b'" :' in plain:
            out += [(f"echo:{m.group(1).decode('latin-1')}", m.group(3))
                    for m in _secret_members(plain)]
    return [(label, v) for label, v in out
            if v != REDACTED and not _is_mask(v)
            and plausible_secret(v.decode("utf-8", "surrogateescape"))]


def _split_like(data: bytes, sizes: Sequence[int]) -> list[bytes]:
    out, pos = [], 0
    for n in sizes:
        out.append(data[pos:pos + n])
        pos += n
    return out


def _with_length(headers: Headers, old: int, new: int) -> Headers:
    """``Content-Length`` set to ``new`` where it said ``old``, in place."""
    if old == new:
        return headers
    return tuple((k, str(new).encode() if k.lower() == b"content-length"
                  and v.strip() == str(old).encode() else v) for k, v in headers)


def redact_pieces(pieces: Sequence[bytes], headers: Headers, location: str, facts: Facts,
                  rules: Rules = STANDARD, *, fields: bool = False,
                  ) -> tuple[list[bytes], Headers]:
    """A body cut into ``pieces`` (a request's one, a response's frames)
    with every secret masked in its decoded form; ``fields``: credential-named
    JSON members and form fields too (a request's body). A coded body with a
    secret in it is coded again with stored blocks (:mod:`wiretape.codings`),
    one piece per piece, ``Content-Length`` set to match, and a fact
    ``recoded:<codings>`` says so; an unchanged body keeps its bytes. A
    body whose coding cannot be undone is looked at as it is."""
    applied = codings.parse(header_values(headers, b"content-encoding"))
    decoded = codings.decode(pieces, applied) if applied else None
    form = fields and any(v.split(b";", 1)[0].strip().lower() == _FORM_TYPE
                          for v in header_values(headers, b"content-type"))

    def masked_text(whole: bytes) -> bytes:
        if fields:
            whole = _redact_fields(whole, location, facts, form)
        return redact_text(whole, location, rules, facts)[0]

    if decoded is None:
        whole = b"".join(pieces)
        masked = masked_text(whole)
        if masked == whole:
            return list(pieces), headers
        return _split_like(masked, [len(p) for p in pieces]), headers
    whole = b"".join(decoded.pieces)
    masked = masked_text(whole)
    if masked == whole:
        return list(pieces), headers
    plain = _split_like(masked, [len(p) for p in decoded.pieces])
    recoded = codings.encode(decoded, plain, applied)
    facts.add(location, "recoded:" + ",".join(c.decode("latin-1") for c in applied),
              b"".join(pieces))
    old, new = sum(len(p) for p in pieces), sum(len(p) for p in recoded)
    return recoded, _with_length(headers, old, new)


def redact_request(request: Request, rules: Rules = STANDARD) -> tuple[Request, list[Redaction]]:
    """The request with every secret replaced, and the facts of what was."""
    facts = Facts()
    target = _redact_target(request.target, facts, rules)
    headers = _redact_headers(request.headers, "request-header", facts, rules)
    body, headers = redact_pieces([request.body], headers, "request-body", facts, rules,
                                  fields=True)
    redacted = Request(method=request.method, target=target, headers=headers,
                       body=b"".join(body), http_version=request.http_version)
    return redacted, facts.items


def redact_response(response: Response,
                    rules: Rules = STANDARD) -> tuple[Response, list[Redaction]]:
    """The response with secret headers replaced and secrets in its body
    masked, frame by frame (frames keep their timing)."""
    facts = Facts()
    headers = _redact_headers(response.headers, "response-header", facts, rules)
    frames = response.frames
    datas, headers = redact_pieces([f.data for f in frames], headers, "response-body", facts,
                                   rules)
    if any(d != f.data for d, f in zip(datas, frames, strict=True)):
        frames = tuple(Frame(f.offset_ns, d) for f, d in zip(frames, datas, strict=True))
    return replace(response, headers=headers, frames=frames), facts.items


def redact_exchange(exchange: Exchange, rules: Rules = STANDARD, *,
                    redacted: tuple[Request, list[Redaction]] | None = None,
                    ) -> tuple[Exchange, list[Redaction]]:
    """The exchange as it is stored: request, response and error text
    redacted. ``redacted``: the request already redacted (and its facts),
    as :func:`redact_request` gave it. A tool exchange's (``tool:``
    origin): the values of its request's masked headers, query parameters
    and credential body fields that look like secrets are masked wherever
    else the exchange has them (``echo:NAME``: a service that echoes a
    token back).
    CPU work (a coded body is undone
    and done again): the recorder calls it off the event loop."""
    request, facts = redacted or redact_request(exchange.request, rules)
    if exchange.kind == "tool":  # (a provider's key has a known shape, or is the env's)
        rules = _with_echoed(rules, tuple(masked_values(exchange.request, body=True)))
    response = exchange.response
    if response is not None:
        response, more = redact_response(response, rules)
        facts = facts + more
    error = exchange.error
    if error is not None:
        error = redact_str(error, "error", rules, Facts(facts))
    messages = exchange.messages
    if messages:
        messages, more = redact_messages(messages, rules)
        facts = facts + more
    return replace(exchange, request=request, response=response, error=error,
                   messages=messages), facts


#: Rules with a request's echoed values added, by (rules, values): a tool
#: sends the same key on every request (rules are compiled once for it).
_ECHOED: dict[tuple[int, tuple[tuple[str, bytes], ...]], tuple[Rules, Rules]] = {}


def _with_echoed(rules: Rules, values: tuple[tuple[str, bytes], ...]) -> Rules:
    """``rules`` plus those of ``values`` they do not mask already."""
    if not values:
        return rules
    key = (id(rules), values)
    known = _ECHOED.get(key)
    if known is not None and known[0] is rules:
        return known[1]
    more = rules.with_literals((label, v) for label, v in values
                               if redact_text(v, "", rules)[0] == v)
    if len(_ECHOED) >= 256:
        _ECHOED.clear()
    _ECHOED[key] = (rules, more)
    return more


def redact_messages(messages: Sequence[Message], rules: Rules = STANDARD,
                    ) -> tuple[tuple[Message, ...], list[Redaction]]:
    """WebSocket and stdio MCP messages with every secret in their
    payloads (a close's reason too) masked, as a body is, and the
    credential-named JSON members as in a request's body
    (``{"password": "..."}``, :func:`redact_message`): ``client-message``
    or ``server-message``; and the facts of what was."""
    facts = Facts()
    out = []
    for m in messages:
        location = f"{m.direction}-message"
        payload = redact_message(m.payload, location, rules, facts)
        out.append(m if payload == m.payload else replace(m, payload=payload))
    return tuple(out), facts.items


def redact_message(data: bytes, location: str, rules: Rules = STANDARD,
                   facts: Facts | None = None) -> bytes:
    """A text message's payload (JSON, as a WebSocket or JSON-RPC message
    is) with its credential-named members' string values masked (each by a
    mask of its length, as in a request's body), then every secret in it."""
    facts = facts if facts is not None else Facts()
    return redact_text(_redact_fields(data, location, facts, form=False), location, rules,
                       facts)[0]


# -- the replay side ---------------------------------------------------------------------------


def _plain(request: Request) -> bytes:
    applied = codings.parse(header_values(request.headers, b"content-encoding"))
    if not applied:
        return request.body
    decoded = codings.decode([request.body], applied)
    return b"".join(decoded.pieces) if decoded is not None else request.body


def learn(recorded: bytes, live: bytes, prints: Mapping[str, str],
          limit: int = 256) -> list[tuple[str, bytes]]:
    """Secrets of ``live`` found where ``recorded`` has a mask: the live
    bytes at the mask's place (found by the bytes before it) whose
    fingerprint is one of ``prints`` (fingerprint to label)."""
    found: dict[bytes, str] = {}
    for count, m in enumerate(_MASK.finditer(recorded)):
        if count >= limit:
            break
        start, n = m.start(), m.end() - m.start()
        before = recorded[max(0, start - 24):start]
        places = [0] if not before else []
        pos = live.find(before) if before else -1
        while pos >= 0 and len(places) < 64:
            places.append(pos + len(before))
            pos = live.find(before, pos + 1)
        for at in places:
            candidate = live[at:at + n]
            if (len(candidate) == n and candidate != m.group(0)
                    and fingerprint(candidate) in prints):
                found[candidate] = prints[fingerprint(candidate)]
    return [(f"learned:{label}", v) for v, label in found.items()]


class LiveRedactor:
    """The replay side of redaction: ``rules`` (the standard ones and the
    replaying environment's secrets), and secrets learned during the replay:
    a value whose fingerprint the run recorded as redacted (``prints``,
    fingerprint to label) is masked from the moment it is met, in the
    environment or in a live text at the place of a mask in the recorded
    one. So a replay that sends a secret the recording had (or that
    ``scrub`` removed) compares equal, as it would have before."""

    def __init__(self, rules: Rules = STANDARD, prints: Mapping[str, str] | None = None) -> None:
        self.rules = rules
        self.prints = dict(prints or {})
        # per recorded request (by identity, held so its id stays its own):
        # its plain body, and whether its target and plain body have masks
        self._recorded: dict[int, tuple[Request, bytes, bool, bool]] = {}

    def learn_environment(self, env: Mapping[str, str]) -> None:
        """Learn the values in ``env`` the run recorded as redacted."""
        if not self.prints:
            return
        found = []
        for value in env.values():
            for part in {value, *re.split(r"[\s=:,;]+", value)}:
                raw = part.encode("utf-8", "surrogateescape")
                if len(raw) >= 4 and fingerprint(raw) in self.prints:
                    found.append((f"learned:{self.prints[fingerprint(raw)]}", raw))
        self.rules = self.rules.with_literals(found)

    def learn_from(self, recorded: bytes, live: bytes) -> bool:
        """Learn from ``live`` where ``recorded`` has masks; True when
        something new was learned."""
        if not self.prints or recorded == live or not _MASK.search(recorded):
            return False
        return self._learn(recorded, live)

    def _learn(self, recorded: bytes, live: bytes) -> bool:
        before = self.rules
        self.rules = self.rules.with_literals(learn(recorded, live, self.prints))
        return self.rules is not before

    def _seen(self, request: Request) -> tuple[bytes, bool, bool]:
        """A recorded request's plain body, and whether its target and that
        body have masks: worked out once, however many live requests meet it."""
        known = self._recorded.get(id(request))
        if known is None or known[0] is not request:
            if len(self._recorded) >= 4096:
                self._recorded.clear()
            plain = _plain(request)
            known = (request, plain, _MASK.search(request.target) is not None,
                     _MASK.search(plain) is not None)
            self._recorded[id(request)] = known
        return known[1], known[2], known[3]

    def request(self, request: Request, recorded: Sequence[Request]) -> Request:
        """``request`` redacted for comparing with ``recorded`` (the requests
        it may be compared with): learning from those on its route when
        none is equal yet."""
        live, _ = redact_request(request, self.rules)
        if not self.prints:
            return live
        path = live.path
        route = [r for r in recorded if r.method == live.method and r.path == path]
        if any(r.target == live.target and r.body == live.body for r in route):
            return live
        plain: bytes | None = None
        learned = False
        for r in route[:8]:
            body, target_masked, body_masked = self._seen(r)
            if target_masked and r.target != live.target:
                learned = self._learn(r.target, live.target) or learned
            if body_masked:
                plain = _plain(live) if plain is None else plain
                if body != plain:
                    learned = self._learn(body, plain) or learned
        return redact_request(request, self.rules)[0] if learned else live

    def text(self, data: bytes, location: str, recorded: bytes | None = None,
             facts: Facts | None = None, *, message: bool = False) -> bytes:
        """A live text (output, a file) redacted, learning from ``recorded``
        (the recording's side of it) first; ``message``: a text message's
        payload, its credential-named JSON members masked too
        (:func:`redact_message`)."""
        if recorded is not None:
            self.learn_from(recorded, data)
        if message:
            return redact_message(data, location, self.rules, facts)
        return redact_text(data, location, self.rules, facts)[0]


def fingerprints(facts: Iterable[Redaction]) -> dict[str, str]:
    """Fingerprint to label of recorded redactions (what a replay may learn)."""
    return {f.fingerprint: f.name for f in facts if not f.name.startswith("recoded:")}

