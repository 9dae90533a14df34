"""Where a client connects and as whom: the default target and the owner metadata.

Every call carries the owner in the ``x-shardcron-owner`` metadata; the api node scopes
what the call sees and changes to that owner.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

DEFAULT_TARGET = "127.0.0.1:7400"
TARGET_ENV = "SHARDCRON_TARGET"
OWNER_METADATA_KEY = "x-shardcron-owner"


def resolve_target(target: str | None) -> str:
    """``target``, else ``$SHARDCRON_TARGET``, else ``DEFAULT_TARGET``."""
    return target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def owner_metadata(owner: str) -> tuple[tuple[str, str], ...]:
    """The metadata every call of a client acting as ``owner`` sends."""
    return ((OWNER_METADATA_KEY, owner),)


def open_channel(
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]],
    asyncio: bool = False,
) -> grpc.Channel | grpc.aio.Channel:
    """A TLS channel when ``credentials`` are given, else a plaintext one; ``asyncio``
    picks a ``grpc.aio`` channel, which must be opened inside the loop that uses it."""
    api: Any = grpc.aio if asyncio else grpc
    if credentials is not None:
        return api.secure_channel(target, credentials, options=list(options))
    return api.insecure_channel(target, options=list(options))
