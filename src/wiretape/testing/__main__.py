"""``python -m wiretape.testing``; the command itself is :mod:`wiretape.testing.cli`."""

from wiretape.testing.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
