"""The replay decision: which recorded exchange answers a live request.

Pure: values in, a value out; no sockets, no clock, no disk. The rules are
DESIGN.md's "Matching and the verdict": among the recorded exchanges not yet
served on the same method and path, in sequence order, the first equal byte
for byte is exact; else the first equal after declared substitutions is
substituted; else the first equal up to learned correspondences
(matching.correspond: ids, clock shift, key order) is equivalent when every
rule it needs is allowed, and diverged (naming the rules) when not; else the
first is diverged; with none left the request is missing.

Nothing is done twice: what is left is a :class:`Remaining`, indexed the way
these rules look (an exact request is a lookup and one byte comparison), and
keeping what was read from a recorded body (its text, a recent JSON tree);
only the chosen request's difference is measured.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from wiretape.matching import correspond
from wiretape.matching.correspond import Equivalence, Learned
from wiretape.matching.headers import DEFAULT_SEMANTIC_HEADERS
from wiretape.matching.regions import differing_region
from wiretape.model import Headers, LearnedJSON, Request

#: Bytes up to which the replayer works on its event loop, a thread hop
#: costing more than the work: a live request this small (target and body)
#: is redacted there when no recorded request on its route holds a mask to
#: learn from, and decided there when it is exact (``proxy.replay``); a live
#: WebSocket message this small is decided there when it is not exact
#: (``proxy.ws_replay``; a larger one off the loop).
INLINE_BYTES = 4096


class Kind(enum.StrEnum):
    EXACT = "exact"
    SUBSTITUTED = "substituted"
    EQUIVALENT = "equivalent"
    DIVERGED = "diverged"
    MISSING = "missing"


class Mode(enum.StrEnum):
    STRICT = "strict"
    DIAGNOSTIC = "diagnostic"


@dataclass(frozen=True)
class Substitution:
    """A declared substitution ``old=new``: where the recording has ``old``
    the live run has ``new`` (a path moved into a sandbox, say). Before
    comparing, ``new`` is mapped back to ``old`` in the live request's
    target and body (literal bytes)."""

    old: bytes
    new: bytes


@dataclass(frozen=True)
class Policy:
    mode: Mode = Mode.STRICT
    semantic_headers: tuple[bytes, ...] = DEFAULT_SEMANTIC_HEADERS
    substitutions: tuple[Substitution, ...] = ()
    allow_substitutions: bool = False
    #: the learned correspondences accepted (correspond.Rule values)
    allow: frozenset[str] = frozenset()
    #: how far a clock reading may stray from the learned shift (seconds):
    #: the time that passes differently in the recording and the replay
    clock_tolerance_s: float = 600.0
    #: when the recording ran (epoch seconds, first and last; None: unknown)
    recorded_span: tuple[float, float] | None = None


@dataclass(frozen=True)
class Candidate:
    """A recorded request still available to be served."""

    seq: int
    request: Request


@dataclass(frozen=True)
class Comparison:
    """How a live request differs from one recorded request.

    ``fields`` names what decided the mismatch (``target``, ``body``,
    ``header:<name>``); ``header_notes`` lists non-semantic header names
    whose values differ (informational only).
    """

    fields: tuple[str, ...] = ()
    header_notes: tuple[str, ...] = ()
    body_bytes_differ: int = 0
    first_body_offset: int | None = None

    @property
    def equal(self) -> bool:
        return not self.fields


@dataclass(frozen=True)
class Decision:
    """What to do with a live request.

    ``serve`` is True when the recorded response of ``seq`` is to be sent;
    False means reject with an error response. ``stop`` asks the shell to
    stop the replay (strict mode).
    """

    kind: Kind
    seq: int | None
    serve: bool
    stop: bool
    comparison: Comparison = field(default_factory=Comparison)
    substitutions_fired: tuple[tuple[str, str, int], ...] = ()
    #: what the replay knows once this request is answered (None: unchanged)
    learned: Learned | None = None
    #: the learned correspondences that fired, and those not allowed
    rules: tuple[LearnedJSON, ...] = ()
    not_allowed: tuple[str, ...] = ()
    #: for a diverged request: the first difference no learned rule explains
    unexplained: str | None = None


def _header_map(headers: Headers, names: Sequence[bytes]) -> dict[bytes, list[bytes]]:
    wanted = set(names)
    out: dict[bytes, list[bytes]] = {}
    for k, v in headers:
        lk = k.lower()
        if lk in wanted:
            out.setdefault(lk, []).append(v)
    return out


def _all_header_map(headers: Headers) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for k, v in headers:
        out.setdefault(k.lower(), []).append(v)
    return out


def compare(live: Request, recorded: Request, policy: Policy) -> Comparison:
    """Compare on method, target, body bytes and the semantic headers."""
    return _compare(live, recorded, policy, live.body == recorded.body)


def _compare(live: Request, recorded: Request, policy: Policy, same_body: bool) -> Comparison:
    fields: list[str] = []
    if live.method != recorded.method:
        fields.append("method")
    if live.target != recorded.target:
        fields.append("target")
    differ, first = 0, None
    if not same_body:
        fields.append("body")
        region = differing_region(recorded.body, live.body)
        if region is not None:
            differ, first = region.size, region.rec_start
    sem_live = _header_map(live.headers, policy.semantic_headers)
    sem_rec = _header_map(recorded.headers, policy.semantic_headers)
    for name in policy.semantic_headers:
        if sem_live.get(name) != sem_rec.get(name):
            fields.append("header:" + name.decode("latin-1"))
    all_live, all_rec = _all_header_map(live.headers), _all_header_map(recorded.headers)
    notes = sorted(
        name.decode("latin-1")
        for name in set(all_live) | set(all_rec)
        if name not in policy.semantic_headers and all_live.get(name) != all_rec.get(name)
    )
    return Comparison(tuple(fields), tuple(notes), differ, first)


def _same_semantic_headers(live: Request, recorded: Request, policy: Policy) -> bool:
    wanted = policy.semantic_headers
    return _header_map(live.headers, wanted) == _header_map(recorded.headers, wanted)


class Remaining:
    """The recorded requests not yet served, in the order given (sequence
    order), looked up the way :func:`decide` compares them: by method and
    path, and by method, target and body length (then the bytes: an exact
    match costs a dict lookup and one byte comparison). ``consume`` takes
    one out in O(1). Seqs are unique.

    Also what a decision reads from a recorded body, read once: its text
    (UTF-8, None when it is not), and the JSON trees of the few bodies
    compared most recently (a tree is only read, never changed)."""

    #: JSON trees kept (bodies of up to a few MB each)
    TREES = 4

    def __init__(self, candidates: Iterable[Candidate] = ()) -> None:
        self._all: dict[int, Candidate] = {}
        self._routes: dict[tuple[bytes, bytes], dict[int, Candidate]] = {}
        self._bytes: dict[tuple[bytes, bytes, int], dict[int, Candidate]] = {}
        self._texts: dict[int, str | None] = {}
        self._trees: OrderedDict[int, tuple[str, object]] = OrderedDict()
        for cand in candidates:
            self._all[cand.seq] = cand
            self._routes.setdefault(_route_key(cand.request), {})[cand.seq] = cand
            self._bytes.setdefault(_bytes_key(cand.request), {})[cand.seq] = cand

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self._all.values())

    def __contains__(self, seq: object) -> bool:
        return seq in self._all

    def seqs(self) -> list[int]:
        """The seqs left, in order."""
        return list(self._all)

    def route(self, method: bytes, path: bytes) -> list[Candidate]:
        """Those with this method and path (the target without its query), in order."""
        found = self._routes.get((method, path))
        return list(found.values()) if found else []

    def has_route(self, method: bytes, path: bytes) -> bool:
        """Whether any is left with this method and path."""
        return (method, path) in self._routes

    def same_bytes(self, request: Request) -> Iterator[Candidate]:
        """Those whose method, target and body equal ``request``'s, in order."""
        found = self._bytes.get(_bytes_key(request))
        if found:
            for cand in list(found.values()):
                if cand.request.body == request.body:
                    yield cand

    def consume(self, seq: int) -> None:
        """Take ``seq`` out. Raises KeyError when it is not left."""
        cand = self._all.pop(seq)
        route = _route_key(cand.request)
        del self._routes[route][seq]
        if not self._routes[route]:
            del self._routes[route]
        same = _bytes_key(cand.request)
        del self._bytes[same][seq]
        if not self._bytes[same]:
            del self._bytes[same]
        self._texts.pop(seq, None)
        self._trees.pop(seq, None)

    def text(self, cand: Candidate) -> str | None:
        """The body of ``cand`` as text (None: not UTF-8), decoded once."""
        if cand.seq not in self._texts:
            try:
                self._texts[cand.seq] = cand.request.body.decode("utf-8")
            except UnicodeDecodeError:
                self._texts[cand.seq] = None
        return self._texts[cand.seq]

    def tree(self, cand: Candidate, text: str) -> object:
        """``text`` (the body of ``cand``) read as correspond.document does;
        kept for the next decisions."""
        kept = self._trees.get(cand.seq)
        if kept is not None and kept[0] is text:
            self._trees.move_to_end(cand.seq)
            return kept[1]
        doc = correspond.document(text)
        if cand.seq in self._all:
            self._trees[cand.seq] = (text, doc)
            while len(self._trees) > self.TREES:
                self._trees.popitem(last=False)
        return doc


def _route_key(request: Request) -> tuple[bytes, bytes]:
    return request.method, request.path


def _bytes_key(request: Request) -> tuple[bytes, bytes, int]:
    return request.method, request.target, len(request.body)


def apply_substitutions(
    request: Request, substitutions: Sequence[Substitution]
) -> tuple[Request, tuple[tuple[str, str, int], ...]]:
    """The live request with each substitution's ``new`` mapped back to its
    ``old`` in target and body, and which fired how often as (old, new, count)."""
    target, body, fired = request.target, request.body, []
    for sub in substitutions:
        count = target.count(sub.new) + body.count(sub.new)
        if count:
            target = target.replace(sub.new, sub.old)
            body = body.replace(sub.new, sub.old)
            fired.append(
                (sub.old.decode("utf-8", "replace"), sub.new.decode("utf-8", "replace"), count)
            )
    replaced = Request(request.method, target, request.headers, body, request.http_version)
    return replaced, tuple(fired)


def exact(live: Request, remaining: Remaining, policy: Policy) -> Decision | None:
    """The exact decision for ``live`` when a remaining request equals it
    byte for byte (method, target, body, semantic headers): the first, in
    order. A dict lookup and a byte comparison; nothing is parsed."""
    for cand in remaining.same_bytes(live):
        if _same_semantic_headers(live, cand.request, policy):
            return Decision(Kind.EXACT, cand.seq, serve=True, stop=False,
                            comparison=_compare(live, cand.request, policy, True))
    return None


def decide(live: Request, remaining: Sequence[Candidate] | Remaining, policy: Policy,
           learned: Learned | None = None) -> Decision:
    """Decide how to answer ``live`` given the not-yet-served ``remaining``
    (in sequence order; a :class:`Remaining` keeps its index and what it
    read from the recorded bodies for the next decision) and what the
    replay has ``learned`` so far (the identifier bijection and clock
    shift; a fresh one when None). The decision carries the learned state
    to hold from then on. Only the chosen request's difference is measured."""
    tape = remaining if isinstance(remaining, Remaining) else Remaining(remaining)
    found_exact = exact(live, tape, policy)
    if found_exact is not None:
        return found_exact
    same_route = tape.route(live.method, live.path)
    strict = policy.mode is Mode.STRICT
    substituted: Request = live
    fired: tuple[tuple[str, str, int], ...] = ()
    if policy.substitutions:
        substituted, fired = apply_substitutions(live, policy.substitutions)
        if fired and substituted.path == live.path:
            for cand in tape.same_bytes(substituted):
                if _same_semantic_headers(substituted, cand.request, policy):
                    ok = not strict or policy.allow_substitutions
                    return Decision(
                        Kind.SUBSTITUTED, cand.seq, serve=ok, stop=not ok,
                        comparison=compare(live, cand.request, policy), substitutions_fired=fired,
                    )
    unexplained: str | None = None
    known = learned or Learned(policy.clock_tolerance_s)
    # A learned id may sit in the path itself (/v1/sessions/<id>/...).
    routes = same_route or [
        c for c in tape if c.request.method == live.method
        and correspond.compare(c.request.path.decode("latin-1"), live.path.decode("latin-1"),
                               known).equivalent]
    live_body = _LiveBody(substituted.body)
    for cand in routes:
        found = _equivalence(substituted, live_body, cand, tape, policy, known)
        if found is not None and found.equivalent and not found.fired:
            # Equal values in other bytes (spacing, escapes, 1e2 for 100):
            # no rule explains that; the request is what it is.
            found.problem = "the JSON values are equal but their bytes are not"
        if found is None or not found.equivalent:
            if unexplained is None and found is not None and cand is routes[0]:
                unexplained = found.problem
            continue
        needed = sorted(rule.value for rule in found.rules)
        not_allowed: tuple[str, ...] = tuple(r for r in needed if r not in policy.allow)
        if fired and not policy.allow_substitutions:
            not_allowed = ("paths", *not_allowed)
        kind = Kind.DIVERGED if not_allowed else Kind.EQUIVALENT
        ok = not strict or not not_allowed
        return Decision(
            kind, cand.seq, serve=ok, stop=not ok,
            comparison=compare(live, cand.request, policy), substitutions_fired=fired,
            learned=found.learned, rules=tuple(found.summary()), not_allowed=not_allowed,
        )
    if not same_route:
        return Decision(Kind.MISSING, None, serve=False, stop=strict, unexplained=unexplained)
    first = same_route[0]
    return Decision(
        Kind.DIVERGED, first.seq, serve=not strict, stop=strict,
        comparison=compare(live, first.request, policy), unexplained=unexplained,
    )


class _LiveBody:
    """The live body as text and as a JSON tree, each read at most once
    per decision."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self._text: str | None = None
        self._decoded = False
        self._tree: tuple[str, object] | None = None

    def text(self) -> str | None:
        if not self._decoded:
            self._decoded = True
            try:
                self._text = self.body.decode("utf-8")
            except UnicodeDecodeError:
                self._text = None
        return self._text

    def tree(self, text: str) -> object:
        if self._tree is None or self._tree[0] is not text:
            self._tree = (text, correspond.document(text))
        return self._tree[1]


def _equivalence(live: Request, live_body: _LiveBody, cand: Candidate, tape: Remaining,
                 policy: Policy, learned: Learned) -> Equivalence | None:
    """:func:`equivalence` of ``live`` and ``cand``, reading each body (as
    text, as a JSON tree) once: the live one's per decision, the recorded
    one's from ``tape``."""
    recorded = cand.request
    if live.method != recorded.method or not _same_semantic_headers(live, recorded, policy):
        return None
    rec_text, live_text = tape.text(cand), live_body.text()
    if rec_text is None or live_text is None:
        return None

    def parse(text: str) -> object:
        if text is rec_text:
            return tape.tree(cand, text)
        if text is live_text:
            return live_body.tree(text)
        return correspond.document(text)

    return _correspond(recorded, live, rec_text, live_text, learned, parse)


def _correspond(recorded: Request, live: Request, rec_text: str, live_text: str,
                learned: Learned, parse: Callable[[str], object] | None = None) -> Equivalence:
    target = correspond.compare(recorded.target.decode("latin-1"), live.target.decode("latin-1"),
                                learned, "target")
    if not target.equivalent:
        return target
    body = correspond.compare(rec_text, live_text, target.learned, parse=parse)
    body.fired[:0] = target.fired
    return body


def equivalence(live: Request, recorded: Request, policy: Policy,
                learned: Learned) -> Equivalence | None:
    """``live`` against ``recorded`` up to learned correspondences: the
    same method and semantic headers, and a target and body (UTF-8) that
    correspond (``problem`` says where they do not). None when the method
    or semantic headers differ, or a body is not text."""
    if live.method != recorded.method:
        return None
    if not _same_semantic_headers(live, recorded, policy):
        return None
    try:
        bodies = recorded.body.decode("utf-8"), live.body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return _correspond(recorded, live, *bodies, learned)
