"""The typed Python SDK: ``Client`` (blocking) and ``AsyncClient`` (asyncio) for JobService
and ClusterService.

Both classes take and return the domain types of ``shardcron.client.types``; protobuf
stays inside this package and ``codec``. Every failed call raises a
``shardcron.client.errors.ShardcronError`` (``.code`` is the gRPC status name) made by
``codec.error_from_rpc``.

The parts: ``sync_client`` (``Client``) and ``async_client`` (``AsyncClient``) choose
how to call; ``messages`` builds every request and reads every reply for both;
``connection`` says where to connect and as which owner; ``waiting`` paces the
``wait_*`` polls.
"""

from shardcron.client.sdk.async_client import AsyncClient
from shardcron.client.sdk.connection import DEFAULT_TARGET, OWNER_METADATA_KEY, TARGET_ENV
from shardcron.client.sdk.sync_client import Client
from shardcron.client.sdk.waiting import DEFAULT_POLL_INTERVAL

__all__ = [
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_TARGET",
    "OWNER_METADATA_KEY",
    "TARGET_ENV",
    "AsyncClient",
    "Client",
]
