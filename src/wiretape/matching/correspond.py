"""Learned correspondences: when a live request differs from its recording
only by values the run made for itself.

An agent stamps each run with its own identifiers and clock readings, and
some serialise a JSON object's members in another order per process. Such a
request is not exact, and hiding the difference would hide real ones too. So
the difference is *learned* and held to for the whole replay:

``ids``
    Identifiers: UUIDs (RFC 9562, any version), ULIDs, long hex or
    base64-like ids (the part after a ``msg_``-style prefix), numeric ids
    and ids with an embedded epoch (gemini-cli's ``read_file_<ms>_0``). A
    recorded value A corresponds to live value B the first time they meet;
    from then on A must appear as B and B only as A: a bijection across
    every request of the replay (and the outcome after it). A break is a
    real difference. (A value equal on both sides is equal: the parts of a
    request that match byte for byte are not searched for ids.)
``clock``
    Timestamps (ISO 8601 / RFC 3339) and epoch numbers (s, ms, us, ns;
    between 2000 and 2100) that all differ by one offset, within a
    tolerance for the time that passes during the run (seconds, stated by
    the caller) and the precision of the value (a date alone: a day).
``key-order``
    The same JSON object with its members in another order (RFC 8259 §4
    leaves member order without meaning).
``durations``
    Measured times: a number followed by a time unit (``Wall time: 0.0348
    seconds``, ``took 88 ms``) or a JSON number in a member named like one
    (``*_ms``, ``latency``, ``duration``, ``elapsed``).

Besides their shapes, a value is an id by its label: the whole string in a
member named ``id``, ``*_id`` or ``*Id``, and a token of 6 or more letters
and digits after ``ID:`` or ``id=`` in text (Codex's ``Chunk ID: 5a99c8``).

Values are compared structurally when both sides are JSON (also inside a
string that holds JSON, as Claude Code's ``metadata.user_id`` does),
otherwise as text cut into the tokens above and the literal text between
them, which must be equal. Pure: strings in, a value out; no exception for
any input.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from wiretape.matching.jsontree import JsonObject, pointer
from wiretape.model import LearnedJSON


class Rule(enum.StrEnum):
    """A kind of learned correspondence; its value is the allowance name."""

    IDS = "ids"
    CLOCK = "clock"
    KEY_ORDER = "key-order"
    DURATIONS = "durations"


#: The allowances a user can give: the learned rules, and ``paths`` (the
#: declared substitutions: the sandbox's path mapping and ``--substitute``).
ALLOWANCES: tuple[str, ...] = (*(r.value for r in Rule), "paths")

#: Pointers and examples kept per rule and request: every field an agent
#: stamps per run (Codex sends about 15 ids in one request's metadata) is
#: named; an array of such values may name more than this.
MAX_POINTERS = 50
MAX_EXAMPLES = 3
#: A value longer than this is shown cut.
_SHOWN = 80

# 2000-01-01 and 2100-01-01 in epoch seconds: the plausible clock range.
_EPOCH_LOW, _EPOCH_HIGH = 946_684_800, 4_102_444_800
#: Digits of an integer epoch -> seconds per unit (s, ms, us, ns).
_UNITS = {10: 1.0, 13: 1e-3, 16: 1e-6, 19: 1e-9}
_DAY = 86400.0

_ISO = (
    r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
    r"(?:[Tt ](?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{1,9})?)?"
    r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):?[0-5]\d)?)?"
)
_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
#: The tokens of a text, in priority order (named groups).
_TOKEN = re.compile(
    rf"(?P<time>(?<![0-9]){_ISO}(?![0-9]))"
    rf"|(?P<uuid>(?<![0-9A-Za-z]){_UUID}(?![0-9A-Za-z]))"
    r"|(?P<duration>(?<![\w.])\d+(?:\.\d+)?(?=\s?(?:ms|s|sec|secs|seconds|us|\u00b5s|ns|min"
    r"|minutes)\b))"
    r"|(?P<number>(?<![0-9.])\d{10,19}(?:\.\d{1,9})?(?![0-9]))"
    r"|(?P<labelled>(?:(?<=ID: )|(?<=Id: )|(?<=id: )|(?<=ID=)|(?<=id=))[0-9A-Za-z]{6,}"
    r"(?![0-9A-Za-z]))"
    r"|(?P<id>(?<![0-9A-Za-z])[0-9A-Za-z]{16,}(?![0-9A-Za-z]))"
)
#: Member names whose numbers are durations (case-insensitive).
DURATION_NAME = re.compile(
    r"(?:^|[_\-.])(?:ms|ns|us|s|sec|secs|seconds|millis|nanos|micros)$"
    r"|latency|duration|elapsed|ttft|took|time_?to",
    re.IGNORECASE,
)
#: A whole string value that may be an id when its member is named as one.
_WHOLE_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.:\-]{5,}")
#: Member names whose numbers are measured times (a bare unit such as
#: ``timeout_ms`` names a setting, not a measure).
MEASURE_NAME = re.compile(r"latency|duration|elapsed|ttft|took|time_?to|wall", re.IGNORECASE)
#: Text right before a number that makes it a measured time ("Wall time: ").
_MEASURE_BEFORE = re.compile(r"(?:time|took|elapsed|latency|duration|ttft)\W{0,3}$",
                             re.IGNORECASE)
#: A ULID (26 Crockford base32 characters).
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
#: How far outside a run a clock reading may lie (seconds): time zones.
_ZONE_S = 14 * 3600.0


@dataclass
class Learned:
    """What a replay has learned so far: the identifier bijection (recorded
    -> live and back) and the clock shift (live - recorded, seconds), with
    the tolerance (seconds) a later reading may stray from it."""

    tolerance_s: float = 600.0
    forward: dict[str, str] = field(default_factory=dict)
    backward: dict[str, str] = field(default_factory=dict)
    shift_s: float | None = None
    #: when the recording and the replay ran (epoch seconds, first and last):
    #: a clock reading must lie in its own run's span (None: not checked)
    recorded_span: tuple[float, float] | None = None
    live_span: tuple[float, float] | None = None
    #: what the recording's answers carried (their bodies): an id found there
    #: reached the agent as it was and must come back unchanged
    served: bytes = b""
    #: only UUIDs and ULIDs may start a new correspondence (the outcome:
    #: ids of the agent's own making; others must have met in a request)
    uuids_only: bool = False

    def hold(self, other: Learned) -> None:
        """Keep what ``other`` (a comparison's result, made from a copy of
        this) learned: its bijection and clock shift."""
        self.forward, self.backward, self.shift_s = other.forward, other.backward, other.shift_s

    def copy(self) -> Learned:
        return Learned(self.tolerance_s, dict(self.forward), dict(self.backward), self.shift_s,
                       self.recorded_span, self.live_span, self.served, self.uuids_only)


@dataclass
class Equivalence:
    """The result of comparing a recorded value with a live one.

    ``problem`` is None when they are equivalent: then ``fired`` lists each
    correspondence used as (rule, where, recorded, live) and ``learned``
    is the state to hold from now on. Otherwise ``problem`` says, in a
    phrase, the first real difference (or break) and where.
    """

    learned: Learned
    fired: list[tuple[Rule, str, str, str]] = field(default_factory=list)
    problem: str | None = None

    @property
    def equivalent(self) -> bool:
        return self.problem is None

    @property
    def rules(self) -> frozenset[Rule]:
        return frozenset(rule for rule, *_ in self.fired)

    def summary(self) -> list[LearnedJSON]:
        """The fired rules, one entry each (LearnedJSON), in Rule order."""
        out: list[LearnedJSON] = []
        for rule in Rule:
            hits = [(where, rec, live) for r, where, rec, live in self.fired if r is rule]
            if not hits:
                continue
            pointers = list(dict.fromkeys(where for where, _, _ in hits))[:MAX_POINTERS]
            examples = [[_short(rec), _short(live)] for _, rec, live in hits[:MAX_EXAMPLES]]
            entry: LearnedJSON = {"rule": rule.value, "count": len(hits), "pointers": pointers,
                                  "examples": examples}
            if rule is Rule.CLOCK and self.learned.shift_s is not None:
                entry["shift_s"] = round(self.learned.shift_s, 3)
            out.append(entry)
        return out


def parse_allowances(text: str, source: str) -> frozenset[str]:
    """``ids,clock`` as a set of allowance names (ALLOWANCES); ``none`` or
    an empty text is the empty set. Raises ValueError, naming ``source``
    (the option or file it came from), for an unknown name."""
    names = {part.strip().lower() for part in re.split(r"[,\s]+", text) if part.strip()}
    names.discard("none")
    unknown = sorted(names - set(ALLOWANCES))
    if unknown:
        raise ValueError(f"unknown allowance {', '.join(map(repr, unknown))} in {source}: "
                         f"expected some of {', '.join(ALLOWANCES)}")
    return frozenset(names)


def compare(recorded: str, live: str, learned: Learned, where: str = "", *,
            parse: Callable[[str], object] | None = None) -> Equivalence:
    """Whether ``live`` is ``recorded`` up to learned correspondences,
    starting from ``learned`` (not changed: the result carries a copy).
    Both are whole texts (a body, a target, a file); JSON on both sides is
    compared as trees, JSON Lines line by line, anything else as text.
    ``parse`` reads a whole text as :func:`document` does (a cache of trees
    read before; the trees are only read, never changed)."""
    result = Equivalence(learned.copy())
    if recorded != live:
        _Walker(result, parse or document).texts(recorded, live, where, whole=True,
                                                  prefix=where + " " if where else "")
    return result


def document(text: str) -> object:
    """The JSON container ``text`` holds (object as JsonObject, or array),
    else a marker that is neither: what :func:`compare` compares as a tree."""
    return _json(text)


class _Walker:
    def __init__(self, result: Equivalence,
                 parse: Callable[[str], object] | None = None) -> None:
        self.result = result
        #: how a whole text is read as JSON (inner texts: always afresh)
        self.parse = parse or _json
        self.state = result.learned
        #: inside a tool's result: only labelled ids, clock and durations
        #: apply (a digest or number there is what the tool said)
        self.in_tool = 0

    def fail(self, problem: str) -> None:
        if self.result.problem is None:
            self.result.problem = problem

    def differs(self, where: str, a: str, b: str) -> None:
        self.fail(f"{where or 'text'}: {_short(a)!r} recorded, {_short(b)!r} live")

    # Texts --------------------------------------------------------------

    def texts(self, rec: str, live: str, where: str, *, whole: bool = False,
              prefix: str | None = None) -> None:
        """Compare two texts found at ``where``; a JSON value inside them
        is pointed at with ``prefix`` (``where#`` inside a string)."""
        if rec == live or self.result.problem is not None:
            return
        read = self.parse if whole else _json
        rec_doc, live_doc = read(rec), read(live)
        if rec_doc is not _NOT_JSON and live_doc is not _NOT_JSON:
            self.values(rec_doc, live_doc, where + "#" if prefix is None else prefix)
            return
        if whole and "\n" in rec.strip() and "\n" in live.strip():
            rec_lines, live_lines = rec.split("\n"), live.split("\n")
            if len(rec_lines) != len(live_lines):
                self.fail(f"{where or 'text'}: {len(rec_lines)} lines recorded, "
                          f"{len(live_lines)} live")
                return
            for number, (a, b) in enumerate(zip(rec_lines, live_lines, strict=True), start=1):
                line = f"{where} line {number}".strip()
                self.texts(a, b, line, prefix=line + " ")
            return
        self.tokens(rec, live, where)

    def tokens(self, rec: str, live: str, where: str) -> None:
        rec_parts, live_parts = list(_split(rec)), list(_split(live))
        if len(rec_parts) != len(live_parts):
            self.differs(where, rec, live)
            return
        before = ""
        for (kind_a, a, glued_a), (kind_b, b, glued_b) in zip(rec_parts, live_parts, strict=True):
            if self.result.problem is not None:
                return
            if kind_a != kind_b or (kind_a is None and a != b):
                self.differs(where, rec, live)
            elif kind_a is not None and a != b:
                self.token(kind_a, a, b, where, embedded=glued_a or glued_b, before=before)
            elif _is_id(kind_a, a, embedded=glued_a):
                self.ids(a, b, where, kind_a or "id")  # the same id again: the bijection holds it
            if kind_a is None:
                before = a

    def token(self, kind: str, a: str, b: str, where: str, *, embedded: bool,
              before: str = "") -> None:
        if kind == "duration":
            if _MEASURE_BEFORE.search(before) is None:
                self.differs(where, a, b)  # "timeout 30 s" is a setting, not a measure
            else:
                self.result.fired.append((Rule.DURATIONS, where or "text", a, b))
        elif kind == "time":
            self.clock(_iso_seconds(a), _iso_seconds(b), a, b, where,
                       precision=_DAY if len(a) <= 10 else 1.0)
        elif kind == "number" and not embedded and _epoch(a) is not None:
            self.clock(_epoch(a), _epoch(b), a, b, where, precision=_precision(a))
        elif (_is_id(kind, a, embedded=embedded) and _is_id(kind, b, embedded=embedded)
              and (kind != "id" or _unlike(a, b))):
            self.ids(a, b, where, kind)
        else:
            self.differs(where, a, b)

    # JSON ---------------------------------------------------------------

    def values(self, a: object, b: object, at: str) -> None:
        if self.result.problem is not None or _same(a, b):
            return
        if isinstance(a, JsonObject) and isinstance(b, JsonObject):
            self.objects(a, b, at)
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                self.fail(f"{at or '/'}: {len(a)} elements recorded, {len(b)} live")
                return
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.values(x, y, f"{at}/{i}")
        else:
            self.scalars(a, b, at or "/")

    def objects(self, a: JsonObject, b: JsonObject, where: str) -> None:
        da, db = dict(a), dict(b)
        if len(da) != len(a) or len(db) != len(b):
            self.fail(f"{where or '/'}: a member is repeated (RFC 8259 §4): compared byte "
                      "for byte")
            return
        if set(da) != set(db):
            added = sorted(set(db) - set(da))
            removed = sorted(set(da) - set(db))
            said = "; ".join(x for x in (
                f"member {', '.join(added)} added" if added else "",
                f"member {', '.join(removed)} removed" if removed else "") if x)
            self.fail(f"{where or '/'}: {said}")
            return
        if list(da) != list(db):
            self.result.fired.append((Rule.KEY_ORDER, where or "/", ",".join(da), ",".join(db)))
        result_key = "response" if where.endswith("/functionResponse") else _tool_result_key(da)
        for key, value in da.items():
            tool = key == result_key
            self.in_tool += tool
            self.values(value, db[key], where + pointer((key,)))
            self.in_tool -= tool

    def scalars(self, a: object, b: object, where: str) -> None:
        name = where.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        if isinstance(a, str) and isinstance(b, str):
            self.texts(a, b, where)
            if (self.result.problem is not None and not self.in_tool and _id_named(name)
                    and all(_WHOLE_ID.fullmatch(v) and _random_looking(v) for v in (a, b))
                    and _unlike(a, b)):
                self.result.problem = None  # the member says what the value is
                self.ids(a, b, where, "labelled")
            return
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        if numbers:
            # A clock reading first: `started_at_ms` is a time, not a duration.
            sa, sb = json.dumps(a), json.dumps(b)
            low, high = _epoch(sa), _epoch(sb)
            if low is not None and high is not None:
                self.clock(low, high, sa, sb, where, precision=_precision(sa))
                return
            if name and not name.isdigit() and MEASURE_NAME.search(name):
                self.result.fired.append((Rule.DURATIONS, where, sa, sb))
                return
        self.fail(f"{where}: {_short(_shown(a))} recorded, {_short(_shown(b))} live")

    # Rules --------------------------------------------------------------

    def ids(self, a: str, b: str, where: str, kind: str = "id") -> None:
        state = self.state
        known_live, known_rec = state.forward.get(a), state.backward.get(b)
        if a != b and known_live is None and known_rec is None:
            if self.in_tool and kind != "labelled":
                self.fail(f"{where}: {_short(a)!r} recorded, {_short(b)!r} live, in a tool's "
                          "result (what the tool said, not an id the agent made)")
                return
            if state.uuids_only and kind != "uuid" and not _ULID.fullmatch(a):
                self.fail(f"{where}: {_short(a)!r} recorded, {_short(b)!r} live (no request "
                          "of the replay carried these)")
                return
            if state.served and a.encode() in state.served:
                self.fail(f"{where}: {_short(a)!r} was in the recording's answers and reached "
                          f"the agent as it was; it came back as {_short(b)!r}")
                return
        if known_live is not None and known_live != b:
            self.fail(f"{where}: recorded id {_short(a)!r} was {_short(known_live)!r} "
                      f"earlier in this replay, now {_short(b)!r}")
            return
        if known_rec is not None and known_rec != a:
            self.fail(f"{where}: live id {_short(b)!r} stood for {_short(known_rec)!r} "
                      f"earlier in this replay, now for {_short(a)!r}")
            return
        state.forward[a], state.backward[b] = b, a
        if a != b:
            self.result.fired.append((Rule.IDS, where or "text", a, b))

    def clock(self, a: float | None, b: float | None, shown_a: str, shown_b: str, where: str,
              *, precision: float) -> None:
        if a is None or b is None:
            if shown_a != shown_b:
                self.fail(f"{where}: {_short(shown_a)!r} recorded, {_short(shown_b)!r} live")
            return
        if shown_a == shown_b:
            return
        state = self.state
        if not _within(a, state.recorded_span, precision) or not (
                _within(b, state.live_span, precision)
                or _within(b, state.recorded_span, precision)):  # a faked clock
            self.fail(f"{where}: {_short(shown_a)!r} recorded, {_short(shown_b)!r} live: not "
                      "read from the clock while the runs ran")
            return
        shift = b - a
        if state.shift_s is None:
            state.shift_s = shift
        elif abs(shift - state.shift_s) > state.tolerance_s + precision:
            self.fail(f"{where}: clock shift {duration(shift)} here, "
                      f"{duration(state.shift_s)} learned earlier "
                      f"(tolerance {duration(state.tolerance_s, signed=False)})")
            return
        self.result.fired.append((Rule.CLOCK, where or "text", shown_a, shown_b))


# Helpers -------------------------------------------------------------------


class _NotJson(enum.Enum):
    NOT_JSON = "not json"


_NOT_JSON = _NotJson.NOT_JSON


def _json(text: str) -> object:
    """The JSON container ``text`` holds (object or array), or _NOT_JSON."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return _NOT_JSON
    try:
        return json.loads(stripped, object_pairs_hook=JsonObject)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def _split(text: str) -> Iterator[tuple[str | None, str, bool]]:
    """``text`` as (kind, text, embedded) pieces: literal text (kind None)
    and tokens; ``embedded`` is true for a token glued to an identifier
    (``read_file_<ms>_0``, ``msg_<id>``)."""
    at = 0
    for m in _TOKEN.finditer(text):
        if m.start() > at:
            yield None, text[at:m.start()], False
        before = text[m.start() - 1:m.start()]
        after = text[m.end():m.end() + 1]
        glued = any(c in "_-" or c.isalpha() for c in (before, after) if c)
        yield m.lastgroup, m.group(), glued
        at = m.end()
    if at < len(text):
        yield None, text[at:], False


def _within(moment: float, span: tuple[float, float] | None, precision: float) -> bool:
    """``moment`` inside ``span`` widened by time zones and its precision."""
    if span is None:
        return True
    slack = _ZONE_S + precision
    return span[0] - slack <= moment <= span[1] + slack


def _unlike(a: str, b: str) -> bool:
    """Two fresh random ids differ in most places; a version bump
    (``ConfigV2`` -> ``ConfigV3``) or an edited word does not."""
    if len(a) != len(b):
        return False
    return sum(x != y for x, y in zip(a, b, strict=True)) * 3 >= len(a)


def _tool_result_key(members: dict[str, object]) -> str | None:
    """The member of ``members`` holding a tool's result, when it is one: an
    OpenAI ``role: tool`` message's ``content``, an Anthropic
    ``tool_result`` block's ``content``, a Responses
    ``function_call_output``'s ``output``."""
    if members.get("role") == "tool":
        return "content"
    kind = members.get("type")
    if kind == "tool_result":
        return "content"
    if kind == "function_call_output":
        return "output"
    return None  # (a Gemini functionResponse: its ``response``, seen from inside it)


def _id_named(name: str) -> bool:
    """``id``, ``call_id``, ``callId``, ``ID``: a member named as an id."""
    return (name.lower() == "id" or name.endswith(("_id", "-id", "Id", "ID", ".id")))


def _is_id(kind: str | None, token: str, *, embedded: bool = False) -> bool:
    """A token the ``ids`` rule holds: a UUID, a number glued into an id or
    that is no clock reading, or an id-looking run of letters and digits."""
    if kind in ("uuid", "labelled"):
        return True
    if kind == "number":
        return embedded  # a plain number is a quantity, not an id
    return kind == "id" and (_random_looking(token) or _HEX.fullmatch(token) is not None)


_HEX = re.compile(r"[0-9a-f]{32,}|[0-9A-F]{32,}")


def _random_looking(token: str) -> bool:
    """An id, not a word: digits among letters, or many capitals among small letters."""
    letters = sum(c.isalpha() for c in token)
    digits = sum(c.isdigit() for c in token)
    upper = sum(c.isupper() for c in token)
    return bool(letters and digits) or bool(letters and upper * 4 >= letters and upper < letters)


def _epoch(text: str) -> float | None:
    """Epoch seconds of a number's text when it is a plausible clock
    reading (2000-2100) in s, ms, us or ns, else None."""
    whole, _, fraction = text.partition(".")
    if not whole.isdigit() or (fraction and not fraction.isdigit()):
        return None
    unit = _UNITS.get(len(whole))
    if unit is None:
        return None
    seconds = float(text) * unit
    return seconds if _EPOCH_LOW <= seconds <= _EPOCH_HIGH else None


def _precision(text: str) -> float:
    whole, _, fraction = text.partition(".")
    return _UNITS.get(len(whole), 1.0) * (10.0 ** -len(fraction) if fraction else 1.0)


def _iso_seconds(text: str) -> float | None:
    try:
        moment = dt.datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def duration(seconds: float, *, signed: bool = True) -> str:
    """A clock shift as text, the largest units that are not zero:
    ``+1d 2h``, ``-3.5s`` (seconds in; ``signed``: with its sign)."""
    sign = ("-" if seconds < 0 else "+") if signed else ""
    left = abs(seconds)
    parts = []
    for unit, size in (("d", _DAY), ("h", 3600.0), ("m", 60.0)):
        if left >= size:
            count = int(left // size)
            parts.append(f"{count}{unit}")
            left -= count * size
    if left or not parts:
        parts.append(f"{left:.3g}s")
    return sign + " ".join(parts)


def _shown(value: object) -> str:
    if isinstance(value, (JsonObject, list)):
        return "{...}" if isinstance(value, JsonObject) else "[...]"
    return json.dumps(value)


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "\u2026"
