"""``python -m wiretape.testing``: the fake provider as a process.

This module owns the command line (``--port``, ``--script``, ``--model``,
``--delay-ms``),
the one line it prints once the port is bound (``listening URL``), serving
until SIGTERM or SIGINT, and turning a :class:`wiretape.errors.WiretapeError`
into a message on stderr and its exit code. It must not know any wire format
or how a request is answered. ``__main__`` only calls :func:`main`, so the
package can re-export it without importing ``__main__``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from wiretape.errors import WiretapeError
from wiretape.testing.script import ScriptError, Turn, demo_script, fork_models, load_script
from wiretape.testing.server import DEFAULT_DELAY, AsyncFakeProvider


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m wiretape.testing",
        description="Serve a scripted fake model provider on 127.0.0.1 until SIGTERM or SIGINT.",
        epilog="example: python -m wiretape.testing --port 8765 --script script.json",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port; 0 picks a free one (default)"
    )
    parser.add_argument(
        "--script", type=Path, help="JSON script file (default: the demo agent's script)"
    )
    parser.add_argument(
        "--model", dest="models", action="append", default=[], metavar="NAME=FILE",
        help="a JSON script played for requests naming model NAME (repeatable; with neither "
             "--script nor --model: the demo's, and the fork models fake-fixer and fake-idle)",
    )
    parser.add_argument(
        "--delay-ms",
        type=float,
        default=DEFAULT_DELAY * 1000,
        help="pause between streamed events, in ms",
    )
    return parser


async def _serve_until_signalled(script: Sequence[Turn], port: int, delay: float,
                                 models: Mapping[str, Sequence[Turn]] | None = None) -> int:
    provider = AsyncFakeProvider(script, port=port, delay=delay, models=models)
    await provider.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(f"listening {provider.url}", flush=True)
    try:
        await stopping.wait()
    finally:
        await provider.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m wiretape.testing``: print ``listening URL`` and serve until signalled."""
    args = _parser().parse_args(argv)
    try:
        script = load_script(args.script) if args.script else demo_script()
        models: dict[str, Sequence[Turn]] = {}
        for pair in args.models:
            name, eq, file = pair.partition("=")
            if not eq or not name or not file:
                raise ScriptError(f"invalid --model {pair!r}: expected NAME=FILE")
            models[name] = load_script(Path(file))
        if not args.script and not args.models:
            models = dict(fork_models())
        return asyncio.run(_serve_until_signalled(script, args.port, args.delay_ms / 1000,
                                                  models))
    except WiretapeError as exc:
        print(f"wiretape fake provider: {exc}", file=sys.stderr)
        return exc.exit_code
