"""Values that cross between the parts of wiretape: requests, responses,
frames, exchanges, origins and run metadata, and the JSON shapes a run file
stores and gives back (run metadata, the connect report, replay settings,
replay rows with their divergence explanations, and the outcome).

The values are frozen dataclasses of bytes, ints and strings; the JSON
shapes are TypedDicts (the producers build them, the store writes and reads
them, everyone else reads them). Nothing here knows about sockets, SQLite or
the CLI. Header names and values are kept as raw bytes in the order and case
they crossed the wire.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypeAlias, TypedDict, cast

from wiretape.limits import DEFAULT_MAX_BODY as DEFAULT_MAX_BODY

Header = tuple[bytes, bytes]
Headers = tuple[Header, ...]



#: The origin of an exchange made by one of the agent's tools (``--tools``),
#: not by its model client: ``tool:`` and the URL's scheme and authority.
TOOL_ORIGIN_PREFIX = "tool:"
#: The origin of a stdio MCP server's session (``wiretape mcp``): ``mcp:`` and
#: the server's name.
MCP_ORIGIN_PREFIX = "mcp:"
ExchangeKind: TypeAlias = Literal["model", "tool", "mcp"]


def exchange_kind(origin: str) -> ExchangeKind:
    """``model`` for an exchange with a model provider (an origin of the run's
    table), ``tool`` for one a tool made (``tool:`` origin), ``mcp`` for a
    stdio MCP session (``mcp:`` origin)."""
    if origin.startswith(TOOL_ORIGIN_PREFIX):
        return "tool"
    if origin.startswith(MCP_ORIGIN_PREFIX):
        return "mcp"
    return "model"


class Ending(enum.StrEnum):
    """How a recorded exchange ended (DESIGN.md, "The run file")."""

    COMPLETE = "complete"
    ORIGIN_RESET = "origin_reset"
    CLIENT_GONE = "client_gone"
    ORIGIN_UNREACHABLE = "origin_unreachable"
    TIMEOUT = "timeout"


def header_values(headers: Headers, name: bytes) -> list[bytes]:
    """All values of header ``name`` (case-insensitive), in wire order."""
    lname = name.lower()
    return [v for k, v in headers if k.lower() == lname]


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of header ``name`` (case-insensitive), or None."""
    values = header_values(headers, name)
    return values[0] if values else None


@dataclass(frozen=True)
class Request:
    """An HTTP request as it arrived at the proxy.

    ``target`` is the request-target (path and query, RFC 9112 §3.2);
    ``http_version`` is e.g. ``b"1.1"``; ``body`` is the whole body.
    """

    method: bytes
    target: bytes
    headers: Headers
    body: bytes
    http_version: bytes = b"1.1"

    @property
    def path(self) -> bytes:
        """The target without its query string."""
        return self.target.split(b"?", 1)[0]


@dataclass(frozen=True)
class Frame:
    """One piece of a response body as read from the origin.

    ``offset_ns`` is nanoseconds from the start of the request.
    """

    offset_ns: int
    data: bytes


@dataclass(frozen=True)
class Response:
    """An origin's response: status line, ordered raw headers, body frames.

    The frames concatenate to the body exactly as it came off the wire after
    de-chunking only (still compressed where ``Content-Encoding`` says so).
    """

    status: int
    reason: bytes
    headers: Headers
    frames: tuple[Frame, ...]
    http_version: bytes = b"1.1"

    @property
    def body(self) -> bytes:
        return b"".join(f.data for f in self.frames)


class Opcode(enum.StrEnum):
    """A WebSocket message's kind (RFC 6455 §5.2, §11.8): a whole data
    message (its fragments joined) or a control frame."""

    TEXT = "text"
    BINARY = "binary"
    PING = "ping"
    PONG = "pong"
    CLOSE = "close"


#: The close (code, reason) wiretape sends an origin whose client went away
#: without a close (RFC 6455 §7.4.1: 1001, going away): the recorder sends
#: it, and a replay knows the origin's answer to it by it.
CLIENT_WENT_AWAY: tuple[int, str] = (1001, "the client went away")


@dataclass(frozen=True)
class Message:
    """One WebSocket message after an upgrade (DESIGN.md, "WebSockets").

    ``direction`` is ``client`` (agent to origin) or ``server``;
    ``payload`` the application data as the application saw it (text as
    its UTF-8 bytes; no extension is negotiated, so nothing is compressed);
    for a close, ``payload`` is the reason's UTF-8 bytes and ``close_code``
    the status code (None: the frame carried none, RFC 6455 §7.1.5).
    ``offset_ns`` is nanoseconds from the start of the handshake to the
    message's last frame.
    """

    direction: Literal["client", "server"]
    opcode: Opcode
    payload: bytes
    offset_ns: int
    close_code: int | None = None


@dataclass(frozen=True)
class Exchange:
    """One request and its response as they crossed the proxy.

    ``seq`` is the order of request arrival (0-based) within the run;
    ``started_at_ns`` is wall-clock epoch ns; ``ttfb_ns`` and
    ``duration_ns`` are ns from the start of the request. When the origin
    never answered (``ending`` says why, ``ttfb_ns`` is None), ``response``
    is the error wiretape gave the agent instead, or None in runs that did
    not keep it (older, imported).
    """

    seq: int
    connection_id: int
    origin: str
    started_at_ns: int
    request: Request
    response: Response | None
    ending: Ending
    ttfb_ns: int | None
    duration_ns: int
    error: str | None = None
    #: the WebSocket messages after a 101 answer to an upgrade, in order
    messages: tuple[Message, ...] = ()

    @property
    def kind(self) -> ExchangeKind:
        """What the exchange was for, read from its origin (``exchange_kind``)."""
        return exchange_kind(self.origin)

    @property
    def answered_by_wiretape(self) -> bool:
        """Whether ``response`` is the answer wiretape made itself because
        the origin never answered (a 502 when it was unreachable, a 504 when
        it timed out before a response: ``proxy.shapes.unreachable_response``),
        not the provider's."""
        return (self.response is not None and self.ttfb_ns is None
                and self.ending in (Ending.ORIGIN_UNREACHABLE, Ending.TIMEOUT))


@dataclass(frozen=True)
class Origin:
    """A model provider endpoint and the local port that stands for it.

    ``upstream`` is ``scheme://host[:port][/base-path]``; ``env_vars`` are
    the child's variables pointed at the proxy for this origin.
    """

    name: str
    upstream: str
    port: int
    env_vars: tuple[str, ...] = ()


@dataclass(frozen=True)
class Redaction:
    """A secret removed before it reached the disk.

    ``location`` is ``request-header``, ``response-header``, ``query`` or
    ``request-body``/``response-body``; ``name`` the header or parameter (or
    the key shape for bodies); ``fingerprint`` the first 8 hex digits of the
    secret's sha256, so two runs can be seen to use the same key.
    """

    location: str
    name: str
    fingerprint: str


@dataclass(frozen=True)
class RunInfo:
    """A run's metadata (DESIGN.md, "The run file")."""

    run_id: str
    wiretape_version: str
    argv: tuple[str, ...]
    cwd: str
    env_names: tuple[str, ...]
    origins: tuple[Origin, ...]
    started_at_ns: int
    ended_at_ns: int | None = None
    exit_status: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    mode: str = "record"
    extra: dict[str, str] = field(default_factory=dict)
    #: hosts whose TLS was intercepted (``--intercept``); empty otherwise
    intercept: tuple[str, ...] = ()
    #: the allowances recorded with the run (``record --allow``): learned
    #: correspondences its replays accept (matching.correspond.ALLOWANCES)
    allow: tuple[str, ...] = ()
    #: the names (never the values) of the variables that carried the
    #: agent's credentials when it was recorded (``OPENAI_API_KEY``): a
    #: replay gives the agent a placeholder for each one its environment lacks
    credential_env: tuple[str, ...] = ()


# --- JSON ---------------------------------------------------------------------------------------

#: A JSON value as :func:`json.loads` returns it (arbitrary JSON, such as a
#: provider's body, whose shape is checked where it is read).
JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

#: ``[where, recorded, replayed]``: a value that differs between a recording
#: and a replay (``where`` is ``line N`` and/or a JSON pointer).
Difference: TypeAlias = list[str]


# --- run metadata (the ``meta`` table: one JSON value per key) ----------------------------------


class TunnelJSON(TypedDict):
    """A host:port tunnelled untouched while recording (``--intercept``)."""

    host: str
    port: int
    connections: int
    bytes_up: int
    bytes_down: int
    error: str | None


class ConnectReportJSON(TypedDict):
    """What the forward proxy saw (``--intercept``): requests intercepted by
    host, clients that rejected the run's CA (host to what happened),
    tunnels, and CONNECTs refused during a replay (``host:port`` to count)."""

    intercepted: dict[str, int]
    rejected: dict[str, str]
    tunnels: list[TunnelJSON]
    refused: dict[str, int]


class SnapshotPolicyJSON(TypedDict):
    """What the snapshots of a run took (snapshot.tree.Policy): patterns
    taken anyway, binary files taken, and whether anything was left out
    (False: a run recorded before there were policies)."""

    include: list[str]
    binary: bool
    guarded: bool


class ScrubJSON(TypedDict):
    """One ``wiretape scrub`` of a run: when, the rules' labels, and how
    many replacements it made in each place."""

    at_ns: int
    rules: list[str]
    counts: dict[str, int]


class RunMeta(TypedDict, total=False):
    """The ``meta`` table of a run file, key to JSON value (RunInfo is read
    out of it). Written in parts: at the start, as the run goes, at its end."""

    run_id: str
    wiretape_version: str
    argv: list[str]
    cwd: str
    env_names: list[str]
    started_at_ns: int
    mode: str  # record, serve or import
    extra: dict[str, str]
    ended_at_ns: int
    exit_status: int | None
    stdout: str  # latin-1
    stderr: str  # latin-1
    intercept: list[str]
    connect: ConnectReportJSON
    snapshot_policy: SnapshotPolicyJSON
    #: per snapshot id (as text): the paths left out, as ``[path, reason]``
    left_out: dict[str, list[list[str]]]
    scrubbed: list[ScrubJSON]
    allow: list[str]
    #: RunInfo.credential_env (absent in runs recorded before it)
    credential_env: list[str]


# --- replays -------------------------------------------------------------------------------------

#: How a replay request was matched (playback.decide.Kind).
ReplayKind: TypeAlias = Literal["exact", "substituted", "equivalent", "diverged", "missing"]
#: How a replay was run (playback.decide.Mode).
ReplayMode: TypeAlias = Literal["strict", "diagnostic"]
#: How the sandbox was shown to the agent: at the original paths, with paths
#: mapped, or no sandbox (no snapshot).
SandboxPaths: TypeAlias = Literal["same-paths", "mapped", "none"]


class ReplaySettingsJSON(TypedDict):
    """The ``settings`` a replay was run with, stored when it starts.
    ``substitutions`` are ``[OLD, NEW]`` pairs; ``ports`` origin to port."""

    pace: Literal["fast", "recorded"]
    argv: list[str]
    cwd: str
    allow_substitutions: bool
    substitutions: list[list[str]]
    #: the learned correspondences accepted (``ids``, ``clock``, ``key-order``)
    allow: NotRequired[list[str]]
    #: file patterns the outcome leaves out (``--outcome-ignore``)
    outcome_ignore: NotRequired[list[str]]
    sandbox: str | None
    paths: SandboxPaths
    ports: dict[str, int]


class ToolRefJSON(TypedDict):
    """matching.report.ToolRef: the tool call whose result a span lies in."""

    call_id: str
    name: str | None
    pointer: str


class SpanJSON(TypedDict):
    """matching.report.Span: one differing place in a request body."""

    pointer: str | None
    offset: int
    recorded: str
    live: str
    recorded_context: str
    live_context: str
    kind: str  # a matching.kinds.SpanKind value
    bytes_differ: int
    tool: ToolRefJSON | None
    change: Literal["changed", "added", "removed"]
    element: str | None


class HeaderDiffJSON(TypedDict):
    """matching.report.HeaderDiff: a header whose values differ."""

    name: str
    recorded: list[str]
    live: list[str]
    semantic: bool


class ExplanationJSON(TypedDict):
    """matching.report.Explanation: how a live request differs from a
    recorded one. ``*_differs`` are ``[recorded, live]`` or None."""

    bytes_differ: int
    edit_distance: int | None
    edit_distance_capped: bool
    spans: list[SpanJSON]
    spans_omitted: int
    kind_summary: list[str]
    target_differs: list[str] | None
    method_differs: list[str] | None
    header_differences: list[HeaderDiffJSON]
    first_line: str


class LearnedJSON(TypedDict):
    """One learned correspondence that fired (matching.correspond): how many
    values it made equivalent, where (pointers, at most 10; ``/a#/b`` is
    ``/b`` inside the JSON text held by the string at ``/a``), the first
    examples as ``[recorded, live]`` and, for ``clock``, the learned shift
    (live minus recorded, seconds)."""

    rule: str
    count: int
    pointers: list[str]
    examples: list[list[str]]
    shift_s: NotRequired[float]


class RequestDetail(TypedDict):
    """What decided a replay request's kind: the fields that differ, the
    informational headers that differ, the body's differing bytes, the
    substitutions that fired (``[OLD, NEW, times]``), and for a diverged or
    substituted request the explanation of the difference."""

    fields: list[str]
    header_notes: list[str]
    body_bytes_differ: int
    first_body_offset: int | None
    substitutions: list[list[str | int]]
    explanation: NotRequired[ExplanationJSON]
    #: the learned correspondences that made it equivalent (or would have)
    learned: NotRequired[list[LearnedJSON]]
    #: the rules it needed that were not allowed (then it is diverged)
    not_allowed: NotRequired[list[str]]
    #: the first difference no learned rule explains (a diverged request)
    unexplained: NotRequired[str]
    #: the tool origin the request was made to (``tool:https://host``),
    #: for a tool exchange's request (``--tools``) only
    origin: NotRequired[str]
    #: a WebSocket session served after this handshake: its messages' decisions
    messages: NotRequired[MessagesJSON]


class MessageDecisionJSON(TypedDict):
    """How one live client message of a replayed WebSocket session was
    decided: ``index`` counts the live client messages from 0, ``recorded``
    is the recorded message's index among the session's messages (None:
    missing), ``kind`` as a request's (ReplayKind); a diverged or
    substituted one has the explanation of its payload's difference, an
    equivalent one (or one diverged for want of an allowance) the learned
    correspondences it needed, as a request's detail has them."""

    index: int
    kind: ReplayKind
    recorded: int | None
    opcode: str
    size: int
    explanation: NotRequired[ExplanationJSON]
    #: the declared substitutions that fired, ``[OLD, NEW, times]``
    substitutions: NotRequired[list[list[str | int]]]
    learned: NotRequired[list[LearnedJSON]]
    not_allowed: NotRequired[list[str]]
    unexplained: NotRequired[str]
    #: an MCP request whose JSON-RPC id differed: ``[recorded, live]`` (the
    #: live id was read as the recorded one, and answered with its own)
    rpc_id: NotRequired[list[JSONValue]]
    #: an MCP message's JSON-RPC method (a request's or a notification's)
    method: NotRequired[str]


class MessagesJSON(TypedDict):
    """A replayed WebSocket session's messages: the decisions of the live
    client messages, the recorded client messages no live one matched
    (``unused``), and the recorded server messages never sent
    (``not_sent``), by index in the session. (A result written before
    ``not_sent`` existed has both in ``unused``.)"""

    decisions: list[MessageDecisionJSON]
    unused: list[int]
    not_sent: NotRequired[list[int]]
    #: how the session ended, when it was not a finished closing handshake
    #: (a client that never answered a close), in words
    ending: NotRequired[str]


class ReplayRow(TypedDict):
    """One live request of a replay and how it was answered, written as it
    is decided (``index`` counts from 0; ``seq`` is the recorded exchange it
    consumed, None for missing). Read back, it has ``decided_at_ns``."""

    index: int
    kind: ReplayKind
    seq: int | None
    served: bool
    method: str  # latin-1
    target: str  # latin-1
    decided_at_ns: NotRequired[int]
    detail: RequestDetail


# --- the outcome of a replay ----------------------------------------------------------------------


class Facet(TypedDict):
    """What every part of an outcome has: ``same`` (None: not compared)."""

    same: bool | None


class ExitStatusFacet(Facet):
    """Both exit statuses; ``stderr``, when the replayed agent exited
    non-zero: the first lines of what it wrote there (and the last ones,
    when it wrote more), and ``command``, the agent's command line as a
    shell would read it (secrets masked)."""

    recorded: int | None
    replayed: int | None
    stderr: NotRequired[list[str]]
    command: NotRequired[str]


class StdoutFacet(Facet):
    """``volatile`` names the timestamps and timings set aside (``2
    timestamps``); ``real`` lists the first real differences; ``diff`` is a
    unified diff, cut short."""

    recorded_bytes: int
    replayed_bytes: int
    volatile: str
    real: list[Difference]
    diff: str


class FileSides(TypedDict):
    """A path and each side's change to it (``modified (12 bytes)``,
    ``unchanged``)."""

    path: str
    recorded: str
    replayed: str


class FileDifference(FileSides):
    """A file the replay changed differently; ``real`` is there when both
    sides' bytes were known; the diffs are each side's, cut short."""

    real: NotRequired[list[Difference]]
    recorded_diff: str
    replayed_diff: str


class FileVolatile(FileSides):
    """A file whose bytes differ only in timestamps and timings: what
    differed (``values``), how many, and the first few."""

    values: str
    count: int
    examples: list[Difference]


class FilesFacet(Facet):
    """Either not compared (``note`` says why), or compared: how many paths
    the replay changed, and the first differing and volatile files with
    their counts."""

    note: NotRequired[str]
    changed: NotRequired[int]
    differing: NotRequired[list[FileDifference]]
    differing_count: NotRequired[int]
    volatile: NotRequired[list[FileVolatile]]
    volatile_count: NotRequired[int]
    #: paths left out (``--outcome-ignore``)
    ignored: NotRequired[list[str]]
    #: files whose names differ only by learned values, ``[recorded, replayed]``
    paired: NotRequired[list[list[str]]]


class IsolationFacet(Facet):
    """What was and was not isolated, in words, and the host names the
    agent looked up (``--offline``)."""

    said: list[str]
    dns_queries: list[str]


class SandboxFacet(Facet):
    paths: SandboxPaths
    notes: Sequence[str]
    kept: str | None


class InterceptFacet(Facet, ConnectReportJSON):
    """What the forward proxy saw during an intercepting replay."""


class StoppedFacet(Facet):
    reason: str


class InterruptedFacet(Facet):
    """A replay interrupted by SIGINT or SIGTERM (``signal`` its name): its
    verdict is not a pass, and ``exit_code`` is 128 + the signal's number."""

    signal: str
    exit_code: int


class Outcome(TypedDict, total=False):
    """What a replay left behind compared with the recording, one facet per
    part; ``exit_status``, ``stdout`` and ``files`` decide whether the
    outcome is the same. Empty when no command ran."""

    exit_status: ExitStatusFacet
    stdout: StdoutFacet
    files: FilesFacet
    isolation: IsolationFacet
    sandbox: SandboxFacet
    intercept: InterceptFacet
    stopped: StoppedFacet
    interrupted: InterruptedFacet


#: The facets whose sameness is the outcome's.
COMPARED_FACETS = ("exit_status", "stdout", "files")


def facets(outcome: Outcome) -> list[tuple[str, Facet]]:
    """Each facet of ``outcome`` with its name, in stored order."""
    # Every member of an Outcome is a Facet; a TypedDict's items() is typed
    # (str, object) only.
    return [(name, cast(Facet, facet)) for name, facet in outcome.items()]


class ReplayRecord(TypedDict):
    """A replay as the run file keeps it: its id, start and end (None: it
    did not finish), mode, settings, the agent's exit status and the outcome
    (None until it finished)."""

    id: str
    started_at_ns: int
    ended_at_ns: int | None
    mode: ReplayMode
    settings: ReplaySettingsJSON
    exit_status: int | None
    outcome: Outcome | None
