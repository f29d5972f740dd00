"""What goes wrong on the proxy's connections, said in one line each.

A connection that breaks (the client leaves, resets, times out, sends TLS
garbage) is ordinary: it is counted where it happens and never printed as a
traceback. A bug (an exception nobody expected) is one logged line,
``wiretape: internal error in <where>: <Type>: <message>``, and the proxy
serves on. :class:`LoopGuard` does the same for what reaches the event
loop's exception handler (an exception escaping a connection callback, a
failed accept) and silences asyncio's retry of a failed accept that comes
due after its listener closed. Lines go to the ``wiretape.proxy`` logger: with logging
left unconfigured, Python prints them to stderr as they are.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
from asyncio import constants as asyncio_constants
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("wiretape.proxy")

_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep
#: errno values of an accept() that failed for want of resources (asyncio
#: retries these every second and reports each failure to the loop).
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: seconds after a failed accept at which asyncio retries it (CPython's
#: ``asyncio.constants.ACCEPT_RETRY_DELAY``; 1 s in 3.8 to 3.13)
_ACCEPT_RETRY_DELAY = float(getattr(asyncio_constants, "ACCEPT_RETRY_DELAY", 1.0))
#: what the guard stays installed beyond that, for the loop's lateness (s)
_RETRY_SLACK = 0.5


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (at most 300 characters of message)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def internal_error(where: str, exc: BaseException) -> None:
    """Log a bug as one line; the caller goes on serving."""
    log.error("wiretape: internal error in %s: %s", where, one_line(exc))


class Faults(collections.Counter[str]):
    """Connection-level errors by kind (``client_gone``, ``head_timeout``,
    ``tls_error``, ``internal_error``, ...)."""

    def note(self, kind: str) -> None:
        self[kind] += 1


def _raised_in_wiretape(exc: BaseException | None) -> bool:
    tb = exc.__traceback__ if exc is not None else None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
            return True
        tb = tb.tb_next
    return False


class LoopGuard:
    """The proxy's handler for the event loop's error reports, installed
    while its listeners are open.

    A report that concerns the proxy (raised in wiretape's code, from a task
    named ``wiretape-...``, or about one of ``owns``' sockets and
    transports) becomes one logged line; out-of-descriptor accept failures
    (EMFILE, ENFILE), which asyncio retries every second, are said once per
    burst: again only after ``burst_gap`` seconds without one.

    asyncio retries such an accept by a timer it cannot be asked to cancel
    (``BaseSelectorEventLoop._start_serving``, due ``ACCEPT_RETRY_DELAY``
    seconds after the failure); when the listener closed in between, the
    retry raises ``ValueError: Invalid file descriptor: -1`` in the loop.
    That retry, on a closed listening socket of ``owns``' server, is
    expected at shutdown and said nothing of; so that it still meets this
    guard, :meth:`remove` leaves it installed until such retries are due.
    Any other report goes to the handler that was there before (the
    caller's loop may be shared, see ``wiretape.attach``).
    """

    #: seconds without a failed accept that end a burst of them
    burst_gap = 10.0

    def __init__(self, faults: Faults, owns: Callable[[object], bool]) -> None:
        self._faults = faults
        self._owns = owns
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None
        self._active = False
        self._last_starved: float | None = None
        #: the timer that uninstalls this handler once accept retries are due
        self._linger: asyncio.TimerHandle | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._active:
            return
        if self._linger is not None:  # still installed, waiting for accept retries
            self._linger.cancel()
            self._linger = None
            if self._loop is loop:
                self._active = True
                return
            self._uninstall()
        self._loop, self._previous, self._active = loop, loop.get_exception_handler(), True
        loop.set_exception_handler(self._handle)

    def remove(self) -> None:
        """Put the previous handler back (when nobody replaced this one since;
        else this one passes every report on from now). After an accept
        failed for want of resources, that waits until asyncio's retry of it
        is due (at most ``ACCEPT_RETRY_DELAY`` + 0.5 s; without blocking)."""
        if not self._active or self._loop is None:
            return
        self._active = False
        if self._last_starved is not None and not self._loop.is_closed():
            due = self._last_starved + _ACCEPT_RETRY_DELAY + _RETRY_SLACK
            if due > self._loop.time():
                self._linger = self._loop.call_at(due, self._uninstall)
                return
        self._uninstall()

    def _uninstall(self) -> None:
        self._linger = None
        if self._loop is not None and self._loop.get_exception_handler() == self._handle:
            self._loop.set_exception_handler(self._previous)

    def _is_retry_on_closed_listener(self, context: dict[str, Any]) -> bool:
        """Whether the report is asyncio's accept retry on one of our
        listening sockets that was closed since (see the class docstring)."""
        handle = context.get("handle")
        callback = getattr(handle, "_callback", None)
        if getattr(callback, "__name__", None) != "_start_serving":
            return False
        args = tuple(getattr(handle, "_args", None) or ())
        return (any(isinstance(arg, socket.socket) and arg.fileno() == -1 for arg in args)
                and any(self._owns(arg) for arg in args))

    def _concerns_us(self, context: dict[str, Any]) -> bool:
        if _raised_in_wiretape(context.get("exception")):
            return True
        for key in ("task", "future"):
            get_name = getattr(context.get(key), "get_name", None)
            if get_name is not None and str(get_name()).startswith("wiretape-"):
                return True
        return any(self._owns(context[key]) for key in ("socket", "transport", "protocol")
                   if key in context)

    def _handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        try:
            if self._is_retry_on_closed_listener(context):
                return
            if self._active and self._concerns_us(context):
                self._report(context)
                return
        except Exception as exc:  # never let the guard itself raise into the loop
            internal_error("the event loop's error handler", exc)
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)

    def _report(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES:
            self._faults.note("accept_out_of_resources")
            now = asyncio.get_running_loop().time()
            last, self._last_starved = self._last_starved, now
            if last is None or now - last > self.burst_gap:
                log.error("wiretape: cannot accept connections: %s; new connections wait "
                          "until others close (raise the limit with `ulimit -n`)",
                          one_line(exc))
            return
        self._faults.note("internal_error")
        where = str(context.get("message") or "the event loop")
        task = context.get("task") or context.get("future")
        if task is not None and hasattr(task, "get_name"):
            where = f"task {task.get_name()}"
        if exc is None:
            log.error("wiretape: internal error in %s", where)
        else:
            internal_error(where, exc)
