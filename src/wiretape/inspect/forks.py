"""The forks of a run, read back for people: each fork's run file names
its parent (``extra["fork_parent"]``), so a comparison is found by reading
the run files beside the parent, never stored in it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wiretape.errors import WiretapeError
from wiretape.inspect.formats import read_exchange
from wiretape.inspect.prices import PriceTable
from wiretape.model import Exchange
from wiretape.store.runfile import RunFile


def live_usage(exchanges: Iterable[Exchange]) -> tuple[int | None, int | None, str | None]:
    """Input and output tokens summed over ``exchanges``' usage fields, as
    each wire format's reader gives them (None: none reported), and the
    first model their requests named (None: none did). Each exchange is
    read once."""
    tokens_in: int | None = None
    tokens_out: int | None = None
    model: str | None = None
    for exchange in exchanges:
        view = read_exchange(exchange)
        model = model or view.request.model or None
        usage = view.response.usage if view.response is not None else None
        if usage is None:
            continue
        if usage.input_tokens is not None:
            tokens_in = (tokens_in or 0) + usage.input_tokens
        if usage.output_tokens is not None:
            tokens_out = (tokens_out or 0) + usage.output_tokens
    return tokens_in, tokens_out, model


@dataclass(frozen=True)
class ForkSummary:
    """One fork of a run: ``upto`` exchanges served from the parent,
    ``live`` after them, the model the live requests named, tokens summed
    over the live ones, and the verify command's exit status if one ran."""

    run_id: str
    path: Path
    upto: int
    model: str | None
    live: int
    exit_status: int | None
    input_tokens: int | None
    output_tokens: int | None
    verify: str | None
    verify_status: int | None
    duration_s: float | None

    def cost(self, prices: PriceTable) -> float | None:
        return prices.cost(self.model, self.input_tokens, self.output_tokens)


def fork_from(extra: Mapping[str, str], exchanges: int) -> int | None:
    """A fork's ``fork_from`` (its metadata's N) as a number of exchanges,
    or None when it is not one this run can hold: not plain ASCII digits,
    or more than its ``exchanges`` (a run file's metadata is read, not
    trusted)."""
    text = extra.get("fork_from", "")
    if not (isinstance(text, str) and text.isascii() and text.isdigit()):
        return None
    n = int(text)
    return n if n <= exchanges else None


def _status(text: str | None) -> int | None:
    """A stored exit status (``-9``, ``0``), or None when it is not one."""
    if text is None or re.fullmatch(r"-?[0-9]{1,9}", text) is None:
        return None
    return int(text)


def forks_of(run_id: str, folders: Sequence[Path]) -> list[ForkSummary]:
    """The forks of run ``run_id`` among the run files (``*.wtape``) in
    ``folders``, oldest first. A file that cannot be read is passed over
    (it is not this run's to judge)."""
    found: dict[str, ForkSummary] = {}
    started: dict[str, int] = {}
    for folder in dict.fromkeys(f.resolve() for f in folders if f.is_dir()):
        for path in sorted(folder.glob("*.wtape")):
            try:
                with RunFile.open(path) as run:
                    info = run.info()
                    if info.extra.get("fork_parent") != run_id or info.run_id in found:
                        continue
                    exchanges = run.exchanges()
                    upto = fork_from(info.extra, len(exchanges)) or 0
                    live = [e for e in exchanges if e.seq >= upto]
            except (WiretapeError, OSError):
                continue
            tokens_in, tokens_out, asked = live_usage(live)
            model = info.extra.get("fork_model") or asked
            status = info.extra.get("fork_verify_status")
            found[info.run_id] = ForkSummary(
                info.run_id, path, upto, model, len(live), info.exit_status, tokens_in,
                tokens_out, info.extra.get("fork_verify"),
                _status(status),
                (info.ended_at_ns - info.started_at_ns) / 1e9
                if info.ended_at_ns and info.started_at_ns else None)
            started[info.run_id] = info.started_at_ns
    return sorted(found.values(), key=lambda f: started[f.run_id])
