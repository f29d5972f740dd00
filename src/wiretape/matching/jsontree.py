"""JSON bodies as order-keeping trees, the values where two trees differ,
and JSON pointers.

Owns: parsing a body (UTF-8 JSON, RFC 8259 §8.1) into a tree whose objects
keep their member order; walking two trees to the values that differ;
RFC 6901 pointers; reading a value at a path. Knows nothing of byte
offsets, kinds or providers.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

Path = tuple[str, ...]


class JsonObject(tuple[tuple[str, object], ...]):
    """A JSON object as its members in wire order. Equality is that of the
    member sequence, so two objects with the same members in another order
    are not equal: the tree walk then looks inside and names the order."""

    __slots__ = ()


class Missing(enum.Enum):
    """No value at a path."""

    MISSING = "missing"


MISSING = Missing.MISSING


class Change(enum.StrEnum):
    CHANGED = "changed"
    ADDED = "added"
    REMOVED = "removed"
    KEY_ORDER = "key_order"


@dataclass(frozen=True)
class TreeChange:
    """One difference between the trees. For ``added`` the recorded path is
    the parent's (the value is absent there); for ``removed`` the live path
    is the parent's."""

    change: Change
    recorded_path: Path
    live_path: Path

    @property
    def path(self) -> Path:
        """Where the difference is: in the live tree, except for a removed
        value, which exists only in the recorded one."""
        return self.recorded_path if self.change is Change.REMOVED else self.live_path


@dataclass(frozen=True)
class ParsedJson:
    text: str
    value: object


def parse(body: bytes) -> ParsedJson | None:
    """The body as a tree, or None when it is not UTF-8 JSON."""
    try:
        text = body.decode("utf-8")
        return ParsedJson(text, json.loads(text, object_pairs_hook=JsonObject))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def pointer(path: Path) -> str:
    """RFC 6901 §3: each token prefixed by "/", with "~" as "~0" and "/" as "~1"."""
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in path)


def members(value: object) -> dict[str, object] | None:
    """An object's members by name (the last of a repeated name wins, as in
    ``json.loads``; RFC 8259 §4 leaves it open), or None if not an object."""
    if isinstance(value, JsonObject):
        return dict(value)
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return None


def child(value: object, token: str) -> object:
    """The member or element named by one pointer token, or MISSING."""
    if isinstance(value, JsonObject):
        # A scan, not a dict: objects are small and this runs per element
        # when a whole history is searched. The last repeated name wins.
        found: object = MISSING
        for key, item in value:
            if key == token:
                found = item
        return found
    if isinstance(value, dict):
        return value.get(token, MISSING)
    if isinstance(value, list) and token.isdigit() and int(token) < len(value):
        return value[int(token)]
    return MISSING


def at(value: object, path: Path) -> object:
    for token in path:
        value = child(value, token)
        if value is MISSING:
            break
    return value


def text_at(value: object, path: Path) -> str | None:
    """The string at ``path``, or None."""
    found = at(value, path)
    return found if isinstance(found, str) else None


def _same(a: object, b: object) -> bool:
    # 1 == 1.0 == True in Python, not on the wire.
    return type(a) is type(b) and a == b


def diff(recorded: object, live: object) -> list[TreeChange]:
    """The differences between two trees, in live document order. Values
    equal as sequences are skipped whole (a C-speed comparison), so two
    large bodies that differ in a few places cost little more than parsing."""
    out: list[TreeChange] = []
    _walk(recorded, live, (), (), out)
    return out


def _walk(a: object, b: object, rp: Path, lp: Path, out: list[TreeChange]) -> None:
    if _same(a, b):
        return
    if isinstance(a, JsonObject) and isinstance(b, JsonObject):
        _walk_object(a, b, rp, lp, out)
    elif isinstance(a, list) and isinstance(b, list):
        _walk_array(a, b, rp, lp, out)
    else:
        out.append(TreeChange(Change.CHANGED, rp, lp))


def _walk_object(a: JsonObject, b: JsonObject, rp: Path, lp: Path, out: list[TreeChange]) -> None:
    da, db = dict(a), dict(b)
    if [k for k in da if k in db] != [k for k in db if k in da]:
        out.append(TreeChange(Change.KEY_ORDER, rp, lp))
    for key, value in db.items():
        if key in da:
            _walk(da[key], value, (*rp, key), (*lp, key), out)
        else:
            out.append(TreeChange(Change.ADDED, rp, (*lp, key)))
    for key in da:
        if key not in db:
            out.append(TreeChange(Change.REMOVED, (*rp, key), lp))


def _walk_array(
    a: list[object], b: list[object], rp: Path, lp: Path, out: list[TreeChange]
) -> None:
    # Equal elements at both ends are skipped, so a conversation that grew
    # by a message shows one added element, not every later one changed.
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and _same(a[head], b[head]):
        head += 1
    tail = 0
    while tail < shortest - head and _same(a[-1 - tail], b[-1 - tail]):
        tail += 1
    middle_a, middle_b = len(a) - head - tail, len(b) - head - tail
    for i in range(head, head + min(middle_a, middle_b)):
        _walk(a[i], b[i], (*rp, str(i)), (*lp, str(i)), out)
    for i in range(head + middle_a, head + middle_b):
        out.append(TreeChange(Change.ADDED, rp, (*lp, str(i))))
    for i in range(head + middle_b, head + middle_a):
        out.append(TreeChange(Change.REMOVED, (*rp, str(i)), lp))
