"""TLS for every gRPC connection of shardcron, written once: files in, credentials out.

Three sides use it: clients (SDK, CLI), workers, and nodes (their listener and their
own calls to other nodes).

- ``ClientTls`` is what a connecting side is given: ``ca`` (the CA that signed the
  servers' certificates; without it the system's roots), and ``cert``/``key`` (its
  own certificate, for servers that require one: mTLS). ``from_env`` fills what was
  not given from ``SHARDCRON_TLS_CA``, ``SHARDCRON_TLS_CERT``, ``SHARDCRON_TLS_KEY``.
- ``ServerTls`` is what a node is given: its ``cert``/``key``, ``client_ca`` to
  require client certificates signed by it, and ``ca`` to verify the other nodes it
  calls; it presents its own certificate to them (``peer_tls``).
- ``check_listen`` is the rule that keeps a node off the network in plaintext: a
  listen address that is not loopback needs TLS or an explicit ``insecure``.

Server names: a client checks the server's certificate against the host it dials
(for several comma-separated targets, the first one), so certificates name every
host and IP address clients use. Files are read when credentials are built; a file
that cannot be read or a half-given pair raises ``InvalidArgument`` naming the option.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import grpc

from shardcron.client.errors import InvalidArgument

TLS_CA_ENV = "SHARDCRON_TLS_CA"
TLS_CERT_ENV = "SHARDCRON_TLS_CERT"
TLS_KEY_ENV = "SHARDCRON_TLS_KEY"


def read_pem(path: str | Path, option: str) -> bytes:
    """The bytes of the PEM file at ``path``; InvalidArgument naming ``option`` if it
    cannot be read or holds no PEM block."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgument(option, f"cannot read {str(path)!r}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise InvalidArgument(option, f"{str(path)!r} is not a PEM file")
    return data


def _pair(cert: str | Path | None, key: str | Path | None, prefix: str) -> None:
    if (cert is None) != (key is None):
        given, missing = ("cert", "key") if cert is not None else ("key", "cert")
        raise InvalidArgument(f"{prefix}{missing}", f"{prefix}{given} needs {prefix}{missing}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTls:
    """How a client or worker connects: TLS when any file is given, plaintext otherwise."""

    ca: str | Path | None = None
    cert: str | Path | None = None
    key: str | Path | None = None

    def __post_init__(self) -> None:
        _pair(self.cert, self.key, "tls_")

    @classmethod
    def from_env(
        cls,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
    ) -> ClientTls:
        """The files given, each one not given read from its ``SHARDCRON_TLS_*`` variable."""
        return cls(
            ca=ca or os.environ.get(TLS_CA_ENV) or None,
            cert=cert or os.environ.get(TLS_CERT_ENV) or None,
            key=key or os.environ.get(TLS_KEY_ENV) or None,
        )

    @property
    def enabled(self) -> bool:
        return self.ca is not None or self.cert is not None

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials for these files, or None (plaintext) when none is given."""
        if not self.enabled:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=read_pem(self.ca, "tls_ca") if self.ca is not None else None,
            private_key=read_pem(self.key, "tls_key") if self.key is not None else None,
            certificate_chain=read_pem(self.cert, "tls_cert") if self.cert is not None else None,
        )


def channel_credentials(
    credentials: grpc.ChannelCredentials | None,
    *,
    ca: str | Path | None = None,
    cert: str | Path | None = None,
    key: str | Path | None = None,
) -> grpc.ChannelCredentials | None:
    """The credentials an SDK client connects with: ``credentials`` when given, else
    those of the TLS files given or named by the environment, else None (plaintext)."""
    if credentials is not None:
        return credentials
    return ClientTls.from_env(ca, cert, key).credentials()


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerTls:
    """A node's TLS: its certificate, the CA its clients must be signed by (mTLS), and
    the CA the other nodes it calls are verified against (system roots if None)."""

    cert: str | Path
    key: str | Path
    client_ca: str | Path | None = None
    ca: str | Path | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for the node's listener; client certificates are required and
        verified when ``client_ca`` is set."""
        pair = (read_pem(self.key, "tls_key"), read_pem(self.cert, "tls_cert"))
        if self.client_ca is None:
            return grpc.ssl_server_credentials([pair])
        return grpc.ssl_server_credentials(
            [pair],
            root_certificates=read_pem(self.client_ca, "tls_client_ca"),
            require_client_auth=True,
        )

    def peer_tls(self) -> ClientTls:
        """How this node calls other nodes: they serve TLS as it does, and may require
        a client certificate, so it presents its own."""
        return ClientTls(ca=self.ca, cert=self.cert, key=self.key)


def server_tls(
    cert: str | Path | None,
    key: str | Path | None,
    client_ca: str | Path | None = None,
    ca: str | Path | None = None,
) -> ServerTls | None:
    """A node's ``ServerTls`` from its options, or None when it serves plaintext;
    InvalidArgument for a half-given pair, or a CA given without a certificate."""
    _pair(cert, key, "tls_")
    if cert is None or key is None:
        for option, value in (("tls_client_ca", client_ca), ("tls_ca", ca)):
            if value is not None:
                raise InvalidArgument(option, "needs tls_cert and tls_key (the node's own)")
        return None
    return ServerTls(cert=cert, key=key, client_ca=client_ca, ca=ca)


def listen_host(listen: str) -> str:
    """The host part of a ``host:port`` listen address ('' when only a port is given)."""
    host, sep, _port = listen.rpartition(":")
    return host.strip("[]") if sep else listen


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` binds loopback addresses only: a loopback IP, or a name that
    resolves to loopback addresses only. '', ``0.0.0.0`` and ``[::]`` bind every
    interface; a name that does not resolve counts as not loopback."""
    host = listen_host(listen)
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_listen(listen: str, *, tls: bool, insecure: bool, field: str = "listen") -> None:
    """InvalidArgument (naming ``field``) unless a node may serve on ``listen``:
    loopback, TLS, or ``insecure`` said so (anyone who reaches a plaintext port can read
    and forge every call)."""
    if tls or insecure or is_loopback(listen):
        return
    raise InvalidArgument(
        field,
        f"{listen!r} is not a loopback address: serve it with TLS (--tls-cert, --tls-key) "
        "or pass --insecure to serve it in plaintext",
    )
