"""Isolation for real: a child started through ``prepare`` sees the sandbox at
the original paths and never writes the original, cannot reach any network
but the sockets made for it, has its DNS names logged, and runs on the
requested clock; ``close`` leaves no process and no mount behind.

Where this machine allows no namespaces (not root, no user namespaces) or
has no libfaketime, the tests skip with the reason ``capabilities()`` gives.
Every child that could touch a network first checks that it is inside a new
network namespace with only ``lo``, and stops otherwise.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wiretape.launch.isolate import EXEC_FAILED, IsolatedLaunch, Isolation, capabilities, prepare

CAPS = capabilities()
needs_mounts = pytest.mark.skipif(not CAPS.mount_namespaces,
                                  reason=CAPS.reasons.get("mount_namespaces", ""))
needs_network = pytest.mark.skipif(not CAPS.network_namespaces,
                                   reason=CAPS.reasons.get("network_namespaces", ""))
needs_faketime = pytest.mark.skipif(CAPS.faketime is None, reason=CAPS.reasons.get("faketime", ""))

HOST_NETNS = os.stat("/proc/self/ns/net").st_ino
START_S = 1_000_000_000  # 2001-09-09 01:46:40 UTC

#: Run first in every child that may try the network: stop unless inside a
#: new network namespace whose only interface is lo.
GUARD = f"""
import os, socket, sys
if (os.stat("/proc/self/ns/net").st_ino == {HOST_NETNS}
        or [name for _, name in socket.if_nameindex()] != ["lo"]):
    print("NOT ISOLATED")
    sys.exit(99)
"""

OFFLINE_AGENT = GUARD + """
import json, time, urllib.error, urllib.request
found = {}
try:
    urllib.request.urlopen("http://example.com/", timeout=5)
    found["fetch"] = "fetched"
except urllib.error.URLError as exc:
    found["fetch"] = str(exc.reason)
probe = socket.socket()
began = time.monotonic()
try:
    probe.connect(("192.0.2.1", 80))  # TEST-NET-1 (RFC 5737): routed nowhere
    found["connect"] = "connected"
except OSError as exc:
    found["connect"] = exc.errno
found["connect_s"] = time.monotonic() - began
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as served:
    found["served"] = served.recv(100).decode()
found["interfaces"] = [name for _, name in socket.if_nameindex()]
print(json.dumps(found))
"""

_SCRUB = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def run(launch: IsolatedLaunch, code: str, *args: str, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(launch.env)
    return subprocess.run(launch.command([sys.executable, "-c", code, *args]), cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def output(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


def digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file()
            else "dir" for p in sorted(tree.rglob("*"))}


def mount_points() -> list[str]:
    return sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())


def serve_once(sock: socket.socket, greeting: bytes) -> threading.Thread:
    def answer() -> None:
        sock.settimeout(20)
        try:
            connection, _ = sock.accept()
        except OSError:
            return
        with connection:
            connection.sendall(greeting)
    thread = threading.Thread(target=answer, name="test-serve-once", daemon=True)
    thread.start()
    return thread


@pytest.fixture
def trees(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An original project and its sandbox copy."""
    original, sandbox = tmp_path / "project", tmp_path / "sandbox"
    (original / "sub").mkdir(parents=True)
    (original / "a.txt").write_text("original a\n")
    (original / "sub" / "b.txt").write_text("original b\n")
    shutil.copytree(original, sandbox)
    yield original, sandbox


@needs_mounts
def test_writes_through_the_original_paths_land_in_the_sandbox(
        trees: tuple[Path, Path]) -> None:
    original, sandbox = trees
    before, mounts = digest(original), mount_points()
    code = f"""
import json, os
root = {str(original)!r}
with open(root + "/a.txt", "a") as f: f.write("changed\\n")
with open(root + "/new.txt", "w") as f: f.write("new\\n")
os.remove(root + "/sub/b.txt")
with open("relative.txt", "w") as f: f.write("relative\\n")
print(json.dumps({{"cwd": os.getcwd(), "a": open(root + "/a.txt").read()}}))
"""
    with prepare(Isolation(binds=((str(sandbox), str(original)),)), os.environ) as launch:
        found = output(run(launch, code, cwd=original))
    assert found == {"cwd": str(original), "a": "original a\nchanged\n"}
    assert digest(original) == before
    assert (sandbox / "a.txt").read_text() == "original a\nchanged\n"
    assert (sandbox / "new.txt").read_text() == "new\n"
    assert (sandbox / "relative.txt").read_text() == "relative\n"
    assert not (sandbox / "sub" / "b.txt").exists()
    assert mount_points() == mounts


@needs_mounts
@pytest.mark.skipif(CAPS.user_namespace, reason="needs root: it marks mounts shared in a "
                    "namespace of its own first")
def test_nothing_propagates_back_even_from_shared_mounts(trees: tuple[Path, Path]) -> None:
    """Many hosts mark / shared (systemd does); the agent's mounts must still
    stay in its namespace (man 7 mount_namespaces, "Shared subtrees")."""
    original, sandbox = trees
    script = f"""
import json, os, subprocess, sys
from wiretape.launch import isolate_exec as syscalls
syscalls.unshare(syscalls.CLONE_NEWNS)
syscalls.mount(None, "/", None, syscalls.MS_REC | 0x100000)  # MS_SHARED: this is now "the host"
def points():
    return sorted(line.split()[4] for line in open("/proc/self/mountinfo"))
from wiretape.launch.isolate import Isolation, prepare
before = points()
with prepare(Isolation(binds=(({str(sandbox)!r}, {str(original)!r}),)), os.environ) as launch:
    child = subprocess.run(launch.command(["true"]))
    during = points()
print(json.dumps({{"status": child.returncode, "leaked": sorted(set(during) - set(before))}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, check=False)
    assert output(done) == {"status": 0, "leaked": []}


@needs_mounts
def test_an_original_path_missing_here_is_made_only_inside(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "notes.txt").write_text("notes\n")
    original = tmp_path / "home" / "alice" / "project"
    code = f"""
import json, os
with open("made.txt", "w") as f: f.write("made\\n")
print(json.dumps({{"cwd": os.getcwd(), "here": sorted(os.listdir(".")),
                   "beside": sorted(os.listdir({str(tmp_path)!r}))}}))
"""
    isolation = Isolation(binds=((str(sandbox), str(original)),), cwd=str(original))
    with prepare(isolation, os.environ) as launch:
        found = output(run(launch, code, cwd=tmp_path))
    assert found == {"cwd": str(original), "here": ["made.txt", "notes.txt"],
                     "beside": ["home", "sandbox"]}
    assert not (tmp_path / "home").exists()
    assert (sandbox / "made.txt").read_text() == "made\n"


@needs_network
@needs_mounts
def test_offline_reaches_only_its_own_sockets_and_logs_names() -> None:
    with socket.socket() as host_side:
        # The same port on the host serves something else: the child must
        # reach the one in its own namespace.
        host_side.bind(("127.0.0.1", 0))
        host_side.listen()
        port = host_side.getsockname()[1]
        serve_once(host_side, b"host")
        with prepare(Isolation(offline=True), os.environ) as launch:
            [inside] = launch.listen_sockets([port])
            with inside:
                serve_once(inside, b"namespace")
                found = output(run(launch, OFFLINE_AGENT, str(port)))
            names = launch.dns_queries()
    assert found["fetch"] == "[Errno -2] Name or service not known"
    assert found["connect"] == errno.ENETUNREACH
    assert found["connect_s"] < 0.5
    assert found["served"] == "namespace"
    assert found["interfaces"] == ["lo"]
    assert names == ["example.com"]
    assert launch.dns_queries() == ["example.com"]  # still there after close()


@needs_network
@needs_mounts
def test_close_leaves_no_process_and_no_mount(trees: tuple[Path, Path]) -> None:
    original, sandbox = trees
    mounts = mount_points()
    isolation = Isolation(binds=((str(sandbox), str(original)),), offline=True)
    launch = prepare(isolation, os.environ)
    pid, scratch = launch.holder_pid, launch.argv[launch.argv.index("--scratch") + 1]
    assert pid is not None and Path(f"/proc/{pid}").exists()
    assert output(run(launch, GUARD + "print('{}')")) == {}
    launch.close()
    launch.close()  # twice is harmless
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not Path(scratch).exists()
    assert mount_points() == mounts


@needs_faketime
def test_the_clock_starts_at_the_requested_time(tmp_path: Path) -> None:
    code = """
import json, os, subprocess, sys, time
now = time.time()
later = float(subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                             capture_output=True, text=True).stdout)
date = subprocess.run(["date", "-u", "+%Y-%m-%d %H:%M"], capture_output=True, text=True)
open("stamp", "w").close()
print(json.dumps({"time": now, "child": later, "date": date.stdout.strip(),
                  "mtime": os.stat("stamp").st_mtime}))
"""
    with prepare(Isolation(clock_start_ns=START_S * 10**9), os.environ) as launch:
        found = output(run(launch, code, cwd=tmp_path))
    assert abs(found["time"] - START_S) < 3
    assert 0 <= found["child"] - found["time"] < 3  # the agent's own children share its clock
    assert found["date"] == "2001-09-09 01:46"
    # File timestamps stay real (NO_FAKE_STAT): nothing comparing mtimes is misled.
    assert abs(found["mtime"] - (tmp_path / "stamp").stat().st_mtime) < 1
    assert found["mtime"] > START_S + 10**8


@needs_network
@needs_mounts
@needs_faketime
def test_all_three_together(trees: tuple[Path, Path]) -> None:
    original, sandbox = trees
    before = digest(original)
    code = GUARD + f"""
import json, time
with open({str(original)!r} + "/a.txt", "w") as f: f.write("by the agent\\n")
try:
    socket.getaddrinfo("api.example.net", 443)
except socket.gaierror as exc:
    failed = exc.errno
print(json.dumps({{"time": time.time(), "dns": failed}}))
"""
    isolation = Isolation(binds=((str(sandbox), str(original)),), offline=True,
                          clock_start_ns=START_S * 10**9)
    with prepare(isolation, os.environ) as launch:
        found = output(run(launch, code, cwd=original))
        assert launch.dns_queries() == ["api.example.net"]
    assert abs(found["time"] - START_S) < 3
    assert found["dns"] == socket.EAI_NONAME
    assert digest(original) == before
    assert (sandbox / "a.txt").read_text() == "by the agent\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="as root; without root the probe already "
                    "chose user namespaces when it could")
@needs_network
@needs_mounts
def test_inside_a_user_namespace_too(trees: tuple[Path, Path]) -> None:
    """The path taken without root: the namespaces are made inside a new user
    namespace, which the agent joins keeping its own uid."""
    original, sandbox = trees
    before = digest(original)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    caps = dataclasses.replace(CAPS, user_namespace=True)
    isolation = Isolation(binds=((str(sandbox), str(original)),), offline=True)
    code = OFFLINE_AGENT.replace("print(json.dumps(found))", f"""
with open({str(original)!r} + "/a.txt", "w") as f: f.write("user namespace\\n")
found["uid"] = os.getuid()
found["userns"] = os.readlink("/proc/self/ns/user") != {os.readlink("/proc/self/ns/user")!r}
print(json.dumps(found))""")
    with prepare(isolation, os.environ, caps=caps) as launch:
        [inside] = launch.listen_sockets([port])
        with inside:
            serve_once(inside, b"namespace")
            found = output(run(launch, code, str(port)))
        assert launch.dns_queries() == ["example.com"]
    assert (found["served"], found["connect"], found["uid"], found["userns"]) == (
        "namespace", errno.ENETUNREACH, os.getuid(), True)
    assert digest(original) == before
    assert (sandbox / "a.txt").read_text() == "user namespace\n"


@needs_mounts
def test_a_failure_to_isolate_is_one_line_and_the_agent_never_runs(
        trees: tuple[Path, Path]) -> None:
    original, sandbox = trees
    with prepare(Isolation(binds=((str(sandbox), str(original)),)), os.environ) as launch:
        shutil.rmtree(sandbox)  # gone between prepare and start
        done = run(launch, "print('the agent ran')")
        missing = subprocess.run(launch.command(["wiretape-no-such-agent"]), capture_output=True,
                                 text=True, timeout=30, check=False)
    assert done.returncode == EXEC_FAILED
    assert done.stdout == ""
    assert done.stderr == (f"wiretape: cannot isolate the command: mount {sandbox} at "
                           f"{original}: No such file or directory\n")
    assert missing.returncode == EXEC_FAILED
    (sandbox / "sub").mkdir(parents=True)
    with prepare(Isolation(binds=((str(sandbox), str(original)),)), os.environ) as launch:
        missing = subprocess.run(launch.command(["wiretape-no-such-agent"]), capture_output=True,
                                 text=True, timeout=30, check=False)
    assert missing.returncode == 127
    assert missing.stderr == "wiretape: cannot run command 'wiretape-no-such-agent': not found\n"
