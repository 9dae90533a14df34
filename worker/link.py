"""One worker's connection to one poller: the WorkerService.Connect stream, kept up.

A ``PollerLink`` opens the stream, sends Hello (with ``held`` leases and
``pending_results`` of earlier streams), waits for Welcome, then sends heartbeats and
whatever the ``Outbox`` holds, and hands every poller message to the ``StreamOwner``
it serves (the ``Worker``). When the stream fails or ends it reconnects with
exponential backoff (0.1 s to 5 s, with jitter), unless it was ``retired`` (its
poller left the worker's targets) or closed. Runs do not belong to a stream:
they keep executing until their lease deadline, which the worker enforces whether
or not a stream is up.

This is the worker's stream edge: the only worker module that sees protobuf. It
encodes the typed messages of ``shardcron.client.stream`` and decodes the poller's;
a poller message that does not decode is logged and the stream is closed and
opened again (the runs go on meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import grpc

from shardcron.client.codec.stream import decode_poller_message, encode_worker_message
from shardcron.client.errors import InvalidArgument
from shardcron.client.stream import (
    CancelOrder,
    Cancels,
    Demand,
    Heartbeat,
    Hello,
    LeaseGrant,
    Leases,
    OutputRoom,
    PollerEvent,
    Renewals,
    ResultAck,
    ResultAcks,
    RunOutcome,
    Welcome,
)
from shardcron.v1 import worker_pb2, worker_pb2_grpc

from .artifacts import ArtifactFetchFailed
from .outbox import Outbox

log = logging.getLogger(__name__)
# seconds one artifact's read may take in all (a node that stops answering fails the run)
ARTIFACT_READ_TIMEOUT = 600.0

WELCOME_TIMEOUT = 10.0
DEFAULT_LEASE_TTL = 30.0
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0
CHANNEL_OPTIONS: Sequence[tuple[str, int]] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 5_000),
)


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """The channel of one poller's streams: TLS when ``credentials`` are given (the
    poller's certificate must name ``address``'s host), else plaintext."""
    if credentials is not None:
        return grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


class ProtocolError(Exception):
    """The poller broke the protocol: the stream is closed and opened again."""


class StreamOwner(Protocol):
    """What a link needs of the worker it serves; ``Worker`` implements it.

    The link calls these on its event loop, one at a time. The runs, their leases
    and the slots are the owner's; the link only carries messages.
    """

    stats: Counter[str]  # counters the link adds to (sent_*, received_*, reconnects)
    worker_id: str  # its Hello's, which a ReadArtifact names too
    metadata: tuple[tuple[str, str], ...]  # gRPC metadata of every stream
    credentials: grpc.ChannelCredentials | None  # TLS for every stream; None = plaintext

    def hello_for(self, link: PollerLink) -> Hello:
        """The Hello that opens a new stream of ``link`` (it sets ``link.sent_limit``)."""
        ...

    def heartbeat_for(self, link: PollerLink) -> Heartbeat:
        """The leases of ``link`` to renew, built when the heartbeat is sent."""
        ...

    def on_leases(self, link: PollerLink, grants: Sequence[LeaseGrant]) -> None: ...

    def on_renewals(self, link: PollerLink, renewals: Renewals, now: float) -> None:
        """``now``: the monotonic time the answer arrived."""
        ...

    def on_cancels(self, link: PollerLink, orders: Sequence[CancelOrder]) -> None: ...

    def on_acks(self, link: PollerLink, acks: Sequence[ResultAck]) -> None: ...

    def on_output_room(self, link: PollerLink, room: OutputRoom) -> None:
        """The node pauses or resumes runs' output (``Hello.output_spool``)."""
        ...

    def rebalance(self) -> None:
        """Share the slots among the streams again (one opened, closed or asked)."""
        ...

    def slots_to_spare(self) -> bool:
        """More slots are free than all its pollers asked for."""
        ...


def backoff_delay(failures: int) -> float:
    """Delay before reconnect attempt after ``failures`` consecutive failures (>= 0)."""
    base = min(BACKOFF_MAX, BACKOFF_MIN * (2**failures))
    return base * random.uniform(0.5, 1.0)


class PollerLink:
    """The stream to one poller address, reopened until ``close()``."""

    def __init__(self, worker: StreamOwner, address: str) -> None:
        self.worker = worker
        self.address = address
        self.outbox = Outbox(patient=self._reports_can_wait)
        # Results sent (or queued) and not yet acknowledged, by (run_id, fencing_token).
        self.unacked: dict[tuple[str, int], RunOutcome] = {}
        self.lease_ttl = DEFAULT_LEASE_TTL
        self.heartbeat_interval = DEFAULT_LEASE_TTL / 3
        self.poller_id = ""
        self.streams = 0
        # Slot sharing among the worker's streams (see Worker.rebalance): slots held
        # by unfinished runs of this link, what its poller last said it wants more,
        # and the credit limit last told to it (None: no stream open).
        self.held_slots = 0
        self.demand = 0
        self.sent_limit: int | None = None
        self.granted_at = 0.0
        self.demand_at = 0.0
        # Its poller left the worker's targets: when the stream ends, it is not reopened.
        self.retired = False
        self._welcomed = asyncio.Event()
        self._closing = False
        self._session_welcomed = False
        self._call: grpc.aio.StreamStreamCall | None = None
        self._stub: worker_pb2_grpc.WorkerServiceStub | None = None  # while its channel is open
        self._task: asyncio.Task | None = None

    @property
    def connected(self) -> bool:
        return self._welcomed.is_set()

    def _reports_can_wait(self) -> bool:
        """Starts, results and credit limits may gather (``Outbox``) while no poller
        waits for the slots they free: the room this one sees (its credit limit less
        the runs it believes this worker holds, those whose result is still queued
        included) is half its limit or more, and the worker has more slots free than
        all its pollers asked for."""
        limit = self.sent_limit or 0
        room = limit - self.held_slots - self.outbox.results_queued
        return room * 2 >= limit and self.worker.slots_to_spare()

    def grant(self, limit: int) -> None:
        """Tells the poller its new credit limit (with the next reports)."""
        if limit > (self.sent_limit or 0):
            self.granted_at = time.monotonic()
        self.sent_limit = limit
        self.outbox.credits(limit)

    @property
    def ended(self) -> bool:
        """Its stream is closed for good (``close()``, or retired and ended)."""
        return self._task is not None and self._task.done()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"shardcron-link-{self.address}")

    async def close(self) -> None:
        self._closing = True
        if self._call is not None:
            self._call.cancel()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("poller link %s failed while closing", self.address)

    # -- connection loop ------------------------------------------------------------
    async def _run(self) -> None:
        failures = 0
        async with open_channel(self.address, self.worker.credentials) as channel:
            stub = self._stub = worker_pb2_grpc.WorkerServiceStub(channel)
            while not self._closing:
                self._session_welcomed = False
                try:
                    await self._session(stub)
                    log.info("stream to poller %s ended", self.address)
                except grpc.aio.AioRpcError as e:
                    if e.code() == grpc.StatusCode.ALREADY_EXISTS:
                        # another process uses this worker id: it is kept off until that
                        # one leaves, which only the operator can mend
                        log.warning("stream to poller %s refused: %s", self.address, e.details())
                    else:
                        log.info("stream to poller %s failed: %s", self.address, e.code().name)
                except (ProtocolError, TimeoutError) as e:
                    log.warning("stream to poller %s: %s", self.address, e)
                except Exception:
                    log.exception("stream to poller %s broke", self.address)
                if self._closing or self.retired:
                    break
                failures = 0 if self._session_welcomed else failures + 1
                self.worker.stats["reconnects"] += 1
                await asyncio.sleep(backoff_delay(failures))

    async def read_artifact(self, run_id: str, token: int, sha256: str) -> AsyncIterator[bytes]:
        """The bytes of the artifact of a run this poller leased to this worker
        (``WorkerService.ReadArtifact``); ``ArtifactFetchFailed`` when it refuses or fails."""
        stub = self._stub
        if stub is None:
            raise ArtifactFetchFailed(f"artifact {sha256}: no connection to poller {self.address}")
        request = worker_pb2.ReadArtifactRequest(
            run_id=run_id, fencing_token=token, sha256=sha256, worker_id=self.worker.worker_id
        )
        try:
            call = stub.ReadArtifact(
                request, metadata=self.worker.metadata, timeout=ARTIFACT_READ_TIMEOUT
            )
            async for chunk in call:
                yield chunk.data
        except grpc.aio.AioRpcError as e:
            raise ArtifactFetchFailed(
                f"artifact {sha256}: poller {self.address} answered {e.code().name}: {e.details()}"
            ) from None

    async def _session(self, stub: worker_pb2_grpc.WorkerServiceStub) -> None:
        """One stream, until it ends or fails."""
        done = asyncio.Event()
        self._welcomed.clear()
        call = stub.Connect(self._requests(done), metadata=self.worker.metadata)
        self._call = call
        self.streams += 1
        heartbeats: asyncio.Task | None = None
        try:
            first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT)
            if first is grpc.aio.EOF:
                raise ProtocolError("stream closed before Welcome")
            welcome = self._decode(first)
            if not isinstance(welcome, Welcome):
                raise ProtocolError(f"expected Welcome, got {first.WhichOneof('body')}")
            self._on_welcome(welcome)
            self._session_welcomed = True
            heartbeats = asyncio.create_task(self._heartbeats())
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    return
                kind = msg.WhichOneof("body")
                self.worker.stats["received_" + str(kind)] += 1
                if kind is None:
                    # a kind this worker does not know, from a newer poller: skipped, as
                    # before (refusing it would reconnect for ever)
                    log.warning("unknown message from poller %s ignored", self.address)
                    continue
                self._dispatch(self._decode(msg))
        finally:
            self._welcomed.clear()
            done.set()
            if self.sent_limit is not None:
                self.sent_limit = None
                self.worker.rebalance()  # its share goes to the other streams
            self.outbox.interrupt()
            if heartbeats is not None:
                heartbeats.cancel()
            call.cancel()
            self._call = None

    def _decode(self, msg: worker_pb2.PollerMessage) -> PollerEvent:
        try:
            return decode_poller_message(msg)
        except InvalidArgument as e:
            raise ProtocolError(f"a message that does not decode: {e.message}") from None

    def _on_welcome(self, welcome: Welcome) -> None:
        self.poller_id = welcome.poller_id
        self.lease_ttl = welcome.lease_ttl.total_seconds() or DEFAULT_LEASE_TTL
        self.heartbeat_interval = welcome.heartbeat_interval.total_seconds() or self.lease_ttl / 3
        log.info(
            "connected to poller %s (%s): lease_ttl %.3gs, heartbeat %.3gs",
            self.address,
            self.poller_id,
            self.lease_ttl,
            self.heartbeat_interval,
        )
        self._welcomed.set()

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            self.outbox.heartbeat()

    async def _requests(self, done: asyncio.Event) -> AsyncIterator[worker_pb2.WorkerMessage]:
        # Reset and Hello in one step: nothing can be queued in between, so no result
        # goes both in Hello.pending_results and in a Results message.
        self.outbox.reset()
        self.demand = 0
        hello = encode_worker_message(self.worker.hello_for(self))
        self.worker.stats["sent_hello"] += 1
        yield hello
        waiter = asyncio.ensure_future(self._welcomed.wait())
        stopper = asyncio.ensure_future(done.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stopper.cancel()
        while not done.is_set():
            for event in await self.outbox.take(done, lambda: self.worker.heartbeat_for(self)):
                msg = encode_worker_message(event)
                self.worker.stats["sent_" + str(msg.WhichOneof("body"))] += 1
                yield msg

    # -- incoming -------------------------------------------------------------------
    def _dispatch(self, event: PollerEvent) -> None:
        w = self.worker
        if isinstance(event, Leases):
            w.on_leases(self, event.grants)
        elif isinstance(event, Renewals):
            w.on_renewals(self, event, time.monotonic())
        elif isinstance(event, Cancels):
            w.on_cancels(self, event.orders)
        elif isinstance(event, ResultAcks):
            w.on_acks(self, event.acks)
        elif isinstance(event, Demand):
            self.demand = event.slots
            self.demand_at = time.monotonic()
            w.rebalance()
        elif isinstance(event, OutputRoom):
            w.on_output_room(self, event)
        elif isinstance(event, Welcome):
            self._on_welcome(event)  # a repeated Welcome only updates the timings
