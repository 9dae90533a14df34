"""A frozen worker's commands die with their lease, and its stream is closed.

The lease carries an absolute deadline set by the poller (``expires_at``); the
worker's reaper helper kills a command's group at it on its own clock, so a worker
that is SIGSTOPped cannot keep the command alive while the run is retried
elsewhere; renewals move that deadline; a lease that arrives past it is refused;
the poller closes the stream of a worker gone silent and leases it nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import worker_pb2, worker_pb2_grpc
from shardcron.worker.held import LEASE_SAFETY_MARGIN
from tests.support.lease_streams import connect, next_of, read, serving
from tests.support.processes import alive, read_int
from tests.support.scripted_poller import (
    ScriptedPoller,
    command_lease,
    make_worker,
    pid_command,
    read_pid,
    running,
    serve,
)
from tests.support.store_builders import make_job, make_run
from tests.support.waiting import until, wait_until


def stamp(at: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(at)
    return ts


# -- the reaper, with the worker frozen ------------------------------------------------

FROZEN_WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from shardcron.client.types import CommandTask
    from shardcron.worker import CommandExecutor, RunContext
    from shardcron.worker.reaper_client import Reaper

    pidfile, info, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])

    async def main():
        executor = CommandExecutor(reaper=Reaper())
        deadline = time.monotonic() + ttl
        argv = ("sh", "-c", "echo $$ > %s; exec sleep 300" % pidfile)
        run = RunContext(run_id="r1", task=CommandTask(argv=argv), lease_deadline=deadline)
        task = asyncio.create_task(executor.execute(run))
        while not executor.reaper.deadlines and not task.done():
            await asyncio.sleep(0.005)
        with open(info + ".tmp", "w") as f:
            f.write(repr(deadline))
        os.rename(info + ".tmp", info)
        result = await task
        print(result.state, result.error, flush=True)
        await executor.reaper.close()

    asyncio.run(main())
    """
)


def test_the_reaper_kills_a_command_at_its_lease_deadline_while_the_worker_is_frozen(
    tmp_path: Path,
) -> None:
    """The worker process is SIGSTOPped: no watchdog of its own runs, yet its command
    dies at the lease deadline (and not before), killed by the reaper helper."""
    script, pidfile, info = tmp_path / "worker.py", tmp_path / "pid", tmp_path / "info"
    script.write_text(FROZEN_WORKER_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(pidfile), str(info), "1.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        command = read_int(pidfile)
        wait_until(info.exists, 10, "info")
        deadline = float(info.read_text())
        proc.send_signal(signal.SIGSTOP)
        time.sleep(max(0.0, deadline - 0.3 - time.monotonic()))
        assert alive(command), "killed before its deadline"
        wait_until(lambda: not alive(command), deadline + 2.0 - time.monotonic(), "the kill")
        late = time.monotonic() - deadline
        print(f"command died {late * 1000:.0f} ms after its lease deadline")
        assert late < 0.5
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=20)
        assert "killed by signal SIGKILL" in out
        assert "lease deadline of k1 passed" in err
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.communicate()


def test_the_reaper_kills_at_the_latest_deadline_it_was_given() -> None:
    """The helper's "@KEY T" line: T only grows; a group forgotten ("-KEY") is spared."""
    from shardcron.worker.reaper import State

    state = State()
    state.feed(b"+4242 k1\n@k1 10.5\n@k1 12.0\n@k1 11.0\n+4343 k2\n@k2 9.0\n-k2\n")
    assert state.next_deadline() == 12.0
    assert state.due(11.9) == []
    assert state.due(12.0) == [(b"k1", 4242)]
    assert state.groups == {} and state.next_deadline() is None


# -- the worker: deadlines from the lease, moved by renewals -----------------------------


async def test_a_lease_already_past_its_deadline_is_refused(tmp_path: Path) -> None:
    """A lease that reached the worker after its expires_at (the worker was frozen, it
    sat in a buffer) used to get a fresh deadline of now + TTL and run, while the
    poller was already giving the run to another worker. Now nothing of it runs."""
    scripted = ScriptedPoller(lease_ttl=5.0)
    pidfile = tmp_path / "pid"
    async with serve(scripted) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            expired = stamp(datetime.now(UTC) - timedelta(seconds=1))
            scripted.lease(command_lease("late", pid_command(pidfile), expires_at=expired))
            await until(lambda: scripted.of_kind("refused"), 5, "the refusal")
            [refused] = scripted.of_kind("refused")
            assert [(r.run_id, r.fencing_token) for r in refused.leases] == [("late", 1)]
            await asyncio.sleep(0.3)
            assert not pidfile.exists() and not scripted.of_kind("started")
            assert worker.running == [] and worker.stats["refused_expired"] == 1


async def test_a_late_duplicate_of_a_running_lease_is_ignored_not_refused(
    tmp_path: Path,
) -> None:
    """Refusing it would tell the poller that nothing of a running run ran."""
    scripted = ScriptedPoller(lease_ttl=5.0, stamp_expiry=True)
    pidfile = tmp_path / "pid"
    async with serve(scripted) as port:
        worker = make_worker(port)
        async with running(worker):
            await until(lambda: worker.connected)
            expires = stamp(datetime.now(UTC) + timedelta(seconds=5))
            scripted.lease(command_lease("dup", pid_command(pidfile), expires_at=expires))
            pid = await read_pid(pidfile)
            expired = stamp(datetime.now(UTC) - timedelta(seconds=1))
            scripted.lease(command_lease("dup", pid_command(pidfile), expires_at=expired))
            await asyncio.sleep(0.3)
            assert not scripted.of_kind("refused") and alive(pid)
            assert worker.running == ["dup"]


async def test_renewals_move_the_deadline_the_reaper_holds(tmp_path: Path) -> None:
    """Each ok Renewal carries the lease's new expires_at: the worker and its reaper
    move the command's deadline to it; once renewals stop, the command dies by then."""
    renewing = {"on": True}
    scripted = ScriptedPoller(
        lease_ttl=1.0,
        heartbeat=0.2,
        renew=lambda run_id: True if renewing["on"] else None,
        stamp_expiry=True,
    )
    pidfile = tmp_path / "pid"
    async with serve(scripted) as port:
        worker = make_worker(port, kill_grace=30)
        async with running(worker):
            await until(lambda: worker.connected)
            expires = stamp(datetime.now(UTC) + timedelta(seconds=1.0))
            scripted.lease(command_lease("long", pid_command(pidfile), expires_at=expires))
            pid = await read_pid(pidfile)
            await until(lambda: worker._reaper.deadlines, 5, "the deadline told to the reaper")
            [first] = worker._reaper.deadlines.values()
            await asyncio.sleep(2.0)
            assert alive(pid), "renewed, yet killed"
            [moved] = worker._reaper.deadlines.values()
            assert moved > first + 1.0
            renewing["on"] = False
            stopped = time.monotonic()
            await until(lambda: not alive(pid), 3.0, "the kill once renewals stopped")
            assert time.monotonic() - stopped <= 1.0 - LEASE_SAFETY_MARGIN + 0.5
            await asyncio.sleep(0.2)
            assert "long" not in scripted.results and worker.stats["lost"] == 1


# -- the poller: a silent stream is closed ------------------------------------------------

SILENCE = timedelta(seconds=0.5)


@pytest.fixture
async def stub(poller: Poller) -> AsyncIterator[worker_pb2_grpc.WorkerServiceStub]:
    servicer = WorkerStreamServicer(poller.submit, poller.may_lease, silence_timeout=SILENCE)
    async with serving(servicer) as served:
        yield served


async def create_run(poller: Poller) -> str:
    now = utcnow()
    job = dataclasses.replace(make_job(), created_at=now, updated_at=now)
    run = dataclasses.replace(make_run(job, due_at=now), created_at=now)
    await poller.store.create_jobs([NewJob(job=job, runs=[run])])
    poller.runs_created([run], [job])
    return run.id


async def ended_after(call) -> float:  # type: ignore[no-untyped-def]
    """Seconds until the poller ends the stream; no lease may come meanwhile."""
    started = time.monotonic()
    while (msg := await read(call)) is not grpc.aio.EOF:
        assert msg.WhichOneof("body") != "leases"
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def heartbeating(call) -> AsyncIterator[None]:  # type: ignore[no-untyped-def]
    async def beat() -> None:
        while True:
            await call.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat()))
            await asyncio.sleep(0.1)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


async def test_the_poller_closes_a_silent_stream_and_leases_it_nothing(
    poller: Poller,
    stub: worker_pb2_grpc.WorkerServiceStub,
) -> None:
    """A frozen worker's connection stays open: its stream used to stay booked, and the
    retry of its run went back to it. Now a worker that heartbeats, once silent past
    the timeout, is closed, and the next lease goes to a worker that heartbeats."""
    frozen, healthy = await connect(stub, "w-frozen"), await connect(stub, "w-healthy")
    async with heartbeating(healthy):
        await frozen.write(worker_pb2.WorkerMessage(heartbeat=worker_pb2.Heartbeat()))
        assert 0.5 <= await ended_after(frozen) < 2.0
        await until(lambda: [w.id for w in poller.workers()] == ["w-healthy"], 5, "closed")
        run_id = await create_run(poller)
        [lease] = (await next_of(healthy, "leases")).leases.leases
    assert lease.run_id == run_id
    assert lease.HasField("expires_at")
    assert lease.expires_at.ToDatetime(tzinfo=UTC) > datetime.now(UTC)


async def test_a_worker_quiet_while_idle_is_watched_only_while_it_holds_a_lease(
    poller: Poller,
    stub: worker_pb2_grpc.WorkerServiceStub,
) -> None:
    """The protocol let an idle worker send nothing (the Go example does): it is not
    closed for that; but once it holds a lease it owes heartbeats, and silence then
    closes its stream."""
    quiet = await connect(stub, "w-quiet")
    await asyncio.sleep(3 * SILENCE.total_seconds())
    assert [w.id for w in poller.workers()] == ["w-quiet"]
    run_id = await create_run(poller)
    [lease] = (await next_of(quiet, "leases")).leases.leases
    assert lease.run_id == run_id
    sent = time.monotonic()
    assert await ended_after(quiet) + (time.monotonic() - sent) < 2.0
    await until(lambda: poller.workers() == [], 5, "closed")
