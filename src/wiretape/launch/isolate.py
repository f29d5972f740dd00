"""Isolation of a replayed agent, where Linux allows it:

- **same paths**: the agent runs in a private mount namespace in which each
  sandbox copy is bind-mounted at its original absolute path, so what it
  writes by absolute path lands in the sandbox (man 7 mount_namespaces);
- **offline**: it runs in a network namespace with only loopback up; the
  replay proxy's listening sockets are created in that namespace, and a DNS
  responder there answers every name with NXDOMAIN and logs it
  (man 7 network_namespaces);
- **the recorded clock**: libfaketime shifts its wall clock so that it starts
  at the recorded time (libfaketime README, sections 3 and 4d).

Owns probing what this machine allows (``capabilities``), preparing a launch
(``prepare``: the argv prefix and environment for the agent, plus the process
that holds the network namespace) and tearing it down. The system calls run
in separate processes (isolate_exec.py), never in this one, so a threaded
asyncio program can use it. Must not know run files, snapshots, the replay
proxy, verdicts or how the command line is parsed.

Limits: only IP networking is cut off; Unix sockets named by path (a Docker
socket, a local proxy's socket) stay reachable. libfaketime works through the
dynamic linker, so statically linked programs, setuid programs and Go
binaries keep the real clock (libfaketime README, section 2).
"""

from __future__ import annotations

import array
import errno
import functools
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from wiretape.errors import PortInUse, UsageError

__all__ = ["EXEC_FAILED", "Capabilities", "IsolatedLaunch", "Isolation", "capabilities",
           "clock_env", "find_libfaketime", "prepare"]

#: The exit status of the agent's command when isolating it failed (before the
#: agent ran); its stderr then ends in one line saying why.
EXEC_FAILED = 125
EXEC_SCRIPT = str(Path(__file__).with_name("isolate_exec.py"))
PROBE_TIMEOUT_S = 10.0
HOLDER_TIMEOUT_S = 5.0
_HINT = "needs root, or unprivileged user namespaces"
_FAKETIME_MISSING = "libfaketime not found (apt-get install faketime)"


@dataclass(frozen=True)
class Capabilities:
    """What this machine allows. ``reasons`` maps each missing one
    (``mount_namespaces``, ``network_namespaces``, ``faketime``) to one line."""

    mount_namespaces: bool
    network_namespaces: bool
    faketime: str | None  # the path of libfaketime.so.1
    reasons: dict[str, str] = field(default_factory=dict)
    #: Namespaces are made inside a new user namespace (not root, or root
    #: without CAP_SYS_ADMIN); the agent keeps its own uid and gid there.
    user_namespace: bool = False


@dataclass(frozen=True)
class Isolation:
    """What a launch asks for."""

    #: (source in the sandbox, the original absolute path it is shown at).
    binds: tuple[tuple[str, str], ...] = ()
    #: (an original folder, the place in the sandbox it is shown at,
    #: read-only), mounted before ``binds`` so that they carry it along
    #: (without ``binds``: a mapped sandbox's copy shows it there).
    readonly_binds: tuple[tuple[str, str], ...] = ()
    #: A new network namespace with only loopback up.
    offline: bool = False
    #: The agent's wall clock starts at this time (ns since the epoch).
    clock_start_ns: int | None = None
    #: The agent's working directory, entered after the mounts, so it may be
    #: an original path that only the agent's namespace has. Default: the one
    #: it was started in, entered again (so that it too shows the sandbox).
    cwd: str | None = None


def find_libfaketime() -> str | None:
    """libfaketime.so.1 where Debian (/usr/lib/<multiarch>/faketime), Fedora
    (/usr/lib64/faketime) or ``make install`` (/usr/local/lib/faketime) put it."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    places = [f"/usr/lib/{multiarch}/faketime", "/usr/lib64/faketime", "/usr/lib/faketime",
              "/usr/local/lib/faketime", "/usr/local/lib"]
    candidates = [os.path.join(place, "libfaketime.so.1") for place in places]
    candidates += sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return next((path for path in candidates if os.path.isfile(path)), None)


def _probe(user: bool) -> dict[str, str | None]:
    command = [sys.executable, "-I", "-S", EXEC_SCRIPT, "probe", *(["--user"] if user else [])]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        found: dict[str, str | None] = json.loads(done.stdout)
        return found
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"mount": f"the namespace probe failed: {exc}",
                "network": f"the namespace probe failed: {exc}"}


@functools.cache
def capabilities() -> Capabilities:
    """Probe once (a short child process tries each namespace kind) and remember."""
    attempts = [False, True] if os.geteuid() == 0 else [True]
    best_user, best = attempts[0], _probe(attempts[0])
    for user in attempts[1:]:
        if best["mount"] is None and best["network"] is None:
            break
        found = _probe(user)
        if sum(v is None for v in found.values()) > sum(v is None for v in best.values()):
            best_user, best = user, found
    library = find_libfaketime()
    reasons = {f"{kind}_namespaces": f"{reason} ({_HINT})"
               for kind, reason in best.items() if reason is not None}
    if library is None:
        reasons["faketime"] = _FAKETIME_MISSING
    return Capabilities(mount_namespaces=best["mount"] is None,
                        network_namespaces=best["network"] is None,
                        faketime=library, reasons=reasons, user_namespace=best_user)


def clock_env(library: str, start_ns: int, base_env: Mapping[str, str],
              now_ns: int) -> dict[str, str]:
    """The variables that make a child's wall clock read ``start_ns`` at
    ``now_ns`` and advance from there.

    A relative offset in whole seconds, not a "start at" date: every process
    the agent starts then shares one clock (a "@" date starts again in each
    new process, README 4c), and no time zone or locale is involved in
    parsing it (README 4d, 4e). Monotonic clocks and file timestamps stay
    real (FAKETIME_DONT_FAKE_MONOTONIC, NO_FAKE_STAT: README 3, 4a), so
    timeouts and mtime checks behave. libfaketime goes first in LD_PRELOAD,
    whose entries are separated by colons or spaces (man 8 ld.so).
    """
    offset_s = round((start_ns - now_ns) / 1e9)
    preload = [p for p in base_env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
               if p and p != library]
    return {"LD_PRELOAD": ":".join([library, *preload]), "FAKETIME": f"{offset_s:+d}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "NO_FAKE_STAT": "1"}


def _checked_binds(binds: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The binds with absolute, normal paths. Raises UsageError."""
    checked: list[tuple[str, str]] = []
    for source, original in binds:
        where = f"cannot show {source} at {original}"
        if not os.path.isabs(original) or os.path.normpath(original) == "/":
            raise UsageError(f"{where}: the original must be an absolute path below /")
        source, original = os.path.abspath(source), os.path.normpath(original)
        if not os.path.exists(source):
            raise UsageError(f"{where}: {source} does not exist")
        if any(original == seen for _, seen in checked):
            raise UsageError(f"{where}: {original} is already shown from another source")
        if os.path.exists(original):
            if os.path.isdir(source) != os.path.isdir(original):
                raise UsageError(f"{where}: one is a directory and the other is not")
        else:
            ancestor = os.path.dirname(original)
            while not os.path.lexists(ancestor):
                ancestor = os.path.dirname(ancestor)
            if ancestor == "/":
                top = "/" + original.split("/")[1]
                raise UsageError(f"{where}: {top} does not exist here and no directory is made "
                                 "in / (replay with --no-same-paths)")
            if not os.path.isdir(ancestor):
                raise UsageError(f"{where}: {ancestor} is not a directory")
        checked.append((source, original))
    return checked


def _requested_missing(isolation: Isolation, caps: Capabilities) -> str | None:
    """One line naming a requested capability this machine lacks, or None."""
    if isolation.binds and not caps.mount_namespaces:
        return ("same paths need mount namespaces: "
                f"{caps.reasons.get('mount_namespaces', 'unavailable')}")
    if isolation.offline and not caps.network_namespaces:
        return ("--offline needs network namespaces: "
                f"{caps.reasons.get('network_namespaces', 'unavailable')}")
    if isolation.clock_start_ns is not None and caps.faketime is None:
        return "--clock recorded needs libfaketime: apt-get install faketime"
    return None


class _Holder:
    """The process that holds the network namespace, answers DNS in it and
    creates sockets in it; it exits when its control socket reaches EOF, so
    it never outlives this process, and removes the scratch directory then."""

    def __init__(self, user: bool, scratch: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self.control = ours
        self.control.settimeout(HOLDER_TIMEOUT_S)
        command = [sys.executable, "-I", "-S", EXEC_SCRIPT, "hold", str(theirs.fileno()),
                   "--scratch", scratch, *(["--user"] if user else [])]
        try:
            # Its own process group: a Ctrl-C or a stop of the agent's group
            # does not reach it; close() ends it.
            self.process = subprocess.Popen(
                command, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
        except OSError as exc:
            ours.close()
            raise UsageError(f"--offline: cannot start the namespace holder: {exc}") from exc
        finally:
            theirs.close()
        reply, _ = self._receive()
        if reply != b"ready":
            self.close()
            detail = reply.decode(errors="replace").removeprefix("error ") or "it exited"
            raise UsageError(f"--offline: cannot make a network namespace: {detail}")

    def _receive(self) -> tuple[bytes, list[int]]:
        fds = array.array("i")
        try:
            message, ancillary, _, _ = self.control.recvmsg(
                65536, socket.CMSG_SPACE(fds.itemsize), socket.MSG_CMSG_CLOEXEC)
        except OSError:
            return b"", []
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        return message, list(fds)

    def request(self, text: str) -> tuple[bytes, list[int]]:
        with self._lock:
            try:
                self.control.send(text.encode())
            except OSError:
                return b"", []
            return self._receive()

    def close(self) -> None:
        self.control.close()
        try:
            self.process.wait(HOLDER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class IsolatedLaunch:
    """What the replay needs to start an isolated agent: run
    ``command(agent_argv)`` (that is, ``[*argv, *agent_argv]``) with ``env``
    added to its environment. Close it (or use ``with``) after the agent."""

    def __init__(self, argv: list[str], env: dict[str, str], holder: _Holder | None = None,
                 scratch: str | None = None) -> None:
        self.argv = argv
        self.env = env
        self._holder = holder
        self._scratch = scratch
        self._names: list[str] = []

    def command(self, agent_argv: Sequence[str]) -> list[str]:
        return [*self.argv, *agent_argv]

    def listen_sockets(self, ports: Sequence[int]) -> list[socket.socket]:
        """Listening TCP sockets on 127.0.0.1, one per port (0: any free one),
        in the agent's network namespace: with ``offline`` only the agent can
        reach them. Raises PortInUse, UsageError."""
        sockets: list[socket.socket] = []
        try:
            for port in ports:
                sockets.append(self._listen(port))
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    def _listen(self, port: int) -> socket.socket:
        if self._holder is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(socket.SOMAXCONN)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse("127.0.0.1", port) from exc
                raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from exc
            return sock
        reply, fds = self._holder.request(f"listen {port}")
        if reply == b"ok" and len(fds) == 1:
            return socket.socket(fileno=fds[0])
        for fd in fds:
            os.close(fd)
        code, _, text = reply.decode(errors="replace").removeprefix("error ").partition(" ")
        if code == str(errno.EADDRINUSE):
            raise PortInUse("127.0.0.1", port)
        raise UsageError(f"cannot listen on 127.0.0.1:{port} in the offline namespace: "
                         f"{text or 'the namespace holder has exited'}")

    def dns_queries(self) -> list[str]:
        """The names the agent tried to resolve, in the order first asked
        (offline only; empty otherwise). Still answers after ``close()``."""
        if self._holder is not None:
            reply, _ = self._holder.request("names")
            if reply.startswith(b"names "):
                self._names = list(json.loads(reply[len(b"names "):]))
        return list(self._names)

    def close(self) -> None:
        """End the namespace holder and remove the scratch directory; the
        mounts live only in the agent's namespace and go with its processes."""
        if self._holder is not None:
            self.dns_queries()
            self._holder.close()
            self._holder = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    @property
    def holder_pid(self) -> int | None:
        return None if self._holder is None else self._holder.process.pid

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_RESOLV_CONF = """\
# Shown at /etc/resolv.conf to an agent replayed offline: every name is
# answered NXDOMAIN by a resolver on loopback that logs it.
nameserver 127.0.0.1
options attempts:1 timeout:1
"""


def prepare(isolation: Isolation, base_env: Mapping[str, str], *,
            caps: Capabilities | None = None) -> IsolatedLaunch:
    """Prepare to start an agent with ``isolation``; ``base_env`` is the
    environment it would otherwise get. Call it just before starting the
    agent: the clock counts from now. Raises UsageError (one line) when a
    requested capability is missing, or a bind cannot be shown."""
    found = caps if caps is not None else capabilities()
    missing = _requested_missing(isolation, found)
    if missing is not None:
        raise UsageError(missing)
    binds = _checked_binds(isolation.binds)
    readonly_binds = _checked_binds(isolation.readonly_binds)
    env: dict[str, str] = {}
    if isolation.clock_start_ns is not None and found.faketime is not None:
        env = clock_env(found.faketime, isolation.clock_start_ns, base_env, time.time_ns())
    if not binds and not readonly_binds and not isolation.offline and isolation.cwd is None:
        return IsolatedLaunch([], env)
    scratch = tempfile.mkdtemp(prefix="wiretape-isolate-")
    holder: _Holder | None = None
    try:
        argv = [sys.executable, "-I", "-S", EXEC_SCRIPT, "exec", "--scratch", scratch]
        os.mkdir(os.path.join(scratch, "room"))
        if isolation.offline:
            holder = _Holder(found.user_namespace, scratch)
            namespaces = f"/proc/{holder.process.pid}/ns"
            if found.user_namespace:
                argv += ["--user-ns", f"{namespaces}/user"]
            argv += ["--net-ns", f"{namespaces}/net"]
            if found.mount_namespaces:
                resolv_conf = os.path.join(scratch, "resolv.conf")
                Path(resolv_conf).write_text(_RESOLV_CONF)
                os.chmod(resolv_conf, 0o644)
                argv += ["--resolv", resolv_conf]
        elif found.user_namespace and (binds or readonly_binds):
            argv.append("--new-user-ns")
        for source, target in readonly_binds:
            argv += ["--bind-ro", source, target]
        for source, original in binds:
            argv += ["--bind", source, original]
        if isolation.cwd is not None:
            argv += ["--chdir", isolation.cwd]
        argv.append("--")
    except BaseException:
        if holder is not None:
            holder.close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return IsolatedLaunch(argv, env, holder, scratch)
