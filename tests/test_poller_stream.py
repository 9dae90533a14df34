"""The lease stream's edge (coordinator/worker_stream.py) in front of a real poller on
SQLite, spoken to by raw gRPC stubs: what one stream sends touches no other stream.

And what issue 10 found stopping the scheduler for everybody, on the same real poller:
a job stored before the input bounds, a rule that raises for one run or one job, a
malformed or poisonous worker message, a cancel waiting on a turn that fails, a
flood of output. Faults are injected by writing rows straight into the store or by
wrapping one rule to raise for one run; the store is never mocked."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.blobs.files import FileBlobStore
from shardcron.blobs.layout import result_key
from shardcron.client.errors import Unavailable
from shardcron.client.schedule import next_fire
from shardcron.client.types import (
    HandlerTask,
    Job,
    JobSpec,
    JobState,
    RetryPolicy,
    Run,
    RunReason,
    RunResultFile,
    RunState,
    Schedule,
)
from shardcron.coordinator.coordination import ClusterView, Member
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.output_blobs import OutputBlobs, list_parts
from shardcron.coordinator.poller import Poller, due, fires, overlap
from shardcron.coordinator.poller.events import CancelRun
from shardcron.coordinator.poller.workers import WorkerBook
from shardcron.coordinator.result_blobs import NO_BLOB_STORE, ResultBlobs
from shardcron.coordinator.router import PollerServiceServicer, ShardRouter
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import cluster_pb2_grpc, types_pb2, worker_pb2, worker_pb2_grpc
from shardcron.worker.outbox import MAX_HEARTBEAT_LEASES
from tests.support.lease_streams import (
    connect,
    faults,
    final_run,
    hello,
    lease_of,
    next_of,
    read,
    result,
    serving,
    stored_run,
    submit,
)
from tests.support.pollers import WAIT
from tests.support.store_builders import SHARDS, make_job, make_run
from tests.support.waiting import until


async def test_a_malformed_worker_message_ends_only_its_stream(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, caplog: pytest.LogCaptureFixture
) -> None:
    """A message the codec refuses used to reach the poller's rules and fail its turn,
    which made the poller forget and reload everything it held: one worker's bad
    message disturbed every run of every shard. Now it ends that stream alone."""
    good = stub.Connect()
    await good.write(hello("w-good"))
    await next_of(good, "welcome")
    now = utcnow()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await poller.store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    [lease] = (await next_of(good, "leases")).leases.leases
    assert lease.run_id == run.id

    bad = stub.Connect()
    await bad.write(hello("w-bad"))
    await next_of(bad, "welcome")
    result = worker_pb2.RunResult(  # a reason this poller does not know
        run_id=run.id,
        fencing_token=lease.fencing_token,
        state=types_pb2.RUN_STATE_SUCCEEDED,
        reason=999,
    )
    with caplog.at_level(logging.WARNING, logger="shardcron"):
        await bad.write(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[result])))
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while await read(bad) is not grpc.aio.EOF:
                pass
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "results.results[0].reason" in (ended.value.details() or "")

        # the good stream's lease is held as before: renewed, and its result accepted
        ref = worker_pb2.LeaseRef(run_id=run.id, fencing_token=lease.fencing_token)
        await good.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=[ref])))
        [renewal] = (await next_of(good, "renewals")).renewals.renewals
        assert (renewal.run_id, renewal.ok) == (run.id, True)
        done = worker_pb2.RunResult(
            run_id=run.id, fencing_token=lease.fencing_token, state=types_pb2.RUN_STATE_SUCCEEDED
        )
        await good.write(worker_pb2.WorkerMessage(results=worker_pb2.Results(results=[done])))
        [ack] = (await next_of(good, "acks")).acks.acks
        assert ack.accepted
    assert not [r for r in caplog.records if "turn failed" in r.getMessage()]
    stored = (await poller.store.get_runs([run.id]))[run.id]
    assert stored.state.value == "SUCCEEDED"
    good.cancel()


class RemoteOwner:
    """Coordination as ShardRouter reads it: every shard held by poller p1 at ``address``."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def view(self) -> ClusterView:
        owners = dict.fromkeys(range(SHARDS), "p1")
        return ClusterView(mode="cluster", leader="n1", epoch=1, shard_owners=owners)

    async def pollers(self) -> list[Member]:
        return [Member(id="p1", address=self.address)]


async def test_runs_nobody_can_take_never_delay_runs_that_can(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """100 runs naming a handler no worker serves used to keep another owner's run
    PENDING for good (placement gave up after 4×free+64 runs it could not place).
    Now the victim is leased at once, and each waiting run says why."""
    call = stub.Connect()
    await call.write(hello("w-1"))
    await next_of(call, "welcome")
    now = utcnow()
    nobody = JobSpec(name="poison", task=HandlerTask(name="nobody-serves-this"), priority=9)
    poison = []
    for _ in range(100):
        job = dataclasses.replace(make_job("mallory", spec=nobody), created_at=now)
        run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
        await poller.store.create_jobs([NewJob(job=job, runs=[run])])
        poller.runs_created([run], [job])
        poison.append(run)
    ids = [r.id for r in poison]
    reason = "no connected worker serves handler nobody-serves-this"
    await until(lambda: poller.reasons_for(ids) == dict.fromkeys(ids, reason), WAIT)

    victim_job = dataclasses.replace(make_job("victim"), created_at=now)
    victim = dataclasses.replace(make_run(victim_job, due_at=utcnow()), created_at=utcnow())
    started = time.monotonic()
    await poller.store.create_jobs([NewJob(job=victim_job, runs=[victim])])
    poller.runs_created([victim], [victim_job])
    [lease] = (await next_of(call, "leases")).leases.leases
    assert lease.run_id == victim.id
    assert time.monotonic() - started < 5.0

    # the api's route from another node: PollerService on the poller's node answers
    # for the runs it holds and leaves the others out
    server = grpc.aio.server()
    cluster_pb2_grpc.add_PollerServiceServicer_to_server(PollerServiceServicer(poller), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    router = ShardRouter(RemoteOwner(f"127.0.0.1:{port}"), None, SHARDS)  # type: ignore[arg-type]
    try:
        unknown = dataclasses.replace(victim, id="unknown")
        answer = await router.waiting_reasons([poison[0], victim, unknown])
        assert answer == {poison[0].id: reason}
    finally:
        await router.close()
        await server.stop(None)
    gauge = poller.metrics.waiting_runs.labels(reason="no_worker_for_handler")
    await until(lambda: gauge._value.get() == 100, WAIT)
    call.cancel()


async def test_the_first_message_must_be_a_hello_with_a_worker_id(
    stub: worker_pb2_grpc.WorkerServiceStub,
) -> None:
    call = stub.Connect()
    await call.write(worker_pb2.WorkerMessage(hello=worker_pb2.Hello(slots=1)))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await read(call)
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ended.value.details() == "hello: the first message must be a Hello with a worker_id"


# --- issue 10: no input, message or flood stops the scheduler ------------------------------

POISON = timedelta(seconds=315576000000)  # ten thousand years: accepted before the bounds


async def good_and_bad(poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub):  # type: ignore[no-untyped-def]
    """Two workers: one holding a lease of another owner's run, one about to misbehave."""
    good = await connect(stub, "w-good")
    _, kept = await submit(poller, "alice")
    kept_lease = await lease_of(good, kept)
    return good, kept_lease, await connect(stub, "w-bad")


async def still_served(poller: Poller, good, lease: worker_pb2.LeaseGrant) -> None:  # type: ignore[no-untyped-def]
    """The good worker's run goes on: its result is accepted and recorded."""
    await good.write(result(lease, types_pb2.RUN_STATE_SUCCEEDED))
    [ack] = (await next_of(good, "acks")).acks.acks
    assert ack.accepted
    assert (await stored_run(poller, lease.run_id)).state == RunState.SUCCEEDED


@pytest.mark.parametrize(
    ("poison", "failures"),
    [
        pytest.param(JobSpec(name="p", task=HandlerTask(name="noop"), starting_deadline=POISON),
                     1, id="starting_deadline"),
        pytest.param(JobSpec(name="p", task=HandlerTask(name="noop"), retry=RetryPolicy(
            max_attempts=3, initial_backoff=POISON, max_backoff=POISON)), 1, id="backoff"),
        pytest.param(JobSpec(name="p", task=HandlerTask(name="noop"), retry=RetryPolicy(
            max_attempts=3, initial_backoff=timedelta(milliseconds=1), multiplier=1e300,
            max_backoff=POISON)), 2, id="multiplier"),
    ],
)  # fmt: skip
async def test_one_accepted_job_does_not_crash_loop_the_poller_for_every_owner(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, poison: JobSpec, failures: int
) -> None:
    """Issue 10, item 1: a job stored before the input bounds made the poller reset
    every few seconds (OverflowError adding its durations to times), and every other
    owner's jobs stayed PENDING. Its arithmetic now saturates; the victim runs at once."""
    worker = await connect(stub, "w1")
    _, bad = await submit(poller, "mallory", poison)
    for _ in range(failures):  # the last one is retried ten thousand years on
        [lease] = (await next_of(worker, "leases")).leases.leases
        await worker.write(result(lease, types_pb2.RUN_STATE_FAILED))
        await final_run(poller, lease.run_id)

    submitted = asyncio.get_running_loop().time()
    _, victim = await submit(poller, "alice")
    await lease_of(worker, victim)
    waited = asyncio.get_running_loop().time() - submitted
    print(f"victim leased {waited:.3f} s after submission")
    assert waited < 5.0
    assert faults(poller) == {"resets": 0.0}
    worker.cancel()


async def test_a_fault_in_a_jobs_fire_rules_pauses_that_job_alone(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10, item 1 (c): the fire rules raising for one job's fire pause that job
    with the error as its reason; the fire's run is FAILED (INTERNAL_ERROR), other
    owners' runs go on, and the poller does not reset."""
    now = utcnow()
    spec = JobSpec(name="every", task=HandlerTask(name="noop"),
                   schedule=Schedule.every(timedelta(seconds=1)))  # fmt: skip
    job = dataclasses.replace(make_job("mallory", spec=spec), created_at=now, updated_at=now)
    fire = next_fire(spec.schedule, now)
    assert fire is not None
    first = fires.make_run(job, fire, shard_count=SHARDS, now=now)
    job = dataclasses.replace(job, next_fire_at=fire.at, next_fire_key=fire.key)
    rules = due.on_fire_due

    def poisoned(job_: Job, run: Run, **kw: Any) -> fires.FireOutcome:
        if run.id == first.id:
            raise ValueError("the schedule broke")
        return rules(job_, run, **kw)

    monkeypatch.setattr(due, "on_fire_due", poisoned)
    worker = await connect(stub, "w1")
    await poller.store.create_jobs([NewJob(job=job, runs=[first])])
    poller.runs_created([first], [job])

    failed = await final_run(poller, first.id)
    assert (failed.state, failed.reason) == (RunState.FAILED, RunReason.INTERNAL_ERROR)
    assert failed.error == "ValueError: the schedule broke"
    paused = await poller.store.get_job("mallory", job.id)
    assert paused.state == JobState.PAUSED
    assert "ValueError: the schedule broke" in paused.pause_reason
    _, victim = await submit(poller, "alice")
    await lease_of(worker, victim)
    assert faults(poller) == {"fire": 1.0, "resets": 0.0}
    worker.cancel()


async def test_a_fault_handling_one_run_fails_that_run_alone(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10, item 1 (c): a rule raising for one run ends it FAILED with
    INTERNAL_ERROR and the error's type and message; the runs of the same turn go on."""
    worker = await connect(stub, "w1")
    now = utcnow()
    job = dataclasses.replace(make_job("mallory"), created_at=now, updated_at=now)
    other = dataclasses.replace(make_job("alice"), created_at=now, updated_at=now)
    bad = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    good = dataclasses.replace(make_run(other, due_at=now), created_at=now)
    decide = overlap.decide

    def poisoned(job_: Job, admitted: Any, **kw: Any) -> Any:
        if job_.id == job.id:  # the job of the bad run
            raise KeyError("x" * 10_000)
        return decide(job_, admitted, **kw)

    monkeypatch.setattr(overlap, "decide", poisoned)
    await poller.store.create_jobs([NewJob(job=job, runs=[bad]), NewJob(job=other, runs=[good])])
    poller.runs_created([bad, good], [job, other])  # one event, one turn
    await lease_of(worker, good)
    failed = await final_run(poller, bad.id)
    assert (failed.state, failed.reason) == (RunState.FAILED, RunReason.INTERNAL_ERROR)
    assert failed.error.startswith("KeyError: 'xxx") and len(failed.error) < 600
    assert (await poller.store.get_job("mallory", job.id)).state == JobState.ACTIVE
    assert faults(poller) == {"trigger": 1.0, "resets": 0.0}
    worker.cancel()


async def test_a_cancel_waiting_on_a_turn_is_answered_when_the_commit_fails(
    poller: Poller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store commit failing is the one reason left to reset; the cancel that turn
    carried is answered (with an error to retry on), not left hanging."""
    job, run = await submit(poller, "alice")
    await until(lambda: poller.phase_of(run.id) is not None, WAIT, "the run held")
    commit = poller.store.commit
    failing = True

    async def fails_once(**kw: Any) -> None:
        nonlocal failing
        if failing:
            failing = False
            raise OSError("disk gone")
        await commit(**kw)

    monkeypatch.setattr(poller.store, "commit", fails_once)
    with pytest.raises(Unavailable):
        await asyncio.wait_for(poller.cancel(run, RunReason.CANCELLED_BY_USER), WAIT)
    assert faults(poller)["resets"] == 1.0
    # reloaded from the store: cancelled this time
    final = await asyncio.wait_for(poller.cancel(run, RunReason.CANCELLED_BY_USER), WAIT)
    assert final.state == RunState.CANCELLED


async def test_a_cancel_waiting_on_a_turn_is_answered_when_the_poller_stops(
    poller: Poller,
) -> None:
    _, run = await submit(poller, "alice")
    done: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
    poller.submit(CancelRun(run=run, reason=RunReason.CANCELLED_BY_USER, done=done))
    await poller.stop()
    assert done.done()


async def test_a_cancel_whose_handling_raises_is_answered_and_the_poller_goes_on(
    poller: Poller, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, run = await submit(poller, "alice")

    async def broken(*args: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(poller, "_on_cancel", broken)
    with pytest.raises(Unavailable, match="RuntimeError: boom"):
        await asyncio.wait_for(poller.cancel(run, RunReason.CANCELLED_BY_USER), WAIT)
    assert faults(poller) == {"cancel_run": 1.0, "resets": 0.0}


# the repros of item 2: each ends its stream with INVALID_ARGUMENT, alone
MALFORMED = {
    "started_at_10_13_seconds": lambda ref: worker_pb2.WorkerMessage(
        started=worker_pb2.Started(leases=[ref], at=Timestamp(seconds=10**13))
    ),
    "started_at_nanos_minus_1": lambda ref: worker_pb2.WorkerMessage(
        started=worker_pb2.Started(leases=[ref], at=Timestamp(nanos=-1))
    ),
    "result_reason_999": lambda ref: worker_pb2.WorkerMessage(
        results=worker_pb2.Results(
            results=[
                worker_pb2.RunResult(
                    run_id=ref.run_id,
                    fencing_token=ref.fencing_token,
                    state=types_pb2.RUN_STATE_SUCCEEDED,
                    reason=999,
                )
            ]
        )
    ),
}


@pytest.mark.parametrize("message", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_message_ends_its_stream_a_concurrent_cancel_returns_and_another_workers_runs_keep_going(  # noqa: E501
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, message: Any
) -> None:
    """Issue 10, item 2: sent every 250 ms, these stopped all runs and a concurrent
    CancelRun never returned."""
    good, kept_lease, bad = await good_and_bad(poller, stub)
    unserved = JobSpec(name="v", task=HandlerTask(name="unserved"))
    _, victim = await submit(poller, "mallory", unserved)  # no worker takes it: READY
    await until(lambda: poller.phase_of(victim.id), WAIT, "the run held")
    ref = worker_pb2.LeaseRef(run_id=victim.id, fencing_token=1)

    cancel = asyncio.create_task(poller.cancel(victim, RunReason.CANCELLED_BY_USER))
    await bad.write(message(ref))
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        while await read(bad) is not grpc.aio.EOF:
            pass
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    cancelled = await asyncio.wait_for(cancel, WAIT)
    assert cancelled.id == victim.id

    await still_served(poller, good, kept_lease)
    assert faults(poller) == {"resets": 0.0}
    good.cancel()


async def test_a_worker_message_whose_handling_raises_closes_that_stream_alone(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoded message that makes applying it raise (streams.py) is a fault of its
    stream: counted, the stream closed; the poller does not reset."""
    good, kept_lease, bad = await good_and_bad(poller, stub)
    set_credits = WorkerBook.set_credits

    def broken(self: WorkerBook, limit: int) -> None:
        if self.id == "w-bad":
            raise ZeroDivisionError("credits")
        set_credits(self, limit)

    monkeypatch.setattr(WorkerBook, "set_credits", broken)
    await bad.write(worker_pb2.WorkerMessage(credits=worker_pb2.Credits(limit=1)))
    while await read(bad) is not grpc.aio.EOF:
        pass
    await still_served(poller, good, kept_lease)
    assert faults(poller) == {"worker_message": 1.0, "resets": 0.0}
    good.cancel()


async def test_a_huge_output_piece_is_held_in_memory_only_cut_to_the_cap(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10, item 4: output pieces are cut to the store's per-run cap (plus the one
    byte that says whether the kept bytes start a line) before they enter the turn."""
    cap = poller.store.output_cap_bytes
    appended: list[int] = []
    append = poller.store.append_output

    async def recording(chunks: Any) -> None:
        appended.extend(len(c.data) for c in chunks)
        await append(chunks)

    monkeypatch.setattr(poller.store, "append_output", recording)
    worker = await connect(stub, "w1")
    _, run = await submit(poller, "alice")
    lease = await lease_of(worker, run)
    piece = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.6 MB
    assert len(piece) > 3 * cap
    chunk = types_pb2.OutputChunk(
        run_id=run.id, fencing_token=lease.fencing_token, data=piece, stream="stdout"
    )
    await worker.write(worker_pb2.WorkerMessage(output=worker_pb2.Output(chunks=[chunk])))
    await until(lambda: appended, WAIT, "the output appended")
    assert appended == [cap + 1]
    worker.cancel()


# --- issue 11, item 2: results can be forged -------------------------------------------


def hello_of(
    worker_id: str, instance_id: str, *held: worker_pb2.LeaseRef
) -> worker_pb2.WorkerMessage:
    msg = hello(worker_id)
    msg.hello.instance_id = instance_id
    msg.hello.held.extend(held)
    return msg


async def connect_as(stub: worker_pb2_grpc.WorkerServiceStub, msg: worker_pb2.WorkerMessage):  # type: ignore[no-untyped-def]
    call = stub.Connect()
    await call.write(msg)
    await next_of(call, "welcome")
    return call


def ref_of(lease: worker_pb2.LeaseGrant) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(run_id=lease.run_id, fencing_token=lease.fencing_token)


def output(lease: worker_pb2.LeaseGrant, data: bytes, *, token: int | None = None):  # type: ignore[no-untyped-def]
    chunk = types_pb2.OutputChunk(
        run_id=lease.run_id,
        fencing_token=lease.fencing_token if token is None else token,
        data=data,
        stream="stdout",
    )
    return worker_pb2.WorkerMessage(output=worker_pb2.Output(chunks=[chunk]))


async def test_a_result_from_a_stream_that_does_not_hold_the_lease_is_refused(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """Issue 11, item 2: a result sent on another stream with a copied token (GetRun
    shows it, tokens are sequential) was accepted, and the run became FAILED while its
    process still ran. A Started or a result from a stream that does not hold the
    lease is refused and changes nothing; the holder's result still counts."""
    holder = await connect(stub, "w-holder")
    _, run = await submit(poller, "alice")
    lease = await lease_of(holder, run)
    forger = await connect(stub, "w-forger")
    started = worker_pb2.Started(leases=[ref_of(lease)])
    await forger.write(worker_pb2.WorkerMessage(started=started))
    await forger.write(result(lease, types_pb2.RUN_STATE_FAILED))
    [ack] = (await next_of(forger, "acks")).acks.acks
    assert (ack.accepted, ack.reason) == (False, "not the lease holder")
    stored = await stored_run(poller, run.id)
    assert (stored.state, stored.started_at) == (RunState.LEASED, None)
    assert poller.metrics.results_rejected._value.get() == 1  # type: ignore[attr-defined]
    await still_served(poller, holder, lease)
    holder.cancel()
    forger.cancel()


async def fenced_output(poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub):  # type: ignore[no-untyped-def]
    """A run leased to a holder, and output for it from a forger's stream, without a
    token and under a later one, then the holder's own ``mine``; returns the holder's
    and the forger's streams, the run and its lease."""
    holder = await connect(stub, "w-holder")
    _, run = await submit(poller, "alice")
    lease = await lease_of(holder, run)
    forger = await connect(stub, "w-forger")
    await forger.write(output(lease, b"forged while leased\n"))
    await holder.write(output(lease, b"tokenless\n", token=0))
    await holder.write(output(lease, b"wrong token\n", token=lease.fencing_token + 1))
    await holder.write(output(lease, b"mine\n"))
    return holder, forger, run, lease


async def test_output_without_the_lease_holders_stream_is_refused(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """Issue 11, item 2: output was kept for any leased run, from any stream, without
    a token. It is kept only from the stream holding the lease, under its token
    (output without one is dropped), and after the run's end only from the worker
    process whose result ended it."""
    holder, forger, run, lease = await fenced_output(poller, stub)
    await still_served(poller, holder, lease)
    await forger.write(output(lease, b"forged after the end\n"))
    await holder.write(output(lease, b"late\n"))
    # the holder's late output is in once it is appended; the forger's, sent before it
    # on a stream read in order, was dropped by then

    async def kept() -> bytes | None:
        data = b"".join(c.data for c in await poller.store.read_output(run.id))
        return data if data.endswith(b"late\n") else None

    assert await until(kept, WAIT, "the late output kept") == b"mine\nlate\n"
    holder.cancel()
    forger.cancel()


async def test_output_reaches_the_blob_store_only_from_the_lease_holder_under_its_token(
    poller: Poller, tmp_path: Path
) -> None:
    """With a blob store, the edge writes a run's output as parts of the lease's token,
    only from the stream holding it: a forger's output, a tokenless one and one under a
    newer token are kept nowhere; the holder's late output goes on after its parts."""
    blobs = OutputBlobs(FileBlobStore(tmp_path / "blobs"))
    await blobs.start()
    servicer = WorkerStreamServicer(
        poller.submit, poller.may_lease, output=(blobs, poller.output_owner)
    )
    async with serving(servicer) as stub:
        holder, forger, run, lease = await fenced_output(poller, stub)
        await still_served(poller, holder, lease)  # the result waited for the part
        ended = await stored_run(poller, run.id)
        assert b"".join(c.data for c in await blobs.read(poller.store, ended, 0, None)) == (
            b"mine\n"
        )
        await forger.write(output(lease, b"forged after the end\n"))
        await holder.write(output(lease, b"late\n"))

        async def kept() -> bytes | None:
            data = b"".join(c.data for c in await blobs.read(poller.store, ended, 0, None))
            return data if data.endswith(b"late\n") else None

        assert await until(kept, WAIT, "the late output kept") == b"mine\nlate\n"
        for token in (0, lease.fencing_token + 1):
            assert await list_parts(blobs.store, "alice", run.id, token) == []
        holder.cancel()
        forger.cancel()
    await blobs.stop()


async def test_a_hello_reusing_a_connected_worker_id_does_not_disconnect_it(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """Issue 11, item 2: a Hello reusing a connected worker's id closed that worker's
    stream (and took its place). Another process (another instance id) naming a
    connected worker is refused with ALREADY_EXISTS naming the id; the connected
    worker keeps its stream and its lease."""
    worker = await connect_as(stub, hello_of("w1", "instance-a"))
    _, run = await submit(poller, "alice")
    lease = await lease_of(worker, run)
    impostor = stub.Connect()
    await impostor.write(hello_of("w1", "instance-b", ref_of(lease)))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        while await read(impostor) is not grpc.aio.EOF:
            pass
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "worker w1 " in (refused.value.details() or "")
    heartbeat = worker_pb2.Heartbeat(leases=[ref_of(lease)])
    await worker.write(worker_pb2.WorkerMessage(heartbeat=heartbeat))
    [renewal] = (await next_of(worker, "renewals")).renewals.renewals
    assert renewal.ok
    await still_served(poller, worker, lease)
    worker.cancel()


async def test_a_worker_reconnecting_replaces_its_own_stream(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """Issue 11, item 2: the same process (same worker id and instance id) opening a
    new stream replaces its old one, which ends; the new stream re-attaches the
    lease with ``held`` and its result is accepted."""
    old = await connect_as(stub, hello_of("w1", "instance-a"))
    _, run = await submit(poller, "alice")
    lease = await lease_of(old, run)
    new = stub.Connect()
    await new.write(hello_of("w1", "instance-a", ref_of(lease)))
    await next_of(new, "welcome")
    [renewal] = (await next_of(new, "renewals")).renewals.renewals
    assert (renewal.run_id, renewal.ok) == (run.id, True)
    while await read(old) is not grpc.aio.EOF:
        pass
    await new.write(output(lease, b"after the reconnect\n"))
    await still_served(poller, new, lease)
    new.cancel()


async def test_a_result_pending_from_a_closed_stream_counts_only_from_the_same_process(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """Issue 11, item 2: after a worker's stream ended, another process taking its id
    cannot report the run (its result is refused and changes nothing); the worker
    process itself, reconnecting, reports it in ``Hello.pending_results``."""
    old = await connect_as(stub, hello_of("w1", "instance-a"))
    _, run = await submit(poller, "alice")
    lease = await lease_of(old, run)
    old.cancel()
    await until(lambda: not poller.workers(), what="the stream closed")
    done = worker_pb2.RunResult(
        run_id=lease.run_id, fencing_token=lease.fencing_token, state=types_pb2.RUN_STATE_FAILED
    )
    other = stub.Connect()
    other_hello = hello_of("w1", "instance-b")
    other_hello.hello.pending_results.append(done)
    await other.write(other_hello)
    [ack] = (await next_of(other, "acks")).acks.acks
    assert (ack.accepted, ack.reason) == (False, "not the lease holder")
    assert (await stored_run(poller, run.id)).state == RunState.LEASED
    other.cancel()
    await until(lambda: not poller.workers(), what="the other stream closed")
    done.state = types_pb2.RUN_STATE_SUCCEEDED
    back = stub.Connect()
    back_hello = hello_of("w1", "instance-a")
    back_hello.hello.pending_results.append(done)
    await back.write(back_hello)
    [ack] = (await next_of(back, "acks")).acks.acks
    assert ack.accepted
    assert (await stored_run(poller, run.id)).state == RunState.SUCCEEDED
    back.cancel()


async def test_leases_beyond_what_a_hello_names_are_renewed_by_the_next_heartbeat(
    poller: Poller, stub: worker_pb2_grpc.WorkerServiceStub
) -> None:
    """A Hello names at most ``MAX_HEARTBEAT_LEASES`` held leases (a bigger one was
    refused for its size); a worker holding more names the rest in its next
    heartbeat. After the same process reconnects, every lease of either list is
    renewed on the new stream: none lapses."""
    n = MAX_HEARTBEAT_LEASES + 50
    first = hello_of("w1", "instance-a")
    first.hello.slots = n
    old = await connect_as(stub, first)
    now = utcnow()
    created = []
    for _ in range(n):
        job = dataclasses.replace(make_job("alice"), created_at=now, updated_at=now)
        created.append(
            NewJob(job=job, runs=[dataclasses.replace(make_run(job, due_at=now), created_at=now)])
        )
    await poller.store.create_jobs(created)
    poller.runs_created([c.runs[0] for c in created], [c.job for c in created])
    refs: list[worker_pb2.LeaseRef] = []
    while len(refs) < n:
        refs += [ref_of(lease) for lease in (await next_of(old, "leases")).leases.leases]
    again = hello_of("w1", "instance-a", *refs[:MAX_HEARTBEAT_LEASES])
    again.hello.slots = n
    new = await connect_as(stub, again)
    await new.write(
        worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat(leases=refs[MAX_HEARTBEAT_LEASES:]))
    )
    renewed: dict[str, bool] = {}
    while len(renewed) < n:
        for r in (await next_of(new, "renewals")).renewals.renewals:
            renewed[r.run_id] = r.ok
    assert set(renewed) == {r.run_id for r in refs} and all(renewed.values())
    new.cancel()


def result_file(lease: worker_pb2.LeaseGrant, name: str, data: bytes, *, offset: int = 0):  # type: ignore[no-untyped-def]
    """One piece holding the whole of a result file ``data``'s bytes from ``offset``."""
    whole = data if offset == 0 else b"?" * offset + data
    piece = worker_pb2.ResultFilePiece(
        run_id=lease.run_id, fencing_token=lease.fencing_token, name=name, offset=offset,
        data=data, size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), last=True,
    )  # fmt: skip
    return worker_pb2.WorkerMessage(result_files=worker_pb2.ResultFilePieces(pieces=[piece]))


async def test_result_files_reach_the_blob_store_only_from_the_lease_holder(
    poller: Poller, tmp_path: Path
) -> None:
    """A worker writes only the result files of runs it holds the lease of: a forger's
    files, and its result (refused), neither store nor end anything of the holder's;
    the holder's result lists its file; files sent after the run ended change nothing."""
    store = FileBlobStore(tmp_path / "blobs")
    await store.open()
    blobs = ResultBlobs(store)
    servicer = WorkerStreamServicer(
        poller.submit, poller.may_lease, results=(blobs, poller.results_owner)
    )
    async with serving(servicer) as stub:
        holder = await connect(stub, "w-holder")
        _, run = await submit(poller, "alice")
        lease = await lease_of(holder, run)
        forger = await connect(stub, "w-forger")
        await forger.write(result_file(lease, "forged.txt", b"forged"))
        await forger.write(result_file(lease, "report.txt", b"forged"))
        await holder.write(result_file(lease, "report.txt", b"mine"))
        await forger.write(result(lease, types_pb2.RUN_STATE_FAILED))
        [ack] = (await next_of(forger, "acks")).acks.acks
        assert (ack.accepted, ack.reason) == (False, "not the lease holder")
        await still_served(poller, holder, lease)
        ended = await stored_run(poller, run.id)
        assert ended.results == (
            RunResultFile(name="report.txt", size=4, sha256=hashlib.sha256(b"mine").hexdigest()),
        )
        assert ended.results_note == ""
        await holder.write(result_file(lease, "report.txt", b"late"))
        await holder.write(result_file(lease, "late.txt", b"late"))
        await holder.write(output(lease, b"flushed\n"))  # read after the late files

        async def late_output_read() -> bool:
            return any(b"flushed" in c.data for c in await poller.store.read_output(run.id))

        await until(late_output_read, WAIT, "the late output read")
        keys = [e.key for e in (await store.list("results/")).items]
        assert keys == [result_key("alice", run.id, "report.txt")]
        assert await store.get(keys[0]) == b"mine"
        holder.cancel()
        forger.cancel()
    await store.close()


async def test_a_node_without_a_blob_store_keeps_no_result_files_and_says_so(
    poller: Poller,
) -> None:
    servicer = WorkerStreamServicer(
        poller.submit, poller.may_lease, results=(ResultBlobs(None), poller.results_owner)
    )
    async with serving(servicer) as stub:
        holder = await connect(stub, "w-holder")
        _, run = await submit(poller, "alice")
        lease = await lease_of(holder, run)
        await holder.write(result_file(lease, "report.txt", b"mine"))
        await still_served(poller, holder, lease)
        ended = await stored_run(poller, run.id)
        assert (ended.results, ended.results_note) == ((), NO_BLOB_STORE)
        holder.cancel()


async def test_result_files_count_for_a_result_re_sent_in_a_hello_by_their_sender(
    poller: Poller, tmp_path: Path
) -> None:
    """Files sent before a stream broke are listed on the run when the same worker
    process re-sends the run's result in its next Hello; another process naming the
    result ends none of them."""
    store = FileBlobStore(tmp_path / "blobs")
    await store.open()
    servicer = WorkerStreamServicer(
        poller.submit, poller.may_lease, results=(ResultBlobs(store), poller.results_owner)
    )
    async with serving(servicer) as stub:
        old = await connect_as(stub, hello_of("w1", "instance-a"))
        _, run = await submit(poller, "alice")
        lease = await lease_of(old, run)
        await old.write(result_file(lease, "report.txt", b"mine"))
        heartbeat = worker_pb2.Heartbeat(leases=[ref_of(lease)])
        await old.write(worker_pb2.WorkerMessage(heartbeat=heartbeat))
        await next_of(old, "renewals")  # read after the file: it was taken
        old.cancel()
        await until(lambda: not poller.workers(), what="the stream closed")
        done = result(lease, types_pb2.RUN_STATE_SUCCEEDED).results.results[0]
        other = hello_of("w1", "instance-b")
        other.hello.pending_results.append(done)
        impostor = await connect_as(stub, other)
        [ack] = (await next_of(impostor, "acks")).acks.acks
        assert not ack.accepted
        impostor.cancel()
        await until(lambda: not poller.workers(), what="the impostor's stream closed")
        back = hello_of("w1", "instance-a")
        back.hello.pending_results.append(done)
        again = await connect_as(stub, back)
        [ack] = (await next_of(again, "acks")).acks.acks
        assert ack.accepted
        ended = await stored_run(poller, run.id)
        assert [f.name for f in ended.results] == ["report.txt"]
        again.cancel()
    await store.close()
