"""Which webhook URLs a node calls: never one that points into its own network unless
it allows it (``--notify-allow-private``), so a job's notifications cannot be turned
against the node's loopback, link-local (cloud metadata), private or other non-public
addresses.

Checked twice: when a job is created or updated (``check_webhook``: the URL's form, and
its host resolved, so a user hears at once), and when each delivery is sent, against
the very addresses the connection is made to (``GuardedResolver``: the sender's aiohttp
connector connects only to what it returns), so a name that resolves elsewhere by then
(DNS rebinding) cannot pass. A host written as an address is checked as it is
(``literal_refusal``): aiohttp does not resolve it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from shardcron.client.errors import InvalidArgument

MAX_URL = 2048


class RefusedAddress(Exception):
    """The webhook's host is, or resolves to, an address the node will not call."""


# IPv6 prefixes whose last 32 bits are an IPv4 address the packets may be taken to:
# IPv4-compatible (deprecated), IPv4-translated (SIIT), NAT64's well-known prefix
_CARRY_IPV4 = tuple(ipaddress.ip_network(n) for n in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96"))
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # a network's own translators


def public(address: str) -> bool:
    """A global unicast address (not loopback, link-local, private, reserved, multicast),
    and, for an IPv6 address that carries an IPv4 one (mapped, compatible, translated,
    NAT64, 6to4), one whose IPv4 address is global too: a translator or relay on the
    node's network would take it there."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return False
        carried = ip.ipv4_mapped or ip.sixtofour
        if carried is None and any(ip in n for n in _CARRY_IPV4):
            carried = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if carried is not None:
            return public(str(carried)) and not (ip.is_multicast or ip.is_loopback)
    return ip.is_global and not ip.is_multicast


def literal_refusal(host: str, *, allow_private: bool) -> str | None:
    """Why a host written as an IP address is refused; None if allowed or not an address."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if allow_private or public(host.strip("[]")):
        return None
    return f"{host} is not a public address"


def url_parts(url: str, field: str) -> tuple[str, int]:
    """(host, port) of a webhook URL; InvalidArgument naming ``field`` if it is not one."""
    if len(url) > MAX_URL:
        raise InvalidArgument(field, f"at most {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        # urlsplit drops tabs and newlines before it reads a URL: refused, not dropped,
        # so the URL checked is the one that is called
        raise InvalidArgument(field, "must not hold a control character or space")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise InvalidArgument(field, f"not a URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidArgument(field, "must be an http:// or https:// URL")
    if not parts.hostname:
        raise InvalidArgument(field, "has no host")
    if parts.username or parts.password:
        raise InvalidArgument(field, "must not carry credentials")
    try:  # the host as the sender's aiohttp reads it ('１２７.０.０.１' is 127.0.0.1)
        host = URL(url).host
    except ValueError as e:
        raise InvalidArgument(field, f"not a URL: {e}") from None
    if not host:
        raise InvalidArgument(field, "has no host")
    return host, port or (443 if parts.scheme == "https" else 80)


async def check_webhook(url: str, field: str, *, allow_private: bool) -> None:
    """The create-time check: the URL's form, and every address its host resolves to
    (one that does not resolve is refused too)."""
    host, port = url_parts(url, field)
    if allow_private:
        return
    why = literal_refusal(host, allow_private=False)
    if why is not None:
        raise InvalidArgument(field, f"refused: {why} (the node allows no private webhook)")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise InvalidArgument(field, f"host {host} does not resolve: {e.strerror or e}") from None
    private = sorted({info[4][0] for info in infos if not public(info[4][0])})
    if private:
        raise InvalidArgument(
            field,
            f"refused: {host} resolves to {', '.join(private)}, not a public address"
            " (the node allows no private webhook)",
        )


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, returning only the addresses the node may call: a host
    with none left raises ``RefusedAddress``, so no connection is made."""

    def __init__(self, *, allow_private: bool, inner: AbstractResolver | None = None) -> None:
        self._allow_private = allow_private
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        if self._allow_private:
            return found
        allowed = [r for r in found if public(r["host"])]
        if not allowed:
            seen = ", ".join(sorted({r["host"] for r in found}))
            raise RefusedAddress(f"{host} resolves to {seen}, not a public address")
        return allowed

    async def close(self) -> None:
        await self._inner.close()
