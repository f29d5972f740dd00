"""The defaults a user can change on the command line (or in the
environment), in a module that imports nothing but typing, so ``wiretape
--help`` can show them without loading the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The largest request body a proxy accepts unless told otherwise (bytes);
#: a larger one gets 413.
DEFAULT_MAX_BODY = 64 * 1024 * 1024

#: The most a snapshot of the working directory may hold unless told
#: otherwise (bytes of file content).
DEFAULT_SNAPSHOT_MAX_BYTES = 256 * 1024 * 1024

#: The variable that sets how many bytes of a response body the recorder
#: holds in memory before it writes the rest in parts as it streams.
SPOOL_BYTES_VARIABLE = "WIRETAPE_SPOOL_BYTES"

#: The least ``WIRETAPE_SPOOL_BYTES`` may be (bytes): a secret straddling
#: two parts is masked up to this long.
MIN_SPOOL_BYTES = 64 * 1024


def spool_bytes(environ: Mapping[str, str], default: int) -> int:
    """``WIRETAPE_SPOOL_BYTES`` from ``environ`` (bytes), else ``default``
    when it is unset or empty.

    Raises ValueError, its message one line (the value, the variable, what
    to do; callers raise it as a UsageError), when it is not a whole number
    of bytes or is below ``MIN_SPOOL_BYTES``: a value below the floor is
    refused, not raised to it, so a run never spools otherwise than it was
    told.
    """
    raw = environ.get(SPOOL_BYTES_VARIABLE, "")
    text = raw.strip()
    if not text:
        return default
    todo = (f"set it to a whole number of bytes, at least {MIN_SPOOL_BYTES} (64 KiB), "
            f"or unset it for the default ({default} bytes)")
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{SPOOL_BYTES_VARIABLE}={raw!r} is not a whole number of bytes: "
                         f"{todo}")
    value = int(text)
    if value < MIN_SPOOL_BYTES:
        raise ValueError(f"{SPOOL_BYTES_VARIABLE}={value} is below the least it may be, "
                         f"{MIN_SPOOL_BYTES} bytes (64 KiB): {todo}")
    return value


#: The variable that sets how long a WebSocket closing handshake may take
#: (seconds, a decimal number), and its default: the ``websockets``
#: library's own ``close_timeout``.
WS_CLOSE_TIMEOUT_VARIABLE = "WIRETAPE_WS_CLOSE_TIMEOUT"
DEFAULT_WS_CLOSE_TIMEOUT = 10.0


def ws_close_timeout(environ: Mapping[str, str],
                     default: float = DEFAULT_WS_CLOSE_TIMEOUT) -> float:
    """``WIRETAPE_WS_CLOSE_TIMEOUT`` from ``environ`` (seconds), else
    ``default`` when it is unset or empty: from the first close frame of a
    WebSocket session, how long its ends are given to finish the closing
    handshake (RFC 6455 §7.1.2) before wiretape closes their connections.

    Raises ValueError, its message one line (the value, the variable, what
    to do; callers raise it as a UsageError), when it is not a number of
    seconds above 0 (at most a day).
    """
    raw = environ.get(WS_CLOSE_TIMEOUT_VARIABLE, "")
    text = raw.strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:  # (also NaN)
        raise ValueError(f"{WS_CLOSE_TIMEOUT_VARIABLE}={raw!r} is not a number of seconds "
                         f"above 0 (at most 86400): set it to one, such as 2.5, or unset it "
                         f"for the default ({default:g} s)")
    return value
