"""``wiretape.__all__`` is the public API: every name in it resolves to a
wiretape object, every public name of the package is in it, and the
type checkers' view (the ``TYPE_CHECKING`` imports) names the same things.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import wiretape

PRIVATE_BUT_EXPORTED = {"__version__"}


def test_all_is_sorted_and_resolves_to_wiretape_objects() -> None:
    assert wiretape.__all__ == sorted(wiretape.__all__)
    assert len(set(wiretape.__all__)) == len(wiretape.__all__)
    for name in wiretape.__all__:
        value = getattr(wiretape, name)
        if name in PRIVATE_BUT_EXPORTED:
            continue
        assert value.__module__.startswith("wiretape."), name
        assert value.__name__ == name
        assert inspect.getdoc(value), f"{name} has no docstring"


def test_every_public_name_is_in_all() -> None:
    # Load every export, then compare with what the package holds: nothing
    # public may be reachable without being declared (submodules aside).
    for name in wiretape.__all__:
        getattr(wiretape, name)
    public = {
        name for name, value in vars(wiretape).items()
        if (not name.startswith("_") or name in PRIVATE_BUT_EXPORTED)
        and not inspect.ismodule(value)
    }
    assert public == set(wiretape.__all__)
    assert set(dir(wiretape)) >= set(wiretape.__all__)


def test_type_checkers_see_the_same_names() -> None:
    tree = ast.parse(Path(wiretape.__file__).read_text())
    seen: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                seen |= {alias.name for alias in stmt.names}
    assert seen | PRIVATE_BUT_EXPORTED == set(wiretape.__all__)


def test_unknown_names_raise_attribute_error() -> None:
    try:
        wiretape.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_thing'" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_wiretape_loads_nothing_heavy() -> None:
    # The command line and the pytest plugin import the package; the API's
    # modules (and httpx, h11, sqlite) load on first use only.
    code = ("import sys, wiretape; "
            "print(sorted(m for m in sys.modules if m.startswith(('wiretape', 'httpx', 'h11'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['wiretape']"
