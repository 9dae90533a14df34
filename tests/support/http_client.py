"""A plain HTTP client for the HTTP/JSON API in tests: urllib, no SDK, as curl would call.

``HttpApi.call`` answers every status (an error is a reply to look at, not an
exception); ``read`` returns the body as it came, for streams read to their end.
"""

from __future__ import annotations

import json
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
    def __init__(self, base_url: str, owner: str | None = None) -> None:
        self.base_url = base_url
        self.owner = owner

    def read(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        sent = dict(headers or {})
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
