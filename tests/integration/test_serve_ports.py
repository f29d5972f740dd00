"""``wiretape serve``'s lines about where it listens, with real processes
on 127.0.0.1: the base URL for the agent is printed as ``listening: URL``
(not ``upstream:``, which reads as the origin's address), and a replay
warns that it moved an origin only when the recorded port really was taken
and no ``--port`` chose one."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from test_proxy_edges import Conn, Wiretape, free_port, post

from wiretape.testing import FakeProvider, TextTurn

MOVED = "is taken, so it listens on"


def record_one(tmp_path: Path, port: int, *upstream: str) -> tuple[Path, str]:
    """A run recorded by ``serve --record --port PORT``: its path and the
    first line serve printed."""
    run = tmp_path / "ports.wtape"
    with FakeProvider([TextTurn("Red.")], delay=0.0) as fp:
        target = [f"{name}={fp.url}/v1" for name in upstream] or [f"{fp.url}/v1"]
        wt = Wiretape(tmp_path, "serve", "--record", "--upstream", *target,
                      "--port", str(port), "-o", str(run))
        try:
            assert wt.proc.stdout is not None
            first = wt.proc.stdout.readline().decode()
            wt.wait_listening(port)
            with Conn(port) as conn:
                conn.send(post("/v1/chat/completions", {"model": "m", "messages": []}))
                assert conn.reply().status == 200
            code, _, err = wt.stop(signal.SIGINT)
        finally:
            wt.kill()
    assert code == 0, err
    return run, first


def test_the_agents_base_url_is_printed_as_listening_not_upstream(tmp_path: Path) -> None:
    port = free_port()
    _, first = record_one(tmp_path, port)
    assert first == f"listening: http://127.0.0.1:{port}/v1\n"
    named = tmp_path / "named"
    named.mkdir()
    _, first = record_one(named, port, "openai")
    assert first == f"openai: http://127.0.0.1:{port}/v1\n"


@pytest.mark.slow  # a long scenario: make test-slow
def test_a_replay_given_port_says_no_warning_when_the_recorded_one_is_free(
        tmp_path: Path) -> None:
    recorded = free_port()
    run, _ = record_one(tmp_path, recorded, "openai")
    for given in ([str(free_port())], [f"openai={free_port()}"]):
        wt = Wiretape(tmp_path, "serve", "--replay", str(run), "--port", *given)
        try:
            urls = wt.read_urls("openai")
            code, _, err = wt.stop(signal.SIGTERM)
        finally:
            wt.kill()
        port = given[0].rpartition("=")[2]
        assert urls["openai"] == f"http://127.0.0.1:{port}/v1"
        assert code == 3, err  # (the recorded exchange was not called: unused)
        assert MOVED not in err and "warning" not in err, err


def test_a_replay_moved_off_its_taken_recorded_port_says_so(tmp_path: Path) -> None:
    recorded = free_port()
    run, _ = record_one(tmp_path, recorded, "openai")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", recorded))
        holder.listen()
        wt = Wiretape(tmp_path, "serve", "--replay", str(run))
        try:
            urls = wt.read_urls("openai")
            code, _, err = wt.stop(signal.SIGTERM)
        finally:
            wt.kill()
    moved = int(urls["openai"].split(":")[2].split("/")[0])
    assert moved != recorded
    assert code == 3, err  # (the recorded exchange was not called: unused)
    assert (f"wiretape: warning: openai's recorded port {recorded} {MOVED} {moved}: point the "
            "agent's config there, or free the port, or give --port openai=N") in err, err
