"""Turning a run's token usage into money, where the price is known.

The built-in table holds list prices in US dollars per million tokens,
(input, output), standard tier, no cached-input or batch discounts, for
prompts within the cheapest context band. Source: the providers' public
pricing pages (https://openai.com/api/pricing,
https://www.anthropic.com/pricing#api,
https://ai.google.dev/gemini-api/docs/pricing), as read in September 2025.
Prices change: a project sets its own (or more models) in ``wiretape.toml``
or ``[tool.wiretape]``::

    [prices]
    "gpt-4o-mini" = { input = 0.15, output = 0.60 }

A model name matches an entry exactly, or with a dated or ``-latest``
suffix (``gpt-4o-mini-2024-07-18``, ``claude-sonnet-4-20250514``); the
longest entry wins. A model the table does not name has no cost (None,
shown as "—"), never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: (input, output) US dollars per million tokens; see the module's docstring.
BUILT_IN: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4-1": (15.00, 75.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
}

#: What may follow a table entry's name in a model's name: a release date
#: (``-2024-07-18``, ``-20250514``) or ``-latest``.
_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)")


@dataclass(frozen=True)
class PriceTable:
    """Prices per model, (input, output) US dollars per million tokens."""

    prices: Mapping[str, tuple[float, float]]

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, tuple[float, float]]) -> PriceTable:
        """The built-in table, with ``overrides`` replacing or adding entries."""
        return cls({**BUILT_IN, **overrides})

    def price(self, model: str | None) -> tuple[float, float] | None:
        """(input, output) dollars per million tokens for ``model``, or None."""
        if not model:
            return None
        if model in self.prices:
            return self.prices[model]
        for name in sorted(self.prices, key=len, reverse=True):
            if model.startswith(name) and _SUFFIX.fullmatch(model[len(name):]):
                return self.prices[name]
        return None

    def cost(self, model: str | None, input_tokens: int | None,
             output_tokens: int | None) -> float | None:
        """US dollars for the tokens at ``model``'s price; None when the
        price or both counts are unknown (a missing count counts 0)."""
        price = self.price(model)
        if price is None or (input_tokens is None and output_tokens is None):
            return None
        return ((input_tokens or 0) * price[0] + (output_tokens or 0) * price[1]) / 1e6


DEFAULT = PriceTable(BUILT_IN)


def cost_text(cost: float | None) -> str:
    """``$0.0123`` (4 decimals below a dollar, else 2), or ``—`` when unknown."""
    if cost is None:
        return "—"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"
