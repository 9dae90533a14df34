"""A frozen worker's commands die with their lease, and its stream is closed.

The lease carries an absolute deadline set by the poller (``expires_at``); each
command's supervisor, in the run's cage, kills the command at it on its own clock, so
a worker that is SIGSTOPped (with its whole process group) cannot keep the command
alive while the run is retried elsewhere; renewals move that deadline, only later; a
lease that arrives past it is refused; the poller closes the stream of a worker gone
silent and leases it nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
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

from shardcron.client.types import CommandTask, RunReason, RunState
from shardcron.coordinator.ids import utcnow
from shardcron.coordinator.poller import Poller
from shardcron.coordinator.store import NewJob
from shardcron.coordinator.worker_stream import WorkerStreamServicer
from shardcron.v1 import worker_pb2, worker_pb2_grpc
from shardcron.worker import CommandExecutor, RunContext
from shardcron.worker.leased_runs import LEASE_SAFETY_MARGIN
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


# -- the supervisor, with the worker's whole process group frozen -----------------------

FROZEN_WORKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from shardcron.client.types import CommandTask
    from shardcron.worker import CommandExecutor, RunContext

    pidfile, info, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])

    async def main():
        executor = CommandExecutor()
        deadline = time.monotonic() + ttl
        argv = ("sh", "-c", "echo $$ > %s; exec sleep 300" % pidfile)
        run = RunContext(run_id="r1", task=CommandTask(argv=argv), lease_deadline=deadline)
        task = asyncio.create_task(executor.execute(run))
        while not os.path.exists(pidfile) and not task.done():
            await asyncio.sleep(0.005)
        with open(info + ".tmp", "w") as f:
            f.write(repr(deadline))
        os.rename(info + ".tmp", info)
        result = await task
        print(result.state, result.error, flush=True)
        await executor.close()

    asyncio.run(main())
    """
)


def test_the_supervisor_kills_a_command_at_its_lease_deadline_while_the_worker_is_frozen(
    tmp_path: Path,
) -> None:
    """The worker's whole process group (the worker and its fork server) is SIGSTOPped:
    nothing of the worker runs, yet its command dies at the lease deadline (and not
    before), killed by the run's supervisor, which is frozen only with its command."""
    script, pidfile, info = tmp_path / "worker.py", tmp_path / "pid", tmp_path / "info"
    script.write_text(FROZEN_WORKER_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(pidfile), str(info), "1.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own: the worker's, to freeze whole
    )
    try:
        command = read_int(pidfile)
        wait_until(info.exists, 10, "info")
        deadline = float(info.read_text())
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(max(0.0, deadline - 0.3 - time.monotonic()))
        assert alive(command), "killed before its deadline"
        wait_until(lambda: not alive(command), deadline + 2.0 - time.monotonic(), "the kill")
        late = time.monotonic() - deadline
        print(f"command died {late * 1000:.0f} ms after its lease deadline")
        assert late < 0.5
        os.killpg(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=20)
        assert "CANCELLED killed: the lease deadline passed without renewal" in out
        assert "the lease deadline passed without renewal; killing every process" in err
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.communicate()


async def test_the_supervisor_kills_at_the_latest_deadline_it_was_given(tmp_path: Path) -> None:
    """Renewals only move a deadline later: one told after a later one changes nothing,
    and the command lives until the latest."""
    executor = CommandExecutor()
    pidfile = tmp_path / "pid"
    now = time.monotonic()
    argv = ("sh", "-c", f"echo $$ > {pidfile}; exec sleep 300")
    run = RunContext(run_id="latest", task=CommandTask(argv=argv), lease_deadline=now + 1.0)
    task = asyncio.create_task(executor.execute(run))
    try:
        pid = await read_pid(pidfile)
        run.extend_lease(now + 3.0)
        run.extend_lease(now + 2.0)  # earlier than the last: ignored
        await asyncio.sleep(max(0.0, now + 2.5 - time.monotonic()))
        assert alive(pid), "killed at a deadline that was moved later"
        await until(lambda: not alive(pid), 3.0, "the kill at the latest deadline")
        assert time.monotonic() - (now + 3.0) < 0.5
        result = await asyncio.wait_for(task, 5)
        assert (result.state, result.reason) == (RunState.CANCELLED, RunReason.WORKER_LOST)
    finally:
        run.kill()
        await asyncio.wait_for(task, 5)
        await executor.close()


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


async def test_renewals_move_the_deadline_the_supervisor_holds(tmp_path: Path) -> None:
    """Each ok Renewal carries the lease's new expires_at: the worker and the run's
    supervisor move the command's deadline to it; once renewals stop, it dies by then."""
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
            held = worker._runs["long"].ctx
            first = held.lease_deadline
            assert first is not None and held.on_lease_extended is not None  # its supervisor
            await asyncio.sleep(2.0)
            assert alive(pid), "renewed, yet killed"
            assert held.lease_deadline is not None and held.lease_deadline > first + 1.0
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
