"""The project's wiretape settings: ``wiretape.toml``, or the
``[tool.wiretape]`` table of ``pyproject.toml``, found from a folder upward.

    # wiretape.toml                      # pyproject.toml
    allow = ["ids", "clock"]             [tool.wiretape]
    outcome-ignore = [".cache/*"]        allow = ["ids", "key-order"]
    [prices]                             [tool.wiretape.prices]
    "my-model" = { input = 0.5, output = 2.0 }   # US dollars per million tokens

The first folder, going up from the given one, that holds either file ends
the search (``wiretape.toml`` first); a ``pyproject.toml`` without the table
means no settings. TOML is read with :mod:`tomllib` (TOML 1.0).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from wiretape.errors import UsageError
from wiretape.matching.correspond import parse_allowances

#: The keys a project may set.
KEYS = ("allow", "outcome-ignore", "prices")
#: The largest price accepted, US dollars per million tokens (a bound that
#: keeps every cost finite).
MAX_PRICE = 1e9


@dataclass(frozen=True)
class ProjectConfig:
    """What a project asks of every replay: allowances (ALLOWANCES names)
    and outcome patterns to leave out; ``prices``: model to (input,
    output) US dollars per million tokens, over the built-in table
    (``inspect.prices``); ``source`` is the file, if any."""

    allow: frozenset[str] = frozenset()
    outcome_ignore: tuple[str, ...] = ()
    source: Path | None = None
    prices: tuple[tuple[str, tuple[float, float]], ...] = ()


def find(start: Path) -> ProjectConfig:
    """The settings of the project ``start`` is in (none found: empty).
    Raises UsageError, naming the file, for a file that is not valid TOML,
    an unknown key, a value of the wrong type or an unknown allowance."""
    for folder in (start, *start.parents):
        own = folder / "wiretape.toml"
        if own.is_file():
            return _read(own, table=None)
        project = folder / "pyproject.toml"
        if project.is_file():
            return _read(project, table="tool.wiretape")
    return ProjectConfig()


def _read(path: Path, table: str | None) -> ProjectConfig:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML ({exc}): fix it, or remove its wiretape "
                         "settings") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    settings: object = document
    where = path.name
    if table is not None:
        for part in table.split("."):
            settings = settings.get(part, {}) if isinstance(settings, dict) else {}
        where = f"[{table}] of {path}"
    if not isinstance(settings, dict):
        raise UsageError(f"{where} is not a table: write it as [{table}]")
    unknown = sorted(set(settings) - set(KEYS))
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in {where}: the keys are "
                         f"{', '.join(KEYS)}")
    allow = _strings(settings.get("allow", []), "allow", where)
    ignore = _strings(settings.get("outcome-ignore", []), "outcome-ignore", where)
    try:
        allowed = parse_allowances(",".join(allow), f"{where} (allow)")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return ProjectConfig(allowed, tuple(ignore), path,
                         _prices(settings.get("prices", {}), where))


def _prices(value: object, where: str) -> tuple[tuple[str, tuple[float, float]], ...]:
    """``[prices]``: a table of model name to ``{ input = N, output = N }``
    (US dollars per million tokens, numbers of 0 or more)."""
    example = 'e.g. [prices] "my-model" = { input = 0.5, output = 2.0 }'
    if not isinstance(value, dict):
        raise UsageError(f"prices in {where} must be a table, {example}")
    out = []
    for model, price in value.items():
        wrong = _price_fault(price)
        if wrong is not None:
            raise UsageError(f"the price of {model!r} in {where} {wrong}: give input and "
                             f"output in US dollars per million tokens, {example}")
        assert isinstance(price, dict)
        out.append((str(model), (float(price["input"]), float(price["output"]))))
    return tuple(out)


def _price_fault(price: object) -> str | None:
    """What is wrong with one ``[prices]`` entry (None: nothing)."""
    if not isinstance(price, dict):
        return f"is {type(price).__name__} {price!r}, not a table"
    missing = sorted({"input", "output"} - set(price))
    if missing:
        return f"has no {missing[0]}"
    extra = sorted(set(price) - {"input", "output"})
    if extra:
        return f"has an unknown key {extra[0]!r}"
    for key in ("input", "output"):
        v = price[key]
        if not isinstance(v, int | float) or isinstance(v, bool):
            return f"has {key} = {v!r}, not a number"
        if not math.isfinite(v) or v < 0 or v > MAX_PRICE:
            return (f"has {key} = {v!r}, not a price (a number from 0 to {MAX_PRICE:g})")
    return None


def _strings(value: object, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{key} in {where} must be a list of strings, e.g. "
                         f"{key} = [\"...\"]")
    return list(value)
