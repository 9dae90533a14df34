"""Where a client connects and as whom: the targets, the channels and the owner metadata.

A target is one ``host:port`` (or any gRPC target, such as ``dns:///name:port``) or
several, comma-separated (``host1:7400,host2:7400``): any api node answers any call.
Failing over is gRPC's own work, set by the service config every channel carries:

- several targets become one static address list (``ipv4:``/``ipv6:``; host names are
  resolved once, when the channel is made), balanced ``round_robin``: a node that is
  down is skipped as soon as its connection fails, and calls go to the others;
- calls that change nothing (``READ_METHODS``) are retried on ``UNAVAILABLE``
  (``retryPolicy``), so a read in flight when its node dies is sent again to another;
- calls that change something are not retried after they may have reached a node: a
  create that did reach it before the node died would create the job twice. gRPC still
  retries, on its own, a call that never left the client ("transparent retry").
  The exception: ``CreateJob``/``CreateJobs`` whose every job has an idempotency key,
  which the api makes safe to repeat, go through a second channel whose service config
  retries them too (opened on the first such call). A service config chooses retries
  by method only, hence the second channel.

Every call carries the owner in the ``x-shardcron-owner`` metadata when one is given;
the api node scopes what the call sees and changes to that owner (without one: the one
owner of the call's credential, or ``default``). A client given a token sends it as
``authorization: Bearer TOKEN`` on every call, through every channel.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from shardcron.client.errors import InvalidArgument
from shardcron.client.types import OWNER_HEADER
from shardcron.v1 import jobs_pb2_grpc

DEFAULT_TARGET = "127.0.0.1:7400"
TARGET_ENV = "SHARDCRON_TARGET"
TOKEN_ENV = "SHARDCRON_TOKEN"
OWNER_METADATA_KEY = OWNER_HEADER
AUTHORIZATION_METADATA_KEY = "authorization"

JOB_SERVICE = "shardcron.v1.JobService"
CLUSTER_SERVICE = "shardcron.v1.ClusterService"
READ_METHODS = (
    (JOB_SERVICE, "GetJob"),
    (JOB_SERVICE, "ListJobs"),
    (JOB_SERVICE, "PreviewFires"),
    (JOB_SERVICE, "ListRuns"),
    (JOB_SERVICE, "GetRun"),
    (JOB_SERVICE, "ReadRunOutput"),
    (JOB_SERVICE, "ListDeadLetters"),
    (JOB_SERVICE, "ListDeliveries"),
    (JOB_SERVICE, "GetNotifySettings"),
    (CLUSTER_SERVICE, "GetStatus"),
)
CREATE_METHODS = ((JOB_SERVICE, "CreateJob"), (JOB_SERVICE, "CreateJobs"))
# Up to 4 attempts, 0.1 s then 0.2 s then 0.4 s apart (with gRPC's jitter): enough for a
# dead node's connection to fail and the balancer to pick another, short beside timeouts.
RETRY_POLICY = {
    "maxAttempts": 4,
    "initialBackoff": "0.1s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}


def resolve_target(target: str | None) -> str:
    """``target``, else ``$SHARDCRON_TARGET``, else ``DEFAULT_TARGET``."""
    return target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def split_targets(target: str) -> list[str]:
    """The addresses of a comma-separated target, in order, without repeats; raises
    InvalidArgument if none is given."""
    addresses = list(dict.fromkeys(t.strip() for t in target.split(",") if t.strip()))
    if not addresses:
        raise InvalidArgument("target", f"no address in {target!r}")
    return addresses


def channel_target(target: str) -> str:
    """The gRPC target for ``target``: one address as given; several as one static
    ``ipv4:``/``ipv6:`` list, host names resolved now (all of one family: IPv4 when every
    host has an IPv4 address). Raises InvalidArgument for an address without a port, a host
    that does not resolve, or a mix the families cannot cover."""
    addresses = split_targets(target)
    if len(addresses) == 1:
        return addresses[0]
    resolved = [_resolve(address) for address in addresses]
    for family, scheme in ((socket.AF_INET, "ipv4"), (socket.AF_INET6, "ipv6")):
        if all(family in found for found in resolved):
            return f"{scheme}:" + ",".join(a for found in resolved for a in found[family])
    raise InvalidArgument("target", f"the addresses of {target!r} are not all IPv4 nor all IPv6")


def _resolve(address: str) -> dict[int, list[str]]:
    """``host:port`` as ``ip:port`` (``[ip]:port`` for IPv6), by address family."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument("target", f"{address!r} is not host:port")
    try:
        ips = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP)
        except OSError as e:
            raise InvalidArgument("target", f"cannot resolve {host!r}: {e}") from None
        ips = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    found: dict[int, list[str]] = {}
    for ip in ips:
        if ip.version == 4:
            found.setdefault(socket.AF_INET, []).append(f"{ip}:{port}")
        else:
            found.setdefault(socket.AF_INET6, []).append(f"[{ip}]:{port}")
    return found


def service_config(*, retry_creates: bool = False) -> str:
    """The service config of a client channel: ``round_robin``, reads retried on
    UNAVAILABLE, and creates too with ``retry_creates`` (for keyed creates only)."""
    retried = READ_METHODS + (CREATE_METHODS if retry_creates else ())
    return json.dumps(
        {
            "loadBalancingConfig": [{"round_robin": {}}],
            "methodConfig": [
                {
                    "name": [{"service": s, "method": m} for s, m in retried],
                    "retryPolicy": RETRY_POLICY,
                }
            ],
        }
    )


def resolve_token(token: str | None) -> str | None:
    """``token``, else ``$SHARDCRON_TOKEN`` (an SDK client's; a worker's is given)."""
    return token if token is not None else os.environ.get(TOKEN_ENV)


def call_metadata(owner: str | None, token: str | None = None) -> tuple[tuple[str, str], ...]:
    """The metadata every call of a client sends: the owner it acts as (none: the node
    takes its credential's one owner, or ``default``) and its bearer token, if any."""
    metadata: list[tuple[str, str]] = []
    if owner is not None:
        metadata.append((OWNER_METADATA_KEY, owner))
    if token:
        metadata.append((AUTHORIZATION_METADATA_KEY, f"Bearer {token}"))
    return tuple(metadata)


def open_channel(
    target: str,
    *,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]],
    asyncio: bool = False,
    retry_creates: bool = False,
) -> grpc.Channel | grpc.aio.Channel:
    """A TLS channel when ``credentials`` are given, else a plaintext one, to every
    address of ``target`` (``channel_target``) with the client's service config (a
    ``grpc.service_config`` in ``options`` replaces it); ``asyncio`` picks a
    ``grpc.aio`` channel, which must be opened inside the loop that uses it.

    With several addresses the channel's authority is the first one given, so with TLS
    every node's certificate must name it (or pass ``grpc.ssl_target_name_override``).
    """
    api: Any = grpc.aio if asyncio else grpc
    given = dict(options)
    defaults: list[tuple[str, Any]] = [("grpc.enable_retries", 1)]
    if "grpc.service_config" not in given:
        defaults.append(("grpc.service_config", service_config(retry_creates=retry_creates)))
    addresses = split_targets(target)
    if len(addresses) > 1 and "grpc.default_authority" not in given:
        defaults.append(("grpc.default_authority", addresses[0]))
    all_options = [*defaults, *options]
    grpc_target = channel_target(target)
    if credentials is not None:
        return api.secure_channel(grpc_target, credentials, options=all_options)
    return api.insecure_channel(grpc_target, options=all_options)


def keyed(specs: Sequence[Any]) -> bool:
    """Whether every ``(spec, idempotency_key)`` of a create has a key: only then may a
    create be sent again after it may have reached a node."""
    return bool(specs) and all(isinstance(s, tuple) and s[1] for s in specs)


class ClientChannels:
    """A client's channels: the one every call uses, and the one for keyed creates
    (whose service config retries them), each opened on first use."""

    def __init__(
        self,
        target: str,
        *,
        credentials: grpc.ChannelCredentials | None,
        options: Sequence[tuple[str, Any]],
        asyncio: bool = False,
    ) -> None:
        self._target = target
        self._credentials = credentials
        self._options = list(options)
        self._asyncio = asyncio
        self._calls: Any = None
        self._keyed_creates: Any = None
        self._keyed_jobs: jobs_pb2_grpc.JobServiceStub | None = None

    def calls(self) -> Any:
        if self._calls is None:
            self._calls = self._open(retry_creates=False)
        return self._calls

    def jobs_for_create(
        self, specs: Sequence[Any], jobs: jobs_pb2_grpc.JobServiceStub
    ) -> jobs_pb2_grpc.JobServiceStub:
        """The stub a create of ``specs`` goes through: ``jobs`` (on ``calls()``), or
        the keyed-creates channel's when every job has an idempotency key."""
        if not keyed(specs):
            return jobs
        if self._keyed_jobs is None:
            self._keyed_creates = self._open(retry_creates=True)
            self._keyed_jobs = jobs_pb2_grpc.JobServiceStub(self._keyed_creates)
        return self._keyed_jobs

    def take_open(self) -> list[Any]:
        """The channels open now, for the caller to close; the next call opens anew."""
        open_now = [c for c in (self._calls, self._keyed_creates) if c is not None]
        self._calls = self._keyed_creates = self._keyed_jobs = None
        return open_now

    def _open(self, *, retry_creates: bool) -> Any:
        return open_channel(
            self._target,
            credentials=self._credentials,
            options=self._options,
            asyncio=self._asyncio,
            retry_creates=retry_creates,
        )
