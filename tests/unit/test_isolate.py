"""The parts of isolation that need no namespace: the DNS wire format of the
offline resolver, the clock's environment, what ``prepare`` refuses and the
wrapper command it builds (tests/e2e/test_isolation.py runs them for real).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from pathlib import Path

import pytest

from wiretape.errors import PortInUse, UsageError
from wiretape.launch import isolate
from wiretape.launch.isolate import Capabilities, Isolation, clock_env, prepare
from wiretape.launch.isolate_exec import dns_nxdomain, dns_question

LIBRARY = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
ALL = Capabilities(mount_namespaces=True, network_namespaces=True, faketime=LIBRARY)
NONE = Capabilities(
    mount_namespaces=False, network_namespaces=False, faketime=None,
    reasons={"mount_namespaces": "unshare(CLONE_NEWNS): Operation not permitted (...)",
             "network_namespaces": "unshare(CLONE_NEWNET): Operation not permitted (...)",
             "faketime": "libfaketime not found (apt-get install faketime)"})


def query(name: bytes, flags: int = 0x0100, qdcount: int = 1, ident: int = 0x1234) -> bytes:
    """A DNS query as glibc sends it (RD set), type A, class IN."""
    labels = b"".join(bytes([len(part)]) + part for part in name.split(b".") if part)
    return struct.pack("!HHHHHH", ident, flags, qdcount, 0, 0, 0) + labels + b"\0\0\1\0\1"


# -- DNS --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("message", "expected"), [
    (query(b"example.com"), "example.com"),
    (query(b"Example.COM."), "example.com"),
    (query(b"api.openai.com"), "api.openai.com"),
    (query(b"example.com", flags=0x8180), None),         # a response, not a query
    (query(b"example.com", flags=0x2800), None),         # OPCODE 5 (UPDATE)
    (query(b"example.com", qdcount=0), None),
    (query(b"example.com")[:-3], None),                  # cut inside QTYPE/QCLASS
    (query(b"example.com")[:20], None),                  # cut inside a label
    (query(b"")[:12] + b"\xc0\x0c\0\0\1\0\1", None),     # a compression pointer
    (query(b""), None),                                  # the root: no name to report
    (b"\x12\x34\x01", None),                             # shorter than a header
])
def test_dns_question(message: bytes, expected: str | None) -> None:
    found = dns_question(message)
    assert (found[0] if found else None) == expected
    if found:
        assert found[1] == len(message)


def test_dns_answer_is_nxdomain_for_the_same_question() -> None:
    message = query(b"example.com", ident=0xBEEF)
    _, end = dns_question(message) or ("", 0)
    answer = dns_nxdomain(message, end)
    ident, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", answer)
    assert (ident, qd, an, ns, ar) == (0xBEEF, 1, 0, 0, 0)
    assert flags == 0x8183  # QR, RD (copied), RA, RCODE 3 NXDOMAIN
    assert answer[12:] == message[12:]


def test_dns_answer_drops_what_follows_the_question() -> None:
    opt = b"\0\0\x29\x10\0\0\0\0\0\0\0"  # an EDNS OPT record glibc may add
    message = query(b"example.com")[:4] + b"\0\1\0\0\0\0\0\1" + query(b"example.com")[12:] + opt
    name, end = dns_question(message) or ("", 0)
    assert name == "example.com"
    answer = dns_nxdomain(message, end)
    assert struct.unpack_from("!HHHH", answer, 4) == (1, 0, 0, 0)
    assert answer.endswith(b"\0\1\0\1")


# -- clock ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("start_s", "now_s", "faketime"), [
    (1_000_000_000, 1_700_000_000, "-700000000"),
    (1_700_000_100, 1_700_000_000, "+100"),
    (1_700_000_000, 1_700_000_000, "+0"),
    (1_700_000_000.4, 1_700_000_000, "+0"),
    (1_700_000_000.6, 1_700_000_000, "+1"),
])
def test_clock_offset(start_s: float, now_s: int, faketime: str) -> None:
    env = clock_env(LIBRARY, int(start_s * 1e9), {}, now_s * 10**9)
    assert env == {"LD_PRELOAD": LIBRARY, "FAKETIME": faketime,
                   "FAKETIME_DONT_FAKE_MONOTONIC": "1", "NO_FAKE_STAT": "1"}


@pytest.mark.parametrize(("preload", "expected"), [
    ("", LIBRARY),
    ("/opt/a.so", f"{LIBRARY}:/opt/a.so"),
    ("/opt/a.so /opt/b.so", f"{LIBRARY}:/opt/a.so:/opt/b.so"),
    (f"/opt/a.so:{LIBRARY}", f"{LIBRARY}:/opt/a.so"),
])
def test_clock_keeps_the_agents_own_preloads(preload: str, expected: str) -> None:
    env = clock_env(LIBRARY, 0, {"LD_PRELOAD": preload}, 0)
    assert env["LD_PRELOAD"] == expected


# -- what prepare refuses, and what it builds ---------------------------------------------------


@pytest.mark.parametrize(("isolation", "message"), [
    (Isolation(binds=(("/tmp", "/tmp"),)),
     "same paths need mount namespaces: unshare(CLONE_NEWNS): Operation not permitted (...)"),
    (Isolation(offline=True),
     "--offline needs network namespaces: unshare(CLONE_NEWNET): Operation not permitted (...)"),
    (Isolation(clock_start_ns=0),
     "--clock recorded needs libfaketime: apt-get install faketime"),
])
def test_prepare_names_the_missing_capability(isolation: Isolation, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        prepare(isolation, {}, caps=NONE)
    assert str(caught.value) == message


def test_prepare_refuses_binds_it_cannot_show(tmp_path: Path) -> None:
    source = tmp_path / "sandbox"
    source.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = [
        ((str(source), "relative/path"), "the original must be an absolute path below /"),
        ((str(source), "/"), "the original must be an absolute path below /"),
        ((str(tmp_path / "gone"), str(tmp_path)), f"{tmp_path / 'gone'} does not exist"),
        ((str(source), str(a_file)), "one is a directory and the other is not"),
        ((str(source), "/wiretape-no-such-top/x"),
         ("/wiretape-no-such-top does not exist here and no directory is made in / "
          "(replay with --no-same-paths)")),
        ((str(source), str(a_file / "below")), f"{a_file} is not a directory"),
    ]
    for bind, reason in cases:
        with pytest.raises(UsageError) as caught:
            prepare(Isolation(binds=(bind,)), {}, caps=ALL)
        assert str(caught.value) == f"cannot show {bind[0]} at {bind[1]}: {reason}"
    twice = ((str(source), str(tmp_path)), (str(source), str(tmp_path) + "/"))
    with pytest.raises(UsageError, match="is already shown from another source"):
        prepare(Isolation(binds=twice), {}, caps=ALL)


def test_nothing_requested_needs_no_wrapper() -> None:
    with prepare(Isolation(), {"LD_PRELOAD": "/opt/a.so"}, caps=NONE) as launch:
        assert (launch.argv, launch.env, launch.holder_pid) == ([], {}, None)
        assert launch.command(["agent", "-x"]) == ["agent", "-x"]
        assert launch.dns_queries() == []


def test_clock_alone_is_only_environment() -> None:
    launch = prepare(Isolation(clock_start_ns=1_000_000_000 * 10**9), {}, caps=ALL)
    assert launch.argv == []
    assert launch.env["LD_PRELOAD"] == LIBRARY
    assert int(launch.env["FAKETIME"]) < -700_000_000
    launch.close()


@pytest.mark.parametrize(("user_namespace", "extra"), [(False, []), (True, ["--new-user-ns"])])
def test_binds_build_the_exec_wrapper(tmp_path: Path, user_namespace: bool,
                                      extra: list[str]) -> None:
    (tmp_path / "sandbox").mkdir()
    caps = Capabilities(True, True, LIBRARY, user_namespace=user_namespace)
    isolation = Isolation(binds=((str(tmp_path / "sandbox"), str(tmp_path / "original")),),
                          cwd=str(tmp_path / "original"))
    launch = prepare(isolation, {}, caps=caps)
    scratch = launch.argv[launch.argv.index("--scratch") + 1]
    assert launch.argv[:5] == [sys.executable, "-I", "-S", isolate.EXEC_SCRIPT, "exec"]
    assert launch.argv[5:] == ["--scratch", scratch, *extra,
                               "--bind", str(tmp_path / "sandbox"), str(tmp_path / "original"),
                               "--chdir", str(tmp_path / "original"), "--"]
    assert launch.command(["agent"])[-2:] == ["--", "agent"]
    assert os.path.isdir(scratch)
    launch.close()
    assert not os.path.exists(scratch)
    assert not (tmp_path / "original").exists()  # prepare makes nothing at the original path


def test_listen_sockets_without_offline_are_ordinary_loopback_sockets() -> None:
    with prepare(Isolation(), {}, caps=NONE) as launch:
        [first, second] = launch.listen_sockets([0, 0])
        with first, second:
            assert first.getsockname()[0] == "127.0.0.1"
            assert first.getsockname()[1] != second.getsockname()[1]
            with socket.create_connection(first.getsockname(), timeout=2):
                pass
            with pytest.raises(PortInUse) as caught:
                launch.listen_sockets([first.getsockname()[1]])
            assert caught.value.port == first.getsockname()[1]


def test_exported_names() -> None:
    public = {name for name in vars(isolate) if not name.startswith("_")
              and getattr(getattr(isolate, name), "__module__", None) == isolate.__name__}
    assert public <= set(isolate.__all__)
    assert all(hasattr(isolate, name) for name in isolate.__all__)
