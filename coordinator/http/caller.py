"""Who an HTTP request calls as, and the servicer context that carries it.

``resolve_caller`` is the one place an HTTP request's headers become a caller: today
the owner named by ``x-shardcron-owner`` (default ``default``), exactly as over gRPC.
When bearer tokens and roles come, they are resolved here, and every route gets them.
``CallContext`` stands in for gRPC's servicer context, so the servicers of
``coordinator/service.py`` serve HTTP unchanged: it answers ``invocation_metadata``
with what the caller resolved to, and its ``abort`` raises ``CallAborted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import grpc

from shardcron.client.types import DEFAULT_OWNER
from shardcron.coordinator.service import OWNER_KEY
from shardcron.coordinator.validation import validate_owner


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who a request acts for."""

    owner: str


def resolve_caller(headers: Mapping[str, str]) -> Caller:
    """The caller of a request with these headers. Raises ``InvalidArgument`` (field
    ``x-shardcron-owner``) for an owner that is not a valid name."""
    owner = headers.get(OWNER_KEY)
    return Caller(owner=DEFAULT_OWNER if owner is None else validate_owner(owner))


class CallAborted(Exception):
    """A servicer ended the call with a status (``context.abort``)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use, for one HTTP request."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((OWNER_KEY, self.caller.owner),)

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise CallAborted(code, details)
