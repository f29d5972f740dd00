"""What ``record --tools`` says at the end when a tool's request went
wrong: refused for ``--max-body`` (named, not blamed on HTTPS_PROXY), plain
HTTP sent inside a CONNECT tunnel (not a rejected certificate), a tool's
host whose certificate does not verify (``--upstream-ca`` suggested), and
a tool's host's own errors (not "the provider's"). curl is the agent."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sdk_clients import explain
from test_tool_fixtures import PageServer, wiretape

from wiretape.intercept.ca import RunCA
from wiretape.store import open_run

pytestmark = pytest.mark.timeout(240)


def record(tmp_path: Path, *args: str) -> str:
    out = wiretape(["record", "--tools", "-o", str(tmp_path / "run.wtape"), "--no-snapshot",
                    *args], tmp_path)
    # (the agent's own exit status: curl's, when it got no answer)
    assert b"wiretape: recorded run_" in out.stderr, explain(out)
    return out.stderr.decode()


def test_a_body_over_max_body_is_named(tmp_path: Path) -> None:
    said = record(tmp_path, "--max-body", "100", "--", "curl", "-sS", "-o", "/dev/null",
                  "--data-binary", "x" * 1000, "https://api.tool.test/upload")
    assert ("wiretape: WARNING: NO EXCHANGE WAS RECORDED: the agent's request was refused "
            "with 413: its body is larger than --max-body allows; record again with a larger "
            "--max-body BYTES") in said, said
    assert "HTTPS_PROXY" not in said, said


def test_plain_http_inside_a_tunnel_is_named(tmp_path: Path) -> None:
    said = record(tmp_path, "--", "curl", "-sS", "-o", "/dev/null", "--proxytunnel",
                  "http://plain.test:8080/page")
    assert ("wiretape: the client sent plain HTTP inside its tunnel to plain.test (a CONNECT "
            "tunnel for an http:// URL, as curl --proxytunnel does)") in said, said
    assert "rejected the certificate" not in said, said
    assert ("NO EXCHANGE WAS RECORDED: no request came through the agent's tunnel to "
            "plain.test") in said, said


def test_an_untrusted_tool_host_and_its_errors_are_its_own(
        tmp_path: Path, upstream_ca: tuple[RunCA, Path]) -> None:
    ca, _ = upstream_ca
    with PageServer(ca.server_context("docs.test")) as docs, PageServer() as plain:
        said = record(tmp_path, "--resolve", f"docs.test=127.0.0.1:{docs.port}",
                      "--resolve", f"plain.test=127.0.0.1:{plain.port}", "--", "sh", "-c",
                      "curl -sS -o /dev/null https://docs.test/guide.txt; "
                      "curl -sS -o /dev/null http://plain.test:8080/nothing-here")
    with open_run(tmp_path / "run.wtape") as rf:
        endings = [(e.origin, e.ending.value) for e in rf.exchanges()]
    assert endings == [("tool:https://docs.test", "origin_unreachable"),
                       ("tool:http://plain.test:8080", "complete")]
    assert ("wiretape: answered by wiretape, not the tool's host (the origin never answered): "
            "1 x 502 origin unreachable") in said, said
    assert ("wiretape: an origin's certificate did not verify: if a private CA signs it (a "
            "test server's), give that CA's PEM file with --upstream-ca FILE") in said, said
    assert "wiretape: the tools' hosts answered with errors: 1 x 404" in said, said
    assert "the provider" not in said, said
