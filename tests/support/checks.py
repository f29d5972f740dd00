"""A collector of checks, so one test reports every failed check at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def short(v: Any, n: int = 300) -> str:
    s = repr(v)
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


class Checks:
    """``check``/``eq`` record failures; ``done`` fails the test with all of
    them, followed by the context callables' output (commands and their
    output). Failures of timing checks (``timing=True``) are also counted
    apart, so a test can run once more when timing alone failed on a
    loaded machine."""

    def __init__(self, *context: Callable[[], str]) -> None:
        self.failures: list[str] = []
        self.timing_failures = 0
        self.context: tuple[Callable[[], str], ...] = tuple(context)

    def check(self, cond: Any, msg: str, *, timing: bool = False) -> bool:
        if not cond:
            self.failures.append(("[timing] " if timing else "") + msg)
            self.timing_failures += timing
        return bool(cond)

    @property
    def only_timing_failed(self) -> bool:
        return bool(self.failures) and self.timing_failures == len(self.failures)

    def eq(self, got: Any, want: Any, what: str) -> bool:
        return self.check(got == want, f"{what}: got {short(got)}, expected {short(want)}")

    def done(self) -> None:
        if self.failures:
            ctx = "\n\n".join(c() for c in self.context)
            pytest.fail(f"{len(self.failures)} check(s) failed:\n- " + "\n- ".join(self.failures)
                        + "\n\n" + ctx, pytrace=False)
