"""shardcron.client: the Python SDK of shardcron.

``Client`` (blocking) and ``AsyncClient`` (asyncio) speak to any api node; they take and
return the domain dataclasses re-exported here and raise the ``ShardcronError`` family.
The wire mapping lives in ``shardcron.client.codec``, the CLI in ``shardcron.client.cli``.
The clients are imported on first use, so importing ``shardcron.client.types`` (as the
server roles do) does not load gRPC through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardcron.client import errors, types
from shardcron.client.errors import *  # noqa: F403
from shardcron.client.types import *  # noqa: F403

if TYPE_CHECKING:
    from shardcron.client.sdk import AsyncClient, Client


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "Client"):
        from shardcron.client import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AsyncClient", "Client"]
__all__ += errors.__all__
__all__ += types.__all__
