"""The forward proxy's small parsers and the child's proxy environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiretape.errors import UsageError
from wiretape.launch.intercept import intercept_hosts, proxy_environment
from wiretape.origins import parse_resolve
from wiretape.proxy.connect import split_authority


@pytest.mark.parametrize(("target", "expected"), [
    (b"api.openai.com:443", ("api.openai.com", 443)),
    (b"API.Anthropic.com:8443", ("api.anthropic.com", 8443)),
    (b"[::1]:443", ("::1", 443)),
    (b"127.0.0.1:1", ("127.0.0.1", 1)),
    (b"api.openai.com", None),
    (b"api.openai.com:", None),
    (b":443", None),
    (b"host:70000", None),
    (b"::1:443", None),
])
def test_connect_targets(target: bytes, expected: tuple[str, int] | None) -> None:
    assert split_authority(target) == expected


def test_resolve_pairs() -> None:
    assert parse_resolve(["API.openai.com=127.0.0.1:8443", "h=[::1]:9"]) == {
        "api.openai.com": ("127.0.0.1", 8443), "h": ("::1", 9)}
    for bad in ("api.openai.com", "h=127.0.0.1", "h=127.0.0.1:x", "=1.2.3.4:5"):
        with pytest.raises(UsageError, match="HOST=IP:PORT"):
            parse_resolve([bad])


def test_known_hosts_and_extra_ones_are_intercepted() -> None:
    hosts = intercept_hosts(["Gateway.Example.com"])
    assert hosts["api.openai.com"] == "openai"
    assert hosts["api.anthropic.com"] == "anthropic"
    assert hosts["generativelanguage.googleapis.com"] == "gemini"
    assert hosts["gateway.example.com"] == "gateway.example.com"


def test_the_child_environment_names_the_proxy_and_the_bundle() -> None:
    env, names = proxy_environment({"PATH": "/bin", "no_proxy": "*", "https_proxy": "http://x:1"},
                                   8089, Path("/tmp/b.pem"))
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        assert env[var] == "http://127.0.0.1:8089"
    # An inherited NO_PROXY of "*" would send provider traffic around wiretape.
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"):
        assert env[var] == "/tmp/b.pem" and var in names
    assert env["PATH"] == "/bin" and "PATH" not in names
