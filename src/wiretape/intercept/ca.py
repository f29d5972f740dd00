"""A certificate authority made for one run alone, and the leaves it signs.

The CA key is an EC P-256 key held in memory only; it is never serialized.
Leaf certificates follow RFC 5280 §4.2.1 (SAN §4.2.1.6, key usage §4.2.1.3,
extended key usage §4.2.1.12, basic constraints §4.2.1.9, key identifiers
§4.2.1.1-2) so that they verify under OpenSSL's ``VERIFY_X509_STRICT``, which
Python 3.13 sets in its default client context. Both CA and leaves are valid
from one hour ago to seven days ahead, far below the CA/Browser Forum's
398-day limit on server certificates.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import os
import re
import shutil
import ssl
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_BACKDATE = dt.timedelta(hours=1)
_LIFETIME = dt.timedelta(days=7)
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def pem_of(cert: x509.Certificate) -> bytes:
    """Return ``cert`` PEM-encoded (RFC 7468 §5), ending with a newline."""
    return cert.public_bytes(serialization.Encoding.PEM)


def _normalize(hostname: str) -> tuple[str, x509.GeneralName]:
    """Return the cache key and SAN entry for ``hostname``; ValueError if it is neither
    an IP address nor an ASCII DNS name (A-labels, RFC 5890 §2.3.2.1)."""
    name = hostname.strip().lower().removesuffix(".")
    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        pass
    else:
        return str(address), x509.IPAddress(address)
    if (not name.isascii() or len(name) > 253
            or not all(_LABEL.fullmatch(label) for label in name.split("."))):
        raise ValueError(f"not a DNS name or IP address: {hostname!r} "
                         "(internationalized names must be given as A-labels)")
    return name, x509.DNSName(name)


class RunCA:
    """A certificate authority made for one run (or one replay) alone.

    ``cert_pem`` is the CA certificate (PEM bytes); ``directory`` is a private
    (mode 0700) directory where leaf key files live for the instant
    ``ssl.SSLContext.load_cert_chain`` reads them. Use :meth:`create`, then
    :meth:`close` (or a ``with`` block) to remove the directory. Thread-safe.
    """

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate,
                 directory: Path) -> None:
        self._key = key
        self._cert = cert
        self.cert_pem: bytes = pem_of(cert)
        self.directory: Path = directory
        self._ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        self._leaves: dict[str, bytes] = {}
        self._contexts: dict[tuple[str, tuple[str, ...]], ssl.SSLContext] = {}
        self._serial = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(directory), True)

    @classmethod
    def create(cls, *, common_name: str = "wiretape run CA") -> RunCA:
        """Make a fresh CA: new P-256 key, self-signed certificate with a random
        159-bit serial (RFC 5280 §4.1.2.2), BasicConstraints(ca, pathLen 0) and
        KeyUsage(keyCertSign, cRLSign, digitalSignature), both critical, plus
        subject and authority key identifiers. ValueError if ``common_name`` is
        empty or longer than 64 characters (RFC 5280 ub-common-name)."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "wiretape"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.UTC)
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE).not_valid_after(now + _LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public),
                           critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert, Path(tempfile.mkdtemp(prefix="wiretape-ca-")))

    @property
    def certificate(self) -> x509.Certificate:
        """The CA certificate."""
        return self._cert

    def _mint(self, name: str, san: x509.GeneralName) -> bytes:
        """Return PEM of a new leaf key, its certificate and the CA certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "wiretape")]
        if len(name) <= 64:
            subject.append(x509.NameAttribute(NameOID.COMMON_NAME, name))
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject)).issuer_name(self._cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(min(now + _LIFETIME, self._cert.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                self._ski), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return pem_of(cert) + self.cert_pem + key_pem

    def _load(self, name: str, san: x509.GeneralName,
              alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLContext:
        """Build a server context for ``name``; the caller holds the lock."""
        if self._closed:
            raise RuntimeError(f"RunCA {self.directory} is closed")
        chain = self._leaves.get(name)
        if chain is None:
            chain = self._leaves[name] = self._mint(name, san)
        path = self.directory / f"leaf-{next(self._serial)}.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(chain)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(list(alpn))
            context.load_cert_chain(path)
        finally:
            path.unlink(missing_ok=True)
        return context

    def server_context(self, hostname: str, *,
                       alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLContext:
        """Return a server-side context (TLS 1.2 or newer, offering the ALPN
        protocols ``alpn`` in order of preference, RFC 7301) that
        presents a leaf for ``hostname`` signed by this CA, with the leaf and CA
        certificates as its chain. ``hostname`` is a DNS name (case-insensitive, a
        trailing dot ignored) or an IP address, which gets an iPAddress SAN (RFC 5280
        §4.2.1.6). One context per name and ``alpn``, cached. ValueError for any other string;
        RuntimeError after :meth:`close`."""
        name, san = _normalize(hostname)
        with self._lock:
            context = self._contexts.get((name, alpn))
            if context is None:
                context = self._contexts[name, alpn] = self._load(name, san, alpn)
            return context

    def sni_context(self, on_hostname: Callable[[str], None] | None = None, *,
                    default_hostname: str = "localhost") -> ssl.SSLContext:
        """Return one server context for ``asyncio`` (``ssl=`` or ``start_tls``) that
        switches each connection to :meth:`server_context` of the name the client
        sent in its server_name extension (RFC 6066 §3), calling ``on_hostname``
        with that name first. A client that sends no name (one connecting to an IP
        address, which RFC 6066 §3 forbids naming) gets a leaf for
        ``default_hostname``. A name that is not a valid host name fails the handshake
        with an ``unrecognized_name`` alert (asyncio closes the connection before
        sending it, so there the client sees EOF). ValueError if ``default_hostname``
        is invalid; RuntimeError after :meth:`close`."""
        name, san = _normalize(default_hostname)
        with self._lock:
            context = self._load(name, san)

        def switch(sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                   _: ssl.SSLContext) -> int | None:
            if server_name is None:
                return None
            if on_hostname is not None:
                on_hostname(server_name)
            try:
                sock.context = self.server_context(server_name)
            except (ValueError, RuntimeError):
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            return None

        context.sni_callback = switch
        return context

    def write_bundle(self, path: Path, *, roots: Path | None = None) -> Path:
        """Write to ``path`` (mode 0644) a PEM bundle: the usual roots, then this CA's
        certificate, and return ``path``. The usual roots are ``roots`` if given,
        else the system bundle named by ``ssl.get_default_verify_paths().cafile``
        when that file exists, else certifi's. OSError if a file cannot be read or
        written."""
        if roots is None:
            cafile = ssl.get_default_verify_paths().cafile
            if cafile is not None and os.path.isfile(cafile):
                roots = Path(cafile)
            else:
                import certifi
                roots = Path(certifi.where())
        usual = roots.read_bytes()
        if usual and not usual.endswith(b"\n"):
            usual += b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o644)
            file.write(usual + self.cert_pem)
        return path

    def close(self) -> None:
        """Remove ``directory`` and everything in it; later calls do nothing.
        Contexts already made keep working; new ones raise RuntimeError."""
        with self._lock:
            self._closed = True
            self._leaves.clear()
            self._contexts.clear()
        self._cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
