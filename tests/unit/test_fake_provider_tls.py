"""The scripted fake provider over HTTPS: a server-side ``ssl_context`` makes it
speak TLS, and a real OpenAI SDK client that trusts a throwaway CA talks to it.

The CA and the server certificate are made here with ``cryptography``, so this
test depends on nothing but the fake provider itself. The OpenAI SDK accepts an
``http_client`` from either ``httpx`` or ``httpx2`` (its own default since 3.x);
both are tried.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from wiretape.testing import AsyncFakeProvider, FakeProvider, script_from_json

ANSWER = "Hello over TLS."


@dataclass(frozen=True)
class Pki:
    """A throwaway CA and a server certificate it signed, as PEM files."""

    ca_pem: Path
    cert_pem: Path
    key_pem: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_pem, self.key_pem)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_pem))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, and a certificate for 127.0.0.1 and api.openai.com signed by it."""
    directory = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("wiretape test CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("api.openai.com"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("api.openai.com"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    pki = Pki(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    pki.ca_pem.write_bytes(ca_cert.public_bytes(pem))
    pki.cert_pem.write_bytes(cert.public_bytes(pem))
    pki.key_pem.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return pki


@pytest.fixture
def https_provider(pki: Pki) -> Iterator[FakeProvider]:
    script = script_from_json([{"text": ANSWER, "expect": "say hello"}])
    with FakeProvider(script, ssl_context=pki.server_context()) as fp:
        yield fp


def test_plain_provider_url_is_still_http() -> None:
    with FakeProvider([]) as fp:
        assert fp.url == f"http://127.0.0.1:{fp.port}"


HTTP_CLIENTS = pytest.mark.parametrize("http_lib", [httpx, httpx2], ids=["httpx", "httpx2"])


@HTTP_CLIENTS
def test_openai_sdk_gets_a_scripted_chat_completion_over_https(
    pki: Pki, https_provider: FakeProvider, http_lib: Any
) -> None:
    fp = https_provider
    assert fp.url == f"https://127.0.0.1:{fp.port}"
    with http_lib.Client(verify=pki.client_context()) as http_client:
        client = openai.OpenAI(
            base_url=fp.url + "/v1", api_key="sk-test", http_client=http_client, max_retries=0
        )
        completion = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "please say hello"}]
        )
    assert completion.choices[0].message.content == ANSWER
    assert completion.id == "chatcmpl-fake-0001"
    [request] = fp.requests
    assert (request.method, request.target, request.turn) == ("POST", "/v1/chat/completions", 1)
    assert request.header("host") == f"127.0.0.1:{fp.port}"
    assert fp.remaining == 0


@HTTP_CLIENTS
def test_openai_sdk_streams_over_https(pki: Pki, http_lib: Any) -> None:
    script = script_from_json([{"text": ANSWER}])
    with (
        FakeProvider(script, ssl_context=pki.server_context()) as fp,
        http_lib.Client(verify=pki.client_context()) as http_client,
    ):
        client = openai.OpenAI(
            base_url=fp.url + "/v1", api_key="sk-test", http_client=http_client, max_retries=0
        )
        stream = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == ANSWER
    assert len(fp.requests) == 1


def test_a_client_that_does_not_trust_the_ca_is_refused_and_the_server_lives_on(
    pki: Pki, https_provider: FakeProvider
) -> None:
    fp = https_provider
    with (
        httpx.Client() as untrusting,  # the system's roots only
        pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        untrusting.post(fp.url + "/v1/chat/completions", json={})
    assert fp.requests == []
    with httpx.Client(verify=pki.client_context()) as trusting:
        response = trusting.post(
            fp.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "say hello"}]},
        )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == ANSWER


def test_async_provider_serves_https(pki: Pki) -> None:
    async def main() -> str | None:
        script = script_from_json([{"text": ANSWER}])
        async with AsyncFakeProvider(script, ssl_context=pki.server_context()) as fp:
            assert fp.url.startswith("https://127.0.0.1:")
            async with httpx2.AsyncClient(verify=pki.client_context()) as http_client:
                client = openai.AsyncOpenAI(
                    base_url=fp.url + "/v1", api_key="sk-test", http_client=http_client
                )
                completion = await client.chat.completions.create(
                    model="fake-model", messages=[{"role": "user", "content": "hi"}]
                )
        return completion.choices[0].message.content

    assert asyncio.run(main()) == ANSWER
