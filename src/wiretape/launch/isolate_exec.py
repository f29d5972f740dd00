"""The inside half of isolation: three small programs, each run as its own
process with ``python -I -S isolate_exec.py MODE ...`` (stdlib only, so the
agent's PYTHON* variables, site-packages and wiretape's import cost play no
part).

    probe [--user]        try a mount and a network namespace; print one JSON line
    hold FD [--user] [--scratch DIR]
                          hold a network namespace with only loopback up; answer
                          DNS on 127.0.0.1:53 with NXDOMAIN, logging the names;
                          create listening sockets in it for the control socket FD;
                          remove DIR when FD reaches EOF
    exec OPTIONS -- ARGV  enter the held namespaces, make a private mount
                          namespace, bind-mount, chdir, then exec ARGV

Owns the system calls (unshare, setns, mount), the loopback ioctl and the DNS
wire format. Knows nothing of runs, replays or the command line; isolate.py
is its only caller. A failure is one line on stderr (exec: exit status 125,
the convention of env(1) and unshare(1) for their own errors).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import selectors
import shutil
import socket
import stat
import struct
import sys
import tempfile
from collections.abc import Sequence

# <sched.h> and <sys/mount.h> (man 2 unshare, man 2 mount, man 2 umount).
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
# <linux/sockios.h>, <net/if.h> (man 7 netdevice).
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

EXEC_FAILED = 125
DNS_PORT = 53
MAX_NAMES = 1000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]


class IsolationFailed(Exception):
    """One line saying which step failed and why."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise IsolationFailed(f"{what}: {os.strerror(code)}")


def _path(value: str | None) -> bytes | None:
    return None if value is None else os.fsencode(value)


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({_flag_names(flags)})")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), f"setns({path})")
    finally:
        os.close(fd)


def mount(source: str | None, target: str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    result = _libc.mount(_path(source), _path(target), _path(fstype), flags, _path(data))
    _check(result, f"mount {source or fstype} at {target}")


def umount(target: str) -> None:
    _check(_libc.umount2(_path(target), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def _flag_names(flags: int) -> str:
    names = [name for name, bit in (("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNS", CLONE_NEWNS),
                                    ("CLONE_NEWNET", CLONE_NEWNET)) if flags & bit]
    return "|".join(names)


def new_user_namespace(flags: int) -> None:
    """unshare(CLONE_NEWUSER | flags) keeping this process's own uid and gid.

    The only mapping an unprivileged process may write is its own ids; the
    creator holds every capability in the new namespace until it execs, and a
    later execve() by a non-zero uid drops them (man 7 user_namespaces,
    "User and group ID mappings"; man 7 capabilities, "execve()").
    setgroups must be denied before gid_map is written (since Linux 3.19).
    """
    uid, gid = os.geteuid(), os.getegid()
    unshare(CLONE_NEWUSER | flags)
    for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as file:
                file.write(line)
        except OSError as exc:
            raise IsolationFailed(f"writing /proc/self/{name}: {exc.strerror}") from exc


def loopback_up() -> None:
    """Bring ``lo`` up in this network namespace: a new one has only ``lo``,
    and it is down (man 7 network_namespaces; SIOCSIFFLAGS in man 7 netdevice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            request = struct.pack("16sH22x", b"lo", 0)
            flags = struct.unpack_from("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        except OSError as exc:
            raise IsolationFailed(f"bringing up lo: {exc.strerror}") from exc


def make_mounts_private() -> None:
    """Nothing mounted from here on propagates back to the host's namespace
    (man 7 mount_namespaces, "Shared subtrees"; what unshare(1) does by default)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)


# -- DNS (RFC 1035 section 4.1) ------------------------------------------------------------


def dns_question(message: bytes) -> tuple[str, int] | None:
    """The first question's name (lower case, no trailing dot) and where the
    question ends, for a standard query; None for anything else."""
    if len(message) < 12:
        return None
    flags, qdcount = struct.unpack_from("!HH", message, 2)
    if flags & 0x8000 or (flags >> 11) & 0xF or qdcount < 1:  # a response, or not QUERY
        return None
    labels: list[str] = []
    at = 12
    while True:
        if at >= len(message):
            return None
        length = message[at]
        if length == 0:
            break
        if length > 63 or at + 1 + length > len(message):  # no compression in a question we accept
            return None
        labels.append(message[at + 1:at + 1 + length].decode("ascii", "backslashreplace").lower())
        at += 1 + length
    end = at + 1 + 4  # the root label, QTYPE, QCLASS
    if end > len(message) or not labels:
        return None
    return ".".join(labels), end


def dns_nxdomain(message: bytes, end: int) -> bytes:
    """The answer to the query ``message`` whose question ends at ``end``:
    NXDOMAIN (RCODE 3), so resolvers fail at once ("Name or service not known")."""
    (query_flags,) = struct.unpack_from("!H", message, 2)
    flags = 0x8000 | (query_flags & 0x7900) | 0x0080 | 3  # QR, OPCODE and RD copied, RA, NXDOMAIN
    return message[:2] + struct.pack("!HHHHH", flags, 1, 0, 0, 0) + message[12:end]


# -- probe ---------------------------------------------------------------------------------


def probe(user: bool) -> dict[str, str | None]:
    """What fails when this process tries each namespace kind (None: works)."""
    found: dict[str, str | None] = {"mount": None, "network": None}
    if user:
        try:
            new_user_namespace(0)
        except IsolationFailed as exc:
            return {"mount": str(exc), "network": str(exc)}
    try:
        unshare(CLONE_NEWNS)
        make_mounts_private()
        with tempfile.TemporaryDirectory(prefix="wiretape-probe-") as scratch:
            mount("tmpfs", scratch, "tmpfs", 0, "size=64k")
            umount(scratch)
    except IsolationFailed as exc:
        found["mount"] = str(exc)
    try:
        unshare(CLONE_NEWNET)
        loopback_up()
    except IsolationFailed as exc:
        found["network"] = str(exc)
    return found


# -- hold ----------------------------------------------------------------------------------


def hold(control: socket.socket, user: bool) -> int:
    """Hold a new network namespace until the control socket reaches EOF."""
    try:
        if user:
            new_user_namespace(CLONE_NEWNET)
        else:
            unshare(CLONE_NEWNET)
        loopback_up()
        resolver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        resolver.bind(("127.0.0.1", DNS_PORT))
    except (IsolationFailed, OSError) as exc:
        control.send(f"error {exc}".encode())
        return 1
    control.send(b"ready")
    names: list[str] = []
    events = selectors.DefaultSelector()
    events.register(control, selectors.EVENT_READ)
    events.register(resolver, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj is resolver:
                _answer_dns(resolver, names)
                continue
            request = control.recv(4096)
            if not request:
                return 0
            _serve_request(control, request.decode(), names)


def _answer_dns(resolver: socket.socket, names: list[str]) -> None:
    try:
        message, peer = resolver.recvfrom(4096)
    except OSError:
        return
    question = dns_question(message)
    if question is None:
        return
    name, end = question
    if name not in names and len(names) < MAX_NAMES:
        names.append(name)
    with contextlib.suppress(OSError):
        resolver.sendto(dns_nxdomain(message, end), peer)


def _serve_request(control: socket.socket, request: str, names: list[str]) -> None:
    verb, _, argument = request.partition(" ")
    if verb == "names":
        control.send(b"names " + json.dumps(names).encode())
    elif verb == "listen":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", int(argument)))
            listener.listen(socket.SOMAXCONN)
            socket.send_fds(control, [b"ok"], [listener.fileno()])
        except OSError as exc:
            control.send(f"error {exc.errno} {exc.strerror}".encode())
        except ValueError:
            control.send(f"error 0 not a port: {argument!r}".encode())
        finally:
            listener.close()
    else:
        control.send(f"error 0 unknown request {verb!r}".encode())


# -- exec ----------------------------------------------------------------------------------


def show_at(source: str, original: str, room: list[str], scratch: str | None) -> None:
    """Bind-mount ``source`` at ``original`` (recursively, so mounts below it
    come along: man 8 mount, --rbind). When ``original`` does not exist, make
    room for it inside this namespace only (see ``_make_room``)."""
    if not os.path.lexists(original):
        _make_room(original, os.path.isdir(source), room, scratch)
    mount(source, original, None, MS_BIND | MS_REC)


def _make_room(original: str, is_dir: bool, room: list[str], scratch: str | None) -> None:
    """Create ``original`` without writing to the host: the nearest existing
    ancestor is covered with a tmpfs into which each of its entries is
    bind-mounted back, then the missing path is created in the tmpfs.
    ``room`` holds the stash mount point once made (under ``scratch``)."""
    ancestor = os.path.dirname(original)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if ancestor == "/":
        raise IsolationFailed(f"cannot create {original}: / has no "
                              f"{original.split('/')[1]!r} and / is never covered")
    if scratch is None:
        raise IsolationFailed(f"cannot create {original}: no scratch directory given")
    if not room:
        room.append(os.path.join(scratch, "room"))
        mount("tmpfs", room[0], "tmpfs", 0, "mode=0700")
    stash = os.path.join(room[0], str(len(os.listdir(room[0]))))
    os.mkdir(stash)
    mount(ancestor, stash, None, MS_BIND | MS_REC)
    info = os.stat(ancestor)
    mount("tmpfs", ancestor, "tmpfs", 0, f"mode={stat.S_IMODE(info.st_mode):o}")
    # An id not mapped in this user namespace: the tmpfs keeps ours.
    with contextlib.suppress(OSError):
        os.chown(ancestor, info.st_uid, info.st_gid)
    for entry in os.scandir(stash):
        placeholder = os.path.join(ancestor, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), placeholder)
            continue
        if entry.is_dir():
            os.mkdir(placeholder)
        else:
            os.close(os.open(placeholder, os.O_CREAT | os.O_WRONLY, 0o600))
        mount(entry.path, placeholder, None, MS_BIND | MS_REC)
    parent = os.path.dirname(original)
    os.makedirs(parent, exist_ok=True)
    if is_dir:
        os.mkdir(original)
    else:
        os.close(os.open(original, os.O_CREAT | os.O_WRONLY, 0o600))


def show_resolver(resolv_conf: str) -> None:
    """Show ``resolv_conf`` read-only at /etc/resolv.conf. Where there is no
    /etc/resolv.conf, resolvers already ask 127.0.0.1 (man 5 resolv.conf)."""
    if not os.path.exists("/etc/resolv.conf"):
        return
    mount(resolv_conf, "/etc/resolv.conf", None, MS_BIND)
    mount(None, "/etc/resolv.conf", None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def run_exec(args: Sequence[str]) -> int:
    """Parse the exec options, isolate this process, and exec the agent."""
    options: dict[str, str] = {}
    binds: list[tuple[str, str]] = []
    readonly_binds: list[tuple[str, str]] = []
    rest = list(args)
    while rest and rest[0] != "--":
        flag = rest.pop(0)
        if flag == "--bind":
            binds.append((rest.pop(0), rest.pop(0)))
        elif flag == "--bind-ro":
            readonly_binds.append((rest.pop(0), rest.pop(0)))
        elif flag == "--new-user-ns":
            options[flag] = ""
        else:
            options[flag] = rest.pop(0)
    argv = rest[1:]
    if not argv:
        raise IsolationFailed("no command given after --")
    try:
        cwd = options.get("--chdir") or os.getcwd()
    except OSError as exc:
        raise IsolationFailed(f"the working directory is gone: {exc.strerror}") from exc
    if "--user-ns" in options:
        setns(options["--user-ns"], CLONE_NEWUSER)
    if "--net-ns" in options:
        setns(options["--net-ns"], CLONE_NEWNET)
    if binds or readonly_binds or "--resolv" in options:
        if "--new-user-ns" in options:
            new_user_namespace(CLONE_NEWNS)
        else:
            unshare(CLONE_NEWNS)
        make_mounts_private()
        room: list[str] = []
        # Folders the snapshot left out to the tools that make them (a
        # virtualenv, node_modules) are shown read-only inside the sandbox
        # copy first, so that showing the copy carries them along.
        for source, target in readonly_binds:
            if os.path.isdir(source) and os.path.isdir(target):
                mount(source, target, None, MS_BIND | MS_REC)
                mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC)
        # Shallow first, so a tree shown inside another one lands on top of it.
        for source, original in sorted(binds, key=lambda pair: pair[1].count("/")):
            show_at(source, original, room, options.get("--scratch"))
        if room:
            umount(room[0])  # what was bound from the stash stays; the stash goes
        if "--resolv" in options:
            show_resolver(options["--resolv"])
    try:
        # Again after the mounts: a working directory entered before them is
        # the original's inode, so relative writes would reach the original.
        os.chdir(cwd)
    except OSError as exc:
        raise IsolationFailed(f"cannot enter {cwd}: {exc.strerror}") from exc
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        reason = "not found" if exc.errno == errno.ENOENT else exc.strerror
        sys.stderr.write(f"wiretape: cannot run command {argv[0]!r}: {reason}\n")
        return 127 if exc.errno == errno.ENOENT else 126
    return 0  # not reached: execvp replaces this process


def main(argv: Sequence[str]) -> int:
    mode, args = (argv[0], argv[1:]) if argv else ("", [])
    if mode == "probe":
        print(json.dumps(probe(user="--user" in args)))
        return 0
    if mode == "hold":
        with socket.socket(fileno=int(args[0])) as control:
            try:
                return hold(control, user="--user" in args)
            except (BrokenPipeError, ConnectionResetError):
                return 0  # wiretape went away: so does the namespace
            finally:
                if "--scratch" in args:  # also when wiretape was killed
                    shutil.rmtree(args[args.index("--scratch") + 1], ignore_errors=True)
    if mode == "exec":
        try:
            return run_exec(args)
        except IsolationFailed as exc:
            sys.stderr.write(f"wiretape: cannot isolate the command: {exc}\n")
        except OSError as exc:
            sys.stderr.write(f"wiretape: cannot isolate the command: {exc.filename}: "
                             f"{exc.strerror}\n")
        return EXEC_FAILED
    sys.stderr.write(f"wiretape: unknown isolation mode {mode!r}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
