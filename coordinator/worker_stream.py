"""The lease stream's gRPC edge: ``WorkerService.Connect`` for one poller.

``WorkerStreamServicer.Connect`` takes the stream's opening Hello and holds the stream
under its principal's ``max_worker_streams``; ``LeaseStream`` serves it from there, one
method per concern: the worker's messages decoded into the poller's inbox (a message
that does not decode ends that stream alone with ``INVALID_ARGUMENT`` and changes
nothing else), the poller's messages out, a revoked principal, a silent worker. With
a blob store (``output_blobs``), the output of a lease the stream holds goes there
from here, before the message reaches the inbox, and a result waits until its run's
output is written, and carries its digest and why it was cut to the poller. While the
store is down, a worker that keeps output on its disk (``Hello.output_spool``) is
told to pause that run's output (``OutputRoom``), and to resume it once the store is
back; its heartbeats, results and other runs go on.
``WorkerOutbox`` is the loop's ``WorkerLink`` to one worker: it batches everything a
turn sends into one message per kind (a message per lease costs the poller and the
worker far more than one per turn: ``bench/`` measures it) and never writes a lease
decided before the poller lost or could not confirm its shards.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta

import grpc

from shardcron.client.codec.errors import status_for
from shardcron.client.codec.stream import decode_worker_message, encode_poller_message
from shardcron.client.dataclass_copies import copy_with
from shardcron.client.errors import InvalidArgument, ResourceExhausted, ShardcronError
from shardcron.client.limits import clip
from shardcron.client.stream import (
    CancelOrder,
    Cancels,
    Demand,
    Hello,
    LeaseGrant,
    LeaseRef,
    Leases,
    Output,
    OutputPiece,
    OutputRoom,
    Renewal,
    Renewals,
    ResultAck,
    ResultAcks,
    ResultFiles,
    Results,
    RunOutcome,
    Welcome,
    WorkerEvent,
)
from shardcron.coordinator.artifacts import Artifacts
from shardcron.coordinator.audit import ANONYMOUS
from shardcron.coordinator.auth import AuthSource, Caller, PrincipalDenied, current_caller
from shardcron.coordinator.open_calls import LongCall, OpenCalls
from shardcron.coordinator.output_blobs import OutputBlobs, Room, notice
from shardcron.coordinator.poller.events import (
    InboxEvent,
    WorkerClosed,
    WorkerConnected,
    WorkerMessage,
)
from shardcron.coordinator.result_blobs import ResultBlobs
from shardcron.coordinator.worker_silence import SilenceWatch
from shardcron.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger("shardcron.workers")

DEMAND_REFRESH = 1.0  # seconds between repeats of an unchanged, standing Demand
SILENCE_RECHECK = 0.05  # seconds: a second look before a silent worker's stream is closed
CONNECT_METHOD = "/shardcron.v1.WorkerService/Connect"  # the lease stream, as auth names it


# whose run's output a stream sends under a token, and its job's output limit (0: the
# node's), when it counts (else None): the poller's
OutputOwner = Callable[["WorkerOutbox", str, int], tuple[str, int] | None]
# the owner of a run whose lease a stream of (worker id, principal) holds under a token and
# whose job names an artifact, when all that holds (else None): the poller's
ArtifactOf = Callable[[str, int, str, str, str], str | None]
# whose run's result files a stream sends under a token, while it holds that lease
# (else None): the poller's
ResultsOwner = Callable[["WorkerOutbox", str, int], str | None]
# (lease generation, carries leases, message), the end of the stream, or a failure
_Item = tuple[int, bool, worker_pb2.PollerMessage] | ShardcronError | None


class WorkerOutbox:
    """What the poller sends one worker, batched per turn (a ``WorkerLink``)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[_Item] = asyncio.Queue()
        self.lease_gen = 0  # leases queued under an older generation are not sent
        self._leases: list[LeaseGrant] = []
        self._cancels: list[CancelOrder] = []
        self._renewals: list[Renewal] = []
        self._renewal_ttl = timedelta(0)
        self._acks: list[ResultAck] = []
        self._demand_sent = 0  # the worker starts a stream's demand at 0
        self._demand_sent_at = 0.0
        self._demand: int | None = None
        self.closed = False

    def _put(self, msg: worker_pb2.PollerMessage, *, leases: bool = False) -> None:
        self.queue.put_nowait((self.lease_gen, leases, msg))

    def welcome(self, welcome: Welcome) -> None:
        self._put(encode_poller_message(welcome))

    def lease(self, grant: LeaseGrant) -> None:
        self._leases.append(grant)

    def cancel(self, order: CancelOrder) -> None:
        self._cancels.append(order)

    def renewals(self, renewals: Sequence[Renewal], lease_ttl: timedelta) -> None:
        self._renewals.extend(renewals)
        self._renewal_ttl = lease_ttl

    def ack(self, ack: ResultAck) -> None:
        self._acks.append(ack)

    @property
    def demand_standing(self) -> bool:
        return (self._demand_sent if self._demand is None else self._demand) > 0

    def output_room(self, ref: LeaseRef, *, resumed: bool) -> None:
        """Pauses or resumes the output of one lease: sent at once, not with a turn (the
        blob writer decides it, on the stream's own task)."""
        if not self.closed:
            room = OutputRoom(resumed=(ref,)) if resumed else OutputRoom(paused=(ref,))
            self._put(encode_poller_message(room))

    def demand(self, slots: int) -> None:
        """Sent when it changes, and a standing demand again every second (a worker
        disregards a demand whose grant it sees unused, as from a poller that stalled)."""
        again = slots > 0 and time.monotonic() - self._demand_sent_at >= DEMAND_REFRESH
        self._demand = None if slots == self._demand_sent and not again else slots

    def flush_leases(self) -> None:
        if self._leases and not self.closed:
            self._put(encode_poller_message(Leases(grants=tuple(self._leases))), leases=True)
            self._leases = []

    def flush(self) -> None:
        if self.closed:
            return
        self.flush_leases()
        if self._cancels:
            self._put(encode_poller_message(Cancels(orders=tuple(self._cancels))))
            self._cancels = []
        if self._renewals:
            renewals = Renewals(renewals=tuple(self._renewals), lease_ttl=self._renewal_ttl)
            self._put(encode_poller_message(renewals))
            self._renewals = []
        if self._acks:
            self._put(encode_poller_message(ResultAcks(acks=tuple(self._acks))))
            self._acks = []
        if self._demand is not None:
            self._put(encode_poller_message(Demand(slots=self._demand)))
            self._demand_sent, self._demand = self._demand, None
            self._demand_sent_at = time.monotonic()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)

    def fail(self, error: ShardcronError) -> None:
        """Ends the stream with the error's status: INVALID_ARGUMENT for a malformed
        message, ALREADY_EXISTS for a Hello naming a worker connected from another
        process."""
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(error)

    def drop_unsent_leases(self) -> None:
        self.lease_gen += 1

    def forget(self) -> None:
        self.drop_unsent_leases()
        self._leases, self._cancels, self._renewals, self._acks = [], [], [], []


class WorkerStreamServicer(worker_pb2_grpc.WorkerServiceServicer):
    """Serves the lease stream for one poller: ``submit`` is its inbox, ``may_lease``
    says whether leases may be written to workers right now.

    A worker that owes messages (``worker_silence``) and sends nothing for
    ``silence_timeout`` is taken for frozen (SIGSTOP, a stalled machine) while its
    connection stays open: its stream is closed, so the poller leases it nothing more
    and the retry of a run it held goes to another worker. Its commands are killed by
    their supervisors at their lease deadline; if it wakes up it connects again and is
    told its leases are gone."""

    def __init__(
        self,
        submit: Callable[[InboxEvent], None],
        may_lease: Callable[[], bool],
        *,
        silence_timeout: timedelta | None = None,
        auth: AuthSource | None = None,
        open_calls: OpenCalls | None = None,
        output: tuple[OutputBlobs, OutputOwner] | None = None,
        artifacts: tuple[Artifacts, ArtifactOf] | None = None,
        results: tuple[ResultBlobs, ResultsOwner] | None = None,
    ) -> None:
        self._submit = submit
        self._artifacts = artifacts  # the blob store's artifacts, and which a lease names
        self._output = output  # the blob store's writer, and whose output counts
        self._results = results  # the writer of result files, and whose runs count
        self._open_calls = open_calls or OpenCalls()  # streams per principal, bounded
        self._may_lease = may_lease
        self._auth = auth  # a stream of a principal a reload removed or changed is ended
        # a worker silent this long is taken for frozen (None: never): see Connect
        self._silence_timeout = None if silence_timeout is None else silence_timeout.total_seconds()

    async def Connect(
        self,
        request_iterator: AsyncIterator[worker_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[worker_pb2.PollerMessage]:
        hello = await _first_hello(request_iterator, context)
        if hello is None:
            return
        caller = current_caller()  # None: no auth file, every worker is trusted
        principal = caller.principal if caller is not None else ANONYMOUS
        try:
            self._open_calls.acquire(LongCall.WORKER_STREAM, principal)
        except ResourceExhausted as e:
            await context.abort(*status_for(e))
        stream = LeaseStream(
            hello,
            caller,
            request_iterator,
            context,
            submit=self._submit,
            may_lease=self._may_lease,
            auth=self._auth,
            silence_timeout=self._silence_timeout,
            output=self._output,
            results=self._results,
        )
        try:
            async for msg in stream.serve():
                yield msg
        finally:
            self._open_calls.release(LongCall.WORKER_STREAM, principal)

    async def ReadArtifact(
        self, request: worker_pb2.ReadArtifactRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[worker_pb2.ArtifactChunk]:
        """The artifact of a run whose lease a stream of the caller's principal and
        worker id holds here, and whose job names it: any other ask is NOT_FOUND, so
        a worker learns nothing of runs, or code, not leased to it."""
        caller = current_caller()
        principal = caller.principal if caller is not None else ""
        owner = artifacts = None
        if self._artifacts is not None:
            artifacts, artifact_of = self._artifacts
            owner = artifact_of(
                request.run_id, request.fencing_token, request.worker_id, principal, request.sha256
            )
        if owner is None or artifacts is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"run_id: no lease of run {clip(request.run_id)!r} with that token and "
                "artifact is held here by this worker",
            )
            return
        try:
            reader = await artifacts.open(owner, request.sha256)
        except ShardcronError as e:
            await context.abort(*status_for(e))
            return
        async with reader:
            first = True
            async for chunk in reader:
                size = reader.info.size if first else 0
                first = False
                yield worker_pb2.ArtifactChunk(data=chunk, size=size)


def _notice(run_id: str, token: int, text: bytes) -> OutputPiece:
    return OutputPiece(run_id=run_id, fencing_token=token, data=text, stream="stderr")


async def _first_hello(
    requests: AsyncIterator[worker_pb2.WorkerMessage], context: grpc.aio.ServicerContext
) -> Hello | None:
    """The stream's opening Hello, decoded; None if the stream ended before one. Any
    other first message, or a Hello that does not decode, ends the call INVALID_ARGUMENT."""
    try:
        first = await requests.__anext__()
    except StopAsyncIteration:
        return None
    if first.WhichOneof("body") != "hello" or not first.hello.worker_id:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "hello: the first message must be a Hello with a worker_id",
        )
    try:
        hello = decode_worker_message(first)
    except InvalidArgument as e:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
    assert isinstance(hello, Hello)
    return hello


class LeaseStream:
    """One worker's lease stream, once its Hello is taken: its messages decoded into the
    poller's inbox (``_read``), the poller's messages out (``serve``), held back when
    they are leases decided before a loss of shards or an unconfirmed session
    (``_sendable``), the stream ended when its principal is revoked (``_revoked``) or its
    worker is silent while it owes messages (``_watch_silence``)."""

    def __init__(
        self,
        hello: Hello,
        caller: Caller | None,
        requests: AsyncIterator[worker_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext,
        *,
        submit: Callable[[InboxEvent], None],
        may_lease: Callable[[], bool],
        auth: AuthSource | None,
        silence_timeout: float | None,
        output: tuple[OutputBlobs, OutputOwner] | None = None,
        results: tuple[ResultBlobs, ResultsOwner] | None = None,
    ) -> None:
        self.hello = hello
        self._output = output
        self._results = results
        self.caller = caller
        self.outbox = WorkerOutbox()
        self._requests = requests
        self._context = context
        self._submit = submit
        self._may_lease = may_lease
        self._auth = auth
        self._watch = auth.watch(caller) if auth is not None and caller is not None else None
        self._silence_timeout = silence_timeout
        self._silence = SilenceWatch(time.monotonic())

    async def serve(self) -> AsyncIterator[worker_pb2.PollerMessage]:
        """Announces the worker to the poller, then sends what the poller queues for it
        until either side ends the stream; the poller hears of its end once."""
        caller = self.caller
        if self._results is not None and self.hello.pending_results:
            self.hello = await self._pending_results_kept(self._results[0])
        self._submit(
            WorkerConnected(
                link=self.outbox,
                hello=self.hello,
                address=self._context.peer(),
                principal=caller.principal if caller else "",
                owners=caller.worker_pool if caller else None,
            )
        )
        tasks = [asyncio.create_task(self._read())]
        if self._silence_timeout is not None:
            tasks.append(asyncio.create_task(self._watch_silence(self._silence_timeout)))
        try:
            while (item := await self.outbox.queue.get()) is not None:
                if isinstance(item, ShardcronError):
                    await self._context.abort(*status_for(item))
                await self._refuse_if_revoked()
                _, _, msg = item
                if self._sendable(item):
                    self._silence.sent(msg, time.monotonic())
                    yield msg
        finally:
            for task in tasks:
                task.cancel()
            self.outbox.closed = True
            self._submit(WorkerClosed(link=self.outbox))

    async def _read(self) -> None:
        """The worker's messages, decoded, into the inbox; a malformed one ends the stream
        INVALID_ARGUMENT and changes nothing else."""
        outbox = self.outbox
        try:
            async for msg in self._requests:
                event = decode_worker_message(msg)
                self._silence.heard(event, time.monotonic())
                if isinstance(event, Hello):
                    continue  # a second Hello changes nothing
                if isinstance(event, ResultFiles):
                    await self._take_results(event)
                    continue
                if (
                    isinstance(event, Results)
                    and self._results is not None
                    and self._results[0].receiving  # no files on their way: nothing to add
                ):
                    event = await self._results_kept(event, *self._results)
                if self._output is not None and isinstance(event, Output | Results):
                    event = await self._to_blobs(event, *self._output)
                self._submit(WorkerMessage(link=outbox, event=event))
        except InvalidArgument as e:
            log.warning("worker %s: malformed message, stream closed: %s", self.hello.worker_id, e)
            outbox.fail(e)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("worker %s: stream read failed", self.hello.worker_id)
        finally:
            self._submit(WorkerClosed(link=outbox))
            outbox.close()

    async def _take_results(self, event: ResultFiles) -> None:
        """Result files of the leases this stream holds go to the blob store; the rest
        are dropped (a stale or foreign lease writes nothing)."""
        if self._results is None:
            return
        blobs, owner_of = self._results
        for piece in event.pieces:
            owner = owner_of(self.outbox, piece.run_id, piece.fencing_token)
            if owner is None:
                continue
            try:
                await blobs.take(owner, piece, self._writer)
            except Exception:  # a fault of one run's files: the stream goes on
                log.exception("run %s: result file %s not taken", piece.run_id, piece.name)

    @property
    def _writer(self) -> tuple[str, str]:
        """The worker process this stream is of, as result files record it."""
        return self.hello.worker_id, self.hello.instance_id

    async def _pending_results_kept(self, blobs: ResultBlobs) -> Hello:
        """The Hello with each result it re-sends carrying the result files its run kept,
        when this worker process sent them on its stream before (no lease vouches for a
        Hello's results yet: the files' sender does)."""
        outcomes: list[RunOutcome] = []
        for o in self.hello.pending_results:
            kept, note = await blobs.finish(
                o.run_id, o.fencing_token, o.results_note, writer=self._writer
            )
            if kept or note != o.results_note:
                o = copy_with(o, results=kept, results_note=note)
            outcomes.append(o)
        return copy_with(self.hello, pending_results=tuple(outcomes))

    async def _results_kept(
        self, event: Results, blobs: ResultBlobs, owner_of: ResultsOwner
    ) -> Results:
        """Each result of a lease this stream holds with the result files its run kept,
        and what was not (another stream's result, which the poller refuses, ends no
        holder's files)."""
        outcomes: list[RunOutcome] = []
        for o in event.outcomes:
            if owner_of(self.outbox, o.run_id, o.fencing_token) is None:
                outcomes.append(o)
                continue
            kept, note = await blobs.finish(o.run_id, o.fencing_token, o.results_note)
            if kept or note != o.results_note:
                o = copy_with(o, results=kept, results_note=note)
            outcomes.append(o)
        return Results(outcomes=tuple(outcomes))

    async def _to_blobs(
        self, event: Output | Results, blobs: OutputBlobs, owner_of: OutputOwner
    ) -> WorkerEvent:
        """Output of the leases this stream holds goes to the blob store; a result waits
        for its run's output to be written. Returns the event for the inbox, with a
        notice added to its run's tail where output was cut."""
        notices: list[OutputPiece] = []
        if isinstance(event, Results):
            outcomes = []
            for outcome in event.outcomes:
                run_id, token = outcome.run_id, outcome.fencing_token
                if outcome.output_truncated:  # its worker cut it: said in its tail too
                    said = notice(f"{outcome.output_truncated} (on its worker)")
                    notices.append(_notice(run_id, token, said))
                done = await blobs.finish(run_id, token)
                if done.notice:
                    notices.append(_notice(run_id, token, done.notice))
                truncated = "; ".join(t for t in (outcome.output_truncated, done.truncated) if t)
                outcomes.append(
                    copy_with(outcome, output_sha256=done.sha256, output_truncated=truncated)
                )
            if notices:
                output = Output(pieces=tuple(notices))
                self._submit(WorkerMessage(link=self.outbox, event=output))
            return Results(outcomes=tuple(outcomes))
        for piece in event.pieces:
            holder = owner_of(self.outbox, piece.run_id, piece.fencing_token)
            if holder is not None:
                room = self._room(piece) if self.hello.output_spool else None
                cut = await blobs.take(holder[0], piece, limit=holder[1], room=room)
                if cut:
                    notices.append(_notice(piece.run_id, piece.fencing_token, cut))
        return Output(pieces=event.pieces + tuple(notices)) if notices else event

    def _room(self, piece: OutputPiece) -> Room:
        """How the blob writer pauses and resumes the output of ``piece``'s attempt."""
        ref = LeaseRef(run_id=piece.run_id, fencing_token=piece.fencing_token)
        outbox = self.outbox

        def room(resumed: bool) -> None:
            outbox.output_room(ref, resumed=resumed)

        return room

    async def _watch_silence(self, timeout: float) -> None:
        """Closes the stream of a worker silent for ``timeout`` while it owes messages."""
        outbox = self.outbox
        while not outbox.closed:
            silent = self._silence.silent_for(time.monotonic())
            if silent is not None and silent >= timeout:
                # after a stall of this very loop, take in what arrived meanwhile first
                await asyncio.sleep(SILENCE_RECHECK)
                silent = self._silence.silent_for(time.monotonic())
                if silent is None or silent < timeout:
                    continue
                log.warning(
                    "worker %s: silent for %.1fs while holding leases or heartbeating: "
                    "taken for frozen, stream closed",
                    self.hello.worker_id,
                    silent,
                )
                self._submit(WorkerClosed(link=outbox))
                outbox.close()
                return
            await asyncio.sleep(timeout - (silent or 0.0))

    async def _refuse_if_revoked(self) -> None:
        """Ends the stream PERMISSION_DENIED if an auth file reload removed or changed its
        principal, before anything more is sent to it."""
        if self._watch is None or not self._watch.revoked():
            return
        assert self.caller is not None and self._auth is not None
        name = self.caller.principal
        log.warning("worker %s: principal %s revoked: stream closed", self.hello.worker_id, name)
        revoked = PrincipalDenied(
            name, f"principal {name} was removed or changed in the auth file: connect again"
        )
        self._auth.refusals.refused(method=CONNECT_METHOD, peer=self._context.peer(), error=revoked)
        await self._context.abort(*status_for(revoked))

    def _sendable(self, item: tuple[int, bool, worker_pb2.PollerMessage]) -> bool:
        """Leases decided before a freeze or a loss of shards are never sent late: their
        runs are reloaded from the store and their leases waited out."""
        generation, leases, msg = item
        if leases and (generation != self.outbox.lease_gen or not self._may_lease()):
            log.warning(
                "worker %s: %d leases not sent: shard ownership changed or unconfirmed",
                self.hello.worker_id,
                len(msg.leases.leases),
            )
            return False
        return True
