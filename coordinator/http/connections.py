"""The HTTP listener's connections: how many, for how long, and over TLS.

Every connection holds a file descriptor of the whole node, so none is held for free:

- **Caps.** At most ``ConnectionLimits.total`` connections at once, and at most
  ``per_host`` from one peer address; one past either is closed at once (RST), before
  a byte of it is read, and counted (``shardcron_http_connections_refused_total``).
  The listen backlog is the total cap too: with aiohttp's 128, a burst of connects
  while the loop was busy overflowed the kernel's queue, whose dropped SYNs the
  clients only sent again a second later.
- **Time.** A connection has ``head_timeout`` seconds from its accept, and from the end
  of each answer, to send a complete request head, or it is closed: a client that
  trickles a head byte by byte, or keeps an idle connection, holds it no longer than
  that. A TLS handshake has ``handshake_timeout``; a request body ``body_timeout``
  (``bodies``).
- **TLS.** ``tls_context`` makes the server side of a node's ``ServerTls``: the node's
  certificate, and with its client CA a required client certificate, as the gRPC port.

``GatedSite`` is aiohttp's TCP site with the caps in front of aiohttp's own protocol:
each connection's protocol is the server's, wrapped by ``_Gated``, which refuses a
connection over the caps and counts the ones it lets in.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from shardcron.client.tls import ServerTls, read_pem


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionLimits:
    """See the module docstring; seconds for the timeouts."""

    total: int = 1024
    per_host: int = 128
    head_timeout: float = 10.0
    handshake_timeout: float = 10.0
    body_timeout: float = 30.0


class ConnectionGate:
    """The connections open now, in all and per peer host (one event loop)."""

    def __init__(self, limits: ConnectionLimits, on_refused: Callable[[], None]) -> None:
        self.limits = limits
        self._on_refused = on_refused
        self.open = 0
        self._by_host: Counter[str] = Counter()

    def admit(self, host: str) -> bool:
        if self.open >= self.limits.total or self._by_host[host] >= self.limits.per_host:
            self._on_refused()
            return False
        self.open += 1
        self._by_host[host] += 1
        return True

    def leave(self, host: str) -> None:
        self.open -= 1
        self._by_host[host] -= 1
        if self._by_host[host] <= 0:
            del self._by_host[host]

    def from_host(self, host: str) -> int:
        return self._by_host[host]


class _Gated(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the gate: a connection over the
    caps is aborted in ``connection_made`` and aiohttp never sees it."""

    def __init__(self, inner: asyncio.Protocol, gate: ConnectionGate) -> None:
        self._inner = inner
        self._gate = gate
        self._host: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._gate.admit(host):
            transport.abort()  # type: ignore[attr-defined]
            return
        self._host = host
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._host is None:
            return
        self._gate.leave(self._host)
        self._host = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._host is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._host is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class GatedSite(web.TCPSite):
    """``web.TCPSite`` whose connections pass ``gate`` first; TLS handshakes are held
    to the gate's ``handshake_timeout``."""

    __slots__ = ("_gate",)

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, *, gate: ConnectionGate, **kw: Any
    ) -> None:
        super().__init__(runner, host, port, reuse_port=False, **kw)
        self._gate = gate

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        gate = self._gate
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Gated(server(), gate),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=gate.limits.handshake_timeout if self._ssl_context else None,
            backlog=max(self._backlog, gate.limits.total),
            reuse_port=False,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def tls_context(tls: ServerTls) -> ssl.SSLContext:
    """The server side of ``tls`` for the HTTP listener: its certificate, TLS 1.2 at
    least, and with ``client_ca`` a client certificate required and verified against
    it. Raises ``InvalidArgument`` naming the option of a file that cannot be read,
    ``ssl.SSLError`` for one that is not a certificate or key."""
    read_pem(tls.cert, "tls_cert")  # a clear error for a missing or non-PEM file
    read_pem(tls.key, "tls_key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert), str(tls.key))
    if tls.client_ca is not None:
        context.load_verify_locations(cadata=read_pem(tls.client_ca, "tls_client_ca").decode())
        context.verify_mode = ssl.CERT_REQUIRED
    return context


# The short names of a certificate subject's attributes, as OpenSSL writes them (and
# so as gRPC reports a verified subject: ``auth.interceptor.cert_subjects``).
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "emailAddress": "emailAddress",
}


def peer_subjects(transport: asyncio.BaseTransport | None) -> list[str]:
    """The subjects of the client certificate the TLS handshake verified, in the forms
    ``authorize`` matches (the whole subject, and ``CN=<common name>``); none on a
    plaintext connection or one without a certificate."""
    if transport is None:
        return []
    cert = transport.get_extra_info("peercert")
    if not cert:
        return []
    parts: list[str] = []
    common: list[str] = []
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            parts.append(f"{_SHORT_NAMES.get(name, name)}={value}")
            if name == "commonName":
                common.append(f"CN={value}")
    return ([",".join(parts)] if parts else []) + common
