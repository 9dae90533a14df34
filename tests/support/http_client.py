"""A plain HTTP client for the HTTP/JSON API in tests: urllib, no SDK, as curl would call.

``HttpApi.call`` answers every status (an error is a reply to look at, not an
exception); ``read`` returns the body as it came, for streams read to their end.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class HttpApi:
    def __init__(
        self, base_url: str, owner: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.base_url = base_url
        self.owner = owner
        self.headers = headers or {}  # sent with every call (a credential)

    def read(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = {**self.headers, **(headers or {})}
        if self.owner is not None:
            sent.setdefault("x-shardcron-owner", self.owner)
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            sent.setdefault("content-type", "application/json")
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers=sent
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
                return Reply(status=resp.status, headers=dict(resp.headers), raw=resp.read())
        except urllib.error.HTTPError as e:
            return Reply(status=e.code, headers=dict(e.headers), raw=e.read())

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        """The status and the JSON body of a call."""
        reply = self.read(method, path, body, **kw)
        return reply.status, reply.json


class RawHttp:
    """One plain TCP connection to an HTTP listener, written and read as bytes: for the
    requests no well-behaved client sends (a head trickled byte by byte, a body
    announced and never sent, a follow abandoned mid-stream)."""

    def __init__(self, port: int, *, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def head(self) -> tuple[int, dict[str, str]]:
        """The status and headers of the answer (lower-case names), read up to the
        blank line."""
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            piece = self.sock.recv(4096)
            if not piece:
                raise ConnectionError(f"closed before a full answer head: {buffer!r}")
            buffer += piece
        head, _, self.rest = buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    def closed_by_peer(self) -> bool:
        """Whether the server has closed this connection (reads its end, or a reset)."""
        try:
            while True:
                piece = self.sock.recv(65536)
                if not piece:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def request_head(
    method: str, path: str, headers: dict[str, str] | None = None, *, host: str = "127.0.0.1"
) -> bytes:
    """A request line and headers, ending with the blank line."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
