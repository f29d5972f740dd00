"""The run CA: real TLS handshakes on 127.0.0.1 against its leaves, verified with
``VERIFY_X509_STRICT`` (on by default from Python 3.13), and its on-disk footprint."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import os
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from wiretape.intercept.ca import RunCA, pem_of

STRICT = ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN  # Python 3.13's defaults


@pytest.fixture
def ca() -> Iterator[RunCA]:
    with RunCA.create() as run_ca:
        yield run_ca


@pytest.fixture
def bundle(ca: RunCA, tmp_path: Path) -> Path:
    return ca.write_bundle(tmp_path / "bundle.pem")


def strict_client(cafile: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=None if cafile is None else str(cafile))
    context.verify_flags |= STRICT
    return context


@contextmanager
def tls_server(context: ssl.SSLContext) -> Iterator[int]:
    """An asyncio HTTP/1.1 server on 127.0.0.1 answering ``ok`` over TLS; yields its port."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start() -> asyncio.Server:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        port.append(server.sockets[0].getsockname()[1])
        return server

    def run() -> None:
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def handshake(port: int, client: ssl.SSLContext,
              server_hostname: str) -> tuple[x509.Certificate, str | None]:
    """Connect, complete a TLS handshake, and return the peer leaf and ALPN choice."""
    client.set_alpn_protocols(["http/1.1"])
    with (socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
          client.wrap_socket(raw, server_hostname=server_hostname) as tls):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        alpn = tls.selected_alpn_protocol()
        tls.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert tls.recv(4096).endswith(b"\r\n\r\nok")
    return x509.load_der_x509_certificate(der), alpn


def san_of(cert: x509.Certificate) -> list[object]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [*ext.get_values_for_type(x509.DNSName), *ext.get_values_for_type(x509.IPAddress)]


def test_sni_picks_a_leaf_per_host_that_verifies_strictly(ca: RunCA, bundle: Path) -> None:
    seen: list[str] = []
    with tls_server(ca.sni_context(seen.append)) as port:
        openai, alpn = handshake(port, strict_client(bundle), "api.openai.com")
        anthropic, _ = handshake(port, strict_client(bundle), "api.anthropic.com")
        again, _ = handshake(port, strict_client(bundle), "API.OpenAI.com")
    assert seen == ["api.openai.com", "api.anthropic.com", "API.OpenAI.com"]
    assert alpn == "http/1.1"
    assert san_of(openai) == ["api.openai.com"]
    assert san_of(anthropic) == ["api.anthropic.com"]
    assert openai.serial_number != anthropic.serial_number
    assert again == openai  # cached per lower-cased name
    assert openai.issuer == ca.certificate.subject


def test_leaf_and_ca_extensions(ca: RunCA) -> None:
    with tls_server(ca.sni_context()) as port:
        leaf, _ = handshake(port, _trusting(ca), "api.openai.com")
    exts = leaf.extensions
    assert exts.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = exts.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    assert list(exts.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = exts.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    # Seven days and an hour, less however much later than the CA's the leaf was made.
    assert dt.timedelta(days=7, minutes=59) < lifetime <= dt.timedelta(days=7, hours=1)
    assert lifetime < dt.timedelta(days=398)
    assert leaf.not_valid_after_utc <= ca.certificate.not_valid_after_utc

    ca_exts = ca.certificate.extensions
    constraints = ca_exts.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    ca_usage = ca_exts.get_extension_for_class(x509.KeyUsage)
    assert ca_usage.critical
    assert (ca_usage.value.key_cert_sign, ca_usage.value.crl_sign,
            ca_usage.value.digital_signature) == (True, True, True)
    assert ca.certificate.serial_number.bit_length() > 64


def _trusting(ca: RunCA) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.verify_flags |= STRICT
    return context


def test_default_roots_reject_the_leaf(ca: RunCA) -> None:
    with (tls_server(ca.sni_context()) as port,
          pytest.raises(ssl.SSLCertVerificationError) as info):
        handshake(port, strict_client(None), "api.openai.com")
    assert info.value.verify_code == 19  # X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
    assert "self-signed certificate in certificate chain" in info.value.verify_message


def test_ip_address_gets_an_ip_san_and_verifies(ca: RunCA, bundle: Path) -> None:
    seen: list[str] = []
    with tls_server(ca.sni_context(seen.append, default_hostname="127.0.0.1")) as port:
        leaf, _ = handshake(port, strict_client(bundle), "127.0.0.1")
        response = httpx.get(f"https://127.0.0.1:{port}/", verify=strict_client(bundle))
    assert seen == []  # clients send no SNI for an address (RFC 6066 §3)
    assert san_of(leaf) == [ipaddress.IPv4Address("127.0.0.1")]
    assert (response.status_code, response.text) == (200, "ok")
    with tls_server(ca.sni_context(seen.append, default_hostname="[::1]")) as port:
        v6_leaf, _ = handshake(port, strict_client(bundle), "::1")
    assert san_of(v6_leaf) == [ipaddress.IPv6Address("::1")]
    assert seen == []


def test_a_name_too_long_for_a_common_name_still_verifies(ca: RunCA, bundle: Path) -> None:
    long_name = "a" * 40 + "." + "b" * 40 + ".example"  # RFC 5280 ub-common-name is 64
    with tls_server(ca.sni_context()) as port:
        leaf, _ = handshake(port, strict_client(bundle), long_name)
    assert san_of(leaf) == [long_name]
    assert leaf.subject.rfc4514_string() == "O=wiretape"


def test_key_files_are_private_and_never_hold_the_ca_key(
        ca: RunCA, monkeypatch: pytest.MonkeyPatch) -> None:
    ca_public = ca.certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    observed: list[tuple[str, int, int]] = []
    original = ssl.SSLContext.load_cert_chain

    def watch(self: ssl.SSLContext, certfile: Any, *args: Any, **kwargs: Any) -> None:
        # The only moment leaf files exist: look at every file in the directory.
        assert stat.S_IMODE(os.stat(ca.directory).st_mode) == 0o700
        for path in ca.directory.iterdir():
            data = path.read_bytes()
            key = serialization.load_pem_private_key(data, password=None)
            leaf = x509.load_pem_x509_certificates(data)[0]
            public = key.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            assert public != ca_public
            assert public == leaf.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
            assert data.count(b"-----BEGIN PRIVATE KEY-----") == 1
            observed.append((path.name, stat.S_IMODE(path.stat().st_mode), len(data)))
        original(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", watch)
    ca.server_context("api.openai.com")
    ca.server_context("api.anthropic.com")
    ca.sni_context()
    assert [(name, mode) for name, mode, _ in observed] == [
        ("leaf-0.pem", 0o600), ("leaf-1.pem", 0o600), ("leaf-2.pem", 0o600)]
    assert list(ca.directory.iterdir()) == []  # deleted right after loading
    directory = ca.directory
    ca.close()
    assert not directory.exists()
    ca.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        ca.server_context("api.mistral.ai")


def test_bundle_is_the_usual_roots_then_the_ca(ca: RunCA, tmp_path: Path) -> None:
    default = ca.write_bundle(tmp_path / "default.pem")
    system = ssl.get_default_verify_paths().cafile or certifi.where()
    explicit = ca.write_bundle(tmp_path / "certifi.pem", roots=Path(certifi.where()))
    for path, roots in ((default, Path(system)), (explicit, Path(certifi.where()))):
        data, usual = path.read_bytes(), roots.read_bytes()
        assert data.count(b"-----BEGIN CERTIFICATE-----") == usual.count(
            b"-----BEGIN CERTIFICATE-----") + 1 > 2
        assert data.startswith(usual) and data.endswith(ca.cert_pem)
        last = data[data.rindex(b"-----BEGIN CERTIFICATE-----"):]
        assert pem_of(x509.load_pem_x509_certificate(last)) == ca.cert_pem
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    unterminated = tmp_path / "one-root.pem"
    unterminated.write_bytes(ca.cert_pem.rstrip(b"\n"))
    joined = ca.write_bundle(tmp_path / "joined.pem", roots=unterminated).read_bytes()
    assert joined == ca.cert_pem + ca.cert_pem


def test_httpx_verifies_through_the_bundle(ca: RunCA, bundle: Path) -> None:
    seen: list[str] = []
    sni = {"sni_hostname": "api.openai.com"}
    with tls_server(ca.sni_context(seen.append)) as port:
        with httpx.Client(verify=strict_client(bundle)) as client:
            response = client.get(f"https://127.0.0.1:{port}/v1/models",
                                  headers={"Host": "api.openai.com"}, extensions=sni)
        with (httpx.Client(verify=strict_client(None)) as client,
              pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED")):
            client.get(f"https://127.0.0.1:{port}/", extensions=sni)
    assert (response.status_code, response.text) == (200, "ok")
    assert response.http_version == "HTTP/1.1"
    assert seen == ["api.openai.com", "api.openai.com"]


@pytest.mark.parametrize("bad", ["", "a..b", "-x.com", "bücher.example", "a/b", "x" * 64 + ".com"])
def test_invalid_hostnames_raise_value_error(ca: RunCA, bad: str) -> None:
    with pytest.raises(ValueError, match="not a DNS name or IP address"):
        ca.server_context(bad)


def test_invalid_sni_name_is_refused_with_an_alert(ca: RunCA, bundle: Path) -> None:
    # A blocking server: asyncio closes the transport before flushing the alert.
    context = ca.sni_context()
    server_errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                try:
                    context.wrap_socket(conn, server_side=True)
                except ssl.SSLError as exc:
                    server_errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with pytest.raises(ssl.SSLError, match="TLSV1_UNRECOGNIZED_NAME"):
            handshake(listener.getsockname()[1], strict_client(bundle), "bad_-.example")
        thread.join(10)
    assert [type(e) for e in server_errors] == [ssl.SSLError]
    assert "CALLBACK_FAILED" in str(server_errors[0])
