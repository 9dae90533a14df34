"""Certificates made at test time: a CA, and certificates it signs, as PEM files.

``make_pki(directory)`` writes a CA (``CN=shardcron test CA``), a node certificate
(``CN=node``; serves and calls other nodes, so both server and client use) naming
``localhost``, ``127.0.0.1``, ``::1`` and the loopback addresses a test cluster uses,
and client certificates on demand (``pki.client("alice")`` -> ``CN=alice``: the subject
a principal's ``cert_subject`` names). ``other_ca`` is a second, unrelated CA, for the
certificates nobody should trust.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shardcron.client.tls import ClientTls

# what clients of a test node or cluster dial: names and loopback addresses
NODE_DNS_NAMES = ("localhost",)
NODE_IPS = ("127.0.0.1", "::1", *(f"127.0.0.{i}" for i in range(2, 41)))
VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True, slots=True, kw_only=True)
class CertFiles:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class Issuer:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    path: Path  # the CA certificate's PEM file


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> CertFiles:
    files = CertFiles(cert=directory / f"{stem}.crt", key=directory / f"{stem}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.key.chmod(0o600)
    return files


def make_ca(directory: Path, common_name: str, stem: str = "ca") -> Issuer:
    """A self-signed CA, written to ``directory/<stem>.crt`` (and ``.key``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issuer(cert=cert, key=key, path=_write(directory, stem, cert, key).cert)


def issue(
    issuer: Issuer,
    directory: Path,
    stem: str,
    common_name: str,
    *,
    server: bool,
    dns_names: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> CertFiles:
    """A certificate for ``CN=<common_name>`` signed by ``issuer``: client use always,
    server use too with ``server`` (then naming ``dns_names`` and ``ips``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
    )
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False).sign(
        issuer.key, hashes.SHA256()
    )
    return _write(directory, stem, cert, key)


class Pki:
    """A test CA in ``directory``, its node certificate, and client certificates."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._ca = make_ca(directory, "shardcron test CA")
        self.ca = self._ca.path
        self.node = issue(
            self._ca,
            directory,
            "node",
            "node",
            server=True,
            dns_names=NODE_DNS_NAMES,
            ips=NODE_IPS,
        )
        self._other = make_ca(directory, "untrusted test CA", stem="other-ca")
        self.other_ca = self._other.path

    def client(self, common_name: str) -> CertFiles:
        """A client certificate ``CN=<common_name>`` signed by the CA (made once per name)."""
        stem = f"client-{common_name}"
        existing = CertFiles(
            cert=self.directory / f"{stem}.crt", key=self.directory / f"{stem}.key"
        )
        if existing.cert.exists():
            return existing
        return issue(self._ca, self.directory, stem, common_name, server=False)

    def untrusted_client(self, common_name: str) -> CertFiles:
        """A client certificate ``CN=<common_name>`` signed by the other CA."""
        return issue(
            self._other, self.directory, f"untrusted-{common_name}", common_name, server=False
        )

    def client_tls(self, common_name: str) -> ClientTls:
        """What a client trusting the CA and presenting ``CN=<common_name>`` connects with."""
        files = self.client(common_name)
        return ClientTls(ca=self.ca, cert=files.cert, key=files.key)

    def node_args(self, *, mtls: bool = True) -> list[str]:
        """The ``dev``/``node`` flags that serve with this node certificate (and require
        client certificates of this CA with ``mtls``)."""
        args = ["--tls-cert", str(self.node.cert), "--tls-key", str(self.node.key)]
        args += ["--tls-ca", str(self.ca)]
        if mtls:
            args += ["--tls-client-ca", str(self.ca)]
        return args

    def client_args(self, common_name: str | None = None) -> list[str]:
        """The client's flags (``shardcron --tls-ca ... job list``, ``shardcron worker
        --tls-ca ...``): trust the CA, and present ``CN=<common_name>`` when given."""
        args = ["--tls-ca", str(self.ca)]
        if common_name is not None:
            files = self.client(common_name)
            args += ["--tls-cert", str(files.cert), "--tls-key", str(files.key)]
        return args


def make_pki(directory: Path) -> Pki:
    return Pki(directory)
