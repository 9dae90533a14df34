"""Which web sites may call a node over HTTP: the rules that keep other pages out.

A browser sends a page's requests to any address the page names, the node's loopback
port included, with whatever credential the browser holds for it. Three rules keep a
page of another site from using the node, checked before a request's credential:

- **Host.** A request must name, in ``Host``, a host the node serves: ``localhost``,
  an IP address (a page can only be served from an address by whoever serves that
  address), the host of its listen or advertised address, its host name, or one
  given by ``--http-allowed-hosts``. A page of ``evil.example`` whose name was made to
  resolve to the node (DNS rebinding) names ``evil.example`` and is refused, so it
  cannot read the node's answers as if they were its own.
- **Origin.** A request that carries ``Origin`` (browsers send it with every write,
  and with every cross-site read they make) must come from the node's own origin
  (the scheme and host:port it was reached at) or one given by
  ``--http-allowed-origins``; ``Origin: null`` (a sandboxed page, a file) is refused.
- **Content type.** A write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) that sends a
  body, or names a content type, must send ``application/json``: a form or a "simple"
  ``text/plain`` request, which browsers send to other sites without asking first,
  never reaches the API. The one route whose body is bytes, an artifact's upload,
  takes ``application/octet-stream`` alone: not a type a browser sends to another
  site without asking first either.

A refusal is PERMISSION_DENIED (403) naming the header, or INVALID_ARGUMENT with HTTP
415 for the content type; it changes nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from shardcron.client.errors import InvalidArgument, PermissionDenied
from shardcron.client.limits import clip
from shardcron.client.tls import listen_host

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON, OCTETS = "application/json", "application/octet-stream"
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnsupportedMediaType(InvalidArgument):
    """A write whose body is not JSON (answered 415)."""


def _split_host(value: str) -> tuple[str, int | None] | None:
    """The host (lower case, no trailing dot) and port of a ``Host`` header; None if it
    is not one."""
    try:
        url = URL(f"//{value.strip()}")
    except ValueError:
        return None
    if not url.raw_host or url.user is not None or url.raw_path not in ("", "/"):
        return None
    try:
        port = url.explicit_port
    except ValueError:
        return None
    return url.raw_host.lower().rstrip(".").strip("[]"), port


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class SitePolicy:
    """The hosts and origins one HTTP listener serves (see the module docstring)."""

    hosts: frozenset[str]
    origins: frozenset[str]

    @classmethod
    def of(
        cls,
        listen: str,
        *,
        advertise: str = "",
        allowed_hosts: Iterable[str] = (),
        allowed_origins: Iterable[str] = (),
    ) -> SitePolicy:
        hosts = {"localhost", socket.gethostname().lower()}
        for address in (listen, advertise):
            host = listen_host(address).lower() if address else ""
            if host not in _WILDCARDS:
                hosts.add(host)
        hosts.update(h.strip().lower().rstrip(".") for h in allowed_hosts if h.strip())
        origins = {o.strip().rstrip("/").lower() for o in allowed_origins if o.strip()}
        return cls(hosts=frozenset(hosts), origins=frozenset(origins))

    def check(self, request: web.Request, *, octets: bool = False) -> None:
        """Raises ``PermissionDenied`` for a request these rules refuse, and
        ``UnsupportedMediaType`` for a write that is not JSON (with ``octets``, the
        route of a body of bytes: not ``application/octet-stream``)."""
        host_header = request.headers.get("Host", "")
        named = _split_host(host_header)
        if named is None or not (named[0] in self.hosts or _is_ip(named[0])):
            raise PermissionDenied(
                f"Host: {clip(host_header)!r} is not a host this node serves"
                " (--http-allowed-hosts names more)"
            )
        origin = request.headers.get("Origin")
        if origin is not None and not self._origin_allowed(origin, request.scheme, named):
            raise PermissionDenied(
                f"Origin: {clip(origin)!r} may not call this node: only its own pages"
                " (--http-allowed-origins names more)"
            )
        if request.method in WRITE_METHODS:
            _check_type(request, OCTETS if octets else JSON)

    def _origin_allowed(self, origin: str, scheme: str, host: tuple[str, int | None]) -> bool:
        if origin.strip().rstrip("/").lower() in self.origins:
            return True
        try:
            url = URL(origin.strip())
        except ValueError:
            return False
        if url.scheme != scheme or not url.raw_host or url.raw_path not in ("", "/"):
            return False
        default = _DEFAULT_PORTS.get(scheme)
        same_host = url.raw_host.lower().rstrip(".").strip("[]") == host[0]
        return same_host and (url.explicit_port or default) == (host[1] or default)


def _check_type(request: web.Request, wanted: str) -> None:
    has_body = bool(request.content_length) or request.headers.get("Transfer-Encoding")
    if not has_body and "Content-Type" not in request.headers:
        return  # a write with nothing to read (pause, cancel, delete)
    if request.content_type != wanted:
        raise UnsupportedMediaType(
            "content-type", f"must be {wanted}, not {clip(request.content_type)!r}"
        )
