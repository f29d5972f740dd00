"""Checking values read back from a file against the types wiretape wrote.

A run file is untrusted input, and SQLite keeps any type in any column: a
reader checks each stored value before it becomes a model value, so a value
of the wrong type is one line naming it (a ValueError the run file turns
into a RunFileError), never a traceback further on. Stored JSON is checked
against its TypedDict in ``wiretape.model`` (DESIGN.md, "JSON shapes"):
members the TypedDict requires must be there with their types; members it
does not know are let through.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar, Union, cast

T = TypeVar("T")

#: The largest value an integer column holds (SQLite's own bound).
INT_MAX = 2**63 - 1


class StoredValueError(ValueError):
    """A stored value is not of the type wiretape wrote there."""


def kind(value: object) -> str:
    """How a stored value is named in a message."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "a boolean"
    named = {int: "an integer", float: "a real number", str: "text", bytes: "bytes",
             list: "a list", dict: "an object"}
    return named.get(type(value), type(value).__name__)


def integer(value: object, what: str, lo: int = -INT_MAX - 1, hi: int = INT_MAX) -> int:
    if type(value) is not int:
        raise StoredValueError(f"{what} is {kind(value)}, not an integer")
    if not lo <= value <= hi:
        raise StoredValueError(f"{what} is {value}, outside {lo}..{hi}")
    return value


def optional_integer(value: object, what: str, lo: int = -INT_MAX - 1,
                     hi: int = INT_MAX) -> int | None:
    return None if value is None else integer(value, what, lo, hi)


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise StoredValueError(f"{what} is {kind(value)}, not text")
    return value


def optional_text(value: object, what: str) -> str | None:
    return None if value is None else text(value, what)


def blob(value: object, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise StoredValueError(f"{what} is {kind(value)}, not bytes")
    return value


def optional_blob(value: object, what: str) -> bytes | None:
    return None if value is None else blob(value, what)


def variable_name(value: object, what: str) -> str:
    """An environment variable's name: letters, digits and ``_``, not
    starting with a digit, at most 128 characters."""
    name = text(value, what)
    if not (0 < len(name) <= 128 and (name[0].isalpha() or name[0] == "_") and name.isascii()
            and all(c.isalnum() or c == "_" for c in name)):
        raise StoredValueError(f"{what} holds {name[:40]!r}, which is not a variable's name")
    return name


def one_of(value: object, allowed: Sequence[str], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        shown = repr(value) if isinstance(value, str) else kind(value)
        raise StoredValueError(f"{what} is {shown[:40]}, not one of {', '.join(allowed)}")
    return value


def json_value(value: object, shape: Any, what: str) -> Any:
    """``value`` (JSON text) parsed and checked against ``shape`` (a type as
    written in ``wiretape.model``: a TypedDict, ``list[X]``, ``X | None``…).
    Typed Any: the caller names the type it asked for."""
    raw = text(value, what)
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise StoredValueError(f"{what} is not JSON ({exc})") from exc
    conform(parsed, shape, what)
    return parsed


def checked(value: object, shape: type[T], what: str) -> T:
    """``value`` itself, after checking it against ``shape``."""
    conform(value, shape, what)
    return cast(T, value)


def conform(value: object, shape: Any, where: str) -> None:
    """Raise StoredValueError unless ``value`` has ``shape``."""
    if shape is Any or shape is object or isinstance(shape, str | typing.ForwardRef):
        return
    origin = typing.get_origin(shape)
    args = typing.get_args(shape)
    if origin in (Union, types.UnionType):
        problems = []
        for option in args:
            try:
                conform(value, option, where)
                return
            except StoredValueError as exc:
                if option is not type(None):
                    problems.append(str(exc))
        # One option besides null: its own complaint is the most precise.
        raise StoredValueError(problems[0] if len(problems) == 1 else
                               f"{where} is {kind(value)}, not {_name(shape)}")
    if shape is type(None):
        if value is not None:
            raise StoredValueError(f"{where} is {kind(value)}, not null")
        return
    if origin is Literal:
        if value not in args or type(value) not in {type(a) for a in args}:
            raise StoredValueError(f"{where} is {str(value)[:40]!r}, not one of "
                                   f"{', '.join(map(str, args))}")
        return
    if shape is bool:
        if not isinstance(value, bool):
            raise StoredValueError(f"{where} is {kind(value)}, not true or false")
        return
    if shape is int:
        if type(value) is not int:
            raise StoredValueError(f"{where} is {kind(value)}, not an integer")
        return
    if shape is float:
        if type(value) not in (int, float):
            raise StoredValueError(f"{where} is {kind(value)}, not a number")
        return
    if shape is str:
        if not isinstance(value, str):
            raise StoredValueError(f"{where} is {kind(value)}, not text")
        return
    if origin in (list, Sequence, tuple):
        if not isinstance(value, list):
            raise StoredValueError(f"{where} is {kind(value)}, not a list")
        item = args[0] if args else Any
        for i, element in enumerate(value):
            conform(element, item, f"{where}[{i}]")
        return
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise StoredValueError(f"{where} is {kind(value)}, not an object")
        item = args[1] if len(args) == 2 else Any
        for key, element in value.items():
            conform(element, item, f"{where}[{key!r}]")
        return
    if typing.is_typeddict(shape):
        if not isinstance(value, dict):
            raise StoredValueError(f"{where} is {kind(value)}, not an object")
        hints, required = _hints(shape)
        for key in sorted(required):
            if key not in value:
                raise StoredValueError(f"{where} has no member {key!r}")
        for key, element in value.items():
            if key in hints:
                conform(element, hints[key], f"{where}.{key}")
        return
    if origin is None and isinstance(shape, type):
        if not isinstance(value, shape):
            raise StoredValueError(f"{where} is {kind(value)}, not {shape.__name__}")
        return
    # A form not used by the stored shapes: let it through rather than guess.
    return


@functools.cache
def _hints(shape: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A TypedDict's members with their types, and those it requires (a
    NotRequired member written as a string annotation is counted as required
    by Python 3.11's own ``__required_keys__``: read from the hints)."""
    try:
        hints = typing.get_type_hints(shape, include_extras=True)
    except (NameError, TypeError):  # an alias only a type checker resolves
        return {key: Any for key in shape.__annotations__}, frozenset()
    required = set(shape.__required_keys__)
    for key, hint in list(hints.items()):
        if typing.get_origin(hint) is typing.NotRequired:
            required.discard(key)
        if typing.get_origin(hint) in (typing.NotRequired, typing.Required):
            hints[key] = typing.get_args(hint)[0]
    return hints, frozenset(required)


def _name(shape: Any) -> str:
    if typing.is_typeddict(shape):
        return "an object"
    return getattr(shape, "__name__", None) or str(shape).replace("typing.", "")
