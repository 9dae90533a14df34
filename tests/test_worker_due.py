"""A lease given ahead of its run's due instant, on the worker (``worker/due_gate.py``):
held until ``due_at`` before the run starts, ``Started`` sent only then, and a cancel
during the wait ends it without starting it. Against the scripted in-test poller of
``tests/test_worker_stream.py``; the order of instants is checked, never a speed."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from shardcron.client.types import HandlerTask
from shardcron.v1 import types_pb2, worker_pb2
from shardcron.worker import HandlerRegistry
from shardcron.worker.context import RunContext
from shardcron.worker.due_gate import DueGate, collector_held_off, run_when_due
from tests.support.scripted_poller import ScriptedPoller, handler_lease, make_worker, running, serve
from tests.support.waiting import until


def stamp(at: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(at)
    return ts


def early_lease(run_id: str, name: str, due_at: datetime, token: int = 1) -> worker_pb2.Lease:
    return handler_lease(
        run_id,
        name,
        token=token,
        due_at=stamp(due_at),
        fire_at=stamp(due_at),
        expires_at=stamp(due_at + timedelta(seconds=30)),
    )


def clocked(began: list[datetime]) -> HandlerRegistry:
    """The built-in handlers and ``clocked``, which notes when it began."""
    registry = HandlerRegistry(builtins=True)
    registry.register("clocked", lambda ctx: began.append(datetime.now(UTC)))
    return registry


async def test_hello_says_the_worker_waits_for_due() -> None:
    poller = ScriptedPoller()
    async with serve(poller) as port, running(make_worker(port)) as worker:
        await until(lambda: worker.connected, what="Welcome")
        assert poller.hellos[0].waits_for_due


async def test_a_lease_ahead_of_its_due_instant_starts_no_earlier() -> None:
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with serve(poller) as port, running(make_worker(port, registry=registry)) as worker:
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=1)
        poller.lease(early_lease("r1", "clocked", due))
        await until(lambda: "r1" in poller.results, what="the result")
        result = poller.results["r1"]
        assert result.state == types_pb2.RUN_STATE_SUCCEEDED
        assert began[0] >= due
        # the start is told at the real start: by Started, or by the result sent with it
        assert all(m.at.ToDatetime(UTC) >= due for m in poller.of_kind("started"))
        assert result.started_at.ToDatetime(UTC) >= due


async def test_a_cancel_while_waiting_for_the_due_instant_stops_the_run_before_it_starts() -> None:
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with serve(poller) as port, running(make_worker(port, registry=registry)) as worker:
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=20)
        poller.lease(early_lease("r1", "clocked", due, token=7))
        await until(lambda: worker.slots_used == 1, what="the lease held")
        cancel = worker_pb2.Cancel(
            run_id="r1", fencing_token=7, reason=types_pb2.RUN_REASON_CANCELLED_BY_USER
        )
        poller.send(cancels=worker_pb2.Cancels(cancels=[cancel]))
        await until(lambda: "r1" in poller.results, what="the result")
        result = poller.results["r1"]
        assert result.state == types_pb2.RUN_STATE_CANCELLED
        assert result.reason == types_pb2.RUN_REASON_CANCELLED_BY_USER
        assert not result.HasField("started_at")
        assert not began and not poller.of_kind("started")
        assert worker.slots_used == 0  # its slot is free for the next lease


async def test_the_runs_of_one_instant_are_released_together_and_a_cancelled_one_never_starts() -> (
    None
):
    # A fleet's minute brings thousands of runs due at one instant: one timer releases
    # them all (due_gate.DueGate), each started in one pass, not each in its own turn.
    poller = ScriptedPoller()
    began: list[datetime] = []
    registry = clocked(began)
    async with (
        serve(poller) as port,
        running(make_worker(port, registry=registry, slots=32)) as worker,
    ):
        await until(lambda: worker.connected)
        due = datetime.now(UTC) + timedelta(seconds=2)
        poller.lease(*(early_lease(f"r{i}", "clocked", due, token=i + 1) for i in range(20)))
        await until(lambda: worker.slots_used == 20, what="the leases held")
        assert len(worker._due_gate) == 1  # one instant, one timer
        cancel = worker_pb2.Cancel(
            run_id="r0", fencing_token=1, reason=types_pb2.RUN_REASON_CANCELLED_BY_USER
        )
        poller.send(cancels=worker_pb2.Cancels(cancels=[cancel]))
        await until(lambda: len(poller.results) == 20, what="the results")
        assert poller.results["r0"].state == types_pb2.RUN_STATE_CANCELLED
        assert not poller.results["r0"].HasField("started_at")
        for i in range(1, 20):
            result = poller.results[f"r{i}"]
            assert result.state == types_pb2.RUN_STATE_SUCCEEDED
            assert result.started_at.ToDatetime(UTC) >= due
        assert len(began) == 19 and min(began) >= due
        # each start is told once, by Started or by the result sent with it; never r0's
        started = [ref.run_id for m in poller.of_kind("started") for ref in m.leases]
        assert len(started) == len(set(started))
        assert set(started) <= {f"r{i}" for i in range(1, 20)}
        assert worker.slots_used == 0 and len(worker._due_gate) == 0


async def test_the_release_pass_holds_the_collector_off_and_gives_it_back() -> None:
    # A full collection inside the pass of a 10,000-run minute delayed every run after
    # it by ~60 ms: each run's launch (its start stamped) happens with the collector
    # held off, and the collector is on again once the pass is over.
    started: list[Any] = []
    outbox = SimpleNamespace(started=lambda ref, at: started.append(ref))
    seen: list[bool] = []

    async def result() -> str:
        return "done"

    def launch() -> Any:
        seen.append(gc.isenabled())
        return result()

    def held(i: int) -> Any:
        ctx = RunContext(run_id=f"r{i}", task=HandlerTask(name="note"))
        link = SimpleNamespace(outbox=outbox)
        return SimpleNamespace(ref=f"ref{i}", ctx=ctx, link=link, deadline=time.monotonic() + 60)

    gate = DueGate()
    due = datetime.now(UTC) + timedelta(milliseconds=100)
    assert gc.isenabled()
    waits = [gate.hold(held(i), due, 0.1, launch) for i in range(3)]
    outcomes = await asyncio.gather(*waits)
    assert seen == [False, False, False]
    assert started == ["ref0", "ref1", "ref2"]
    assert gc.isenabled()
    assert [await o for o in outcomes if o is not None] == ["done"] * 3


async def test_a_run_whose_lease_ran_out_while_frozen_is_not_started() -> None:
    # A worker frozen (SIGSTOP) through a run's due instant and past its lease's
    # deadline: its poller may have leased the run to another worker. Whichever timer
    # comes first on resume (the instant's release, or a lease read late), the run is
    # not started and no Started goes out.
    started: list[Any] = []
    launched: list[str] = []
    outbox = SimpleNamespace(started=lambda ref, at: started.append(ref))

    def held(name: str, deadline: float) -> Any:
        ctx = RunContext(run_id=name, task=HandlerTask(name="note"))
        link = SimpleNamespace(outbox=outbox)
        return SimpleNamespace(ref=name, ctx=ctx, link=link, deadline=deadline)

    def launch_of(name: str) -> Any:
        def launch() -> Any:
            launched.append(name)
            return asyncio.sleep(0, result=name)

        return launch

    gate = DueGate()
    clock = time.monotonic()
    due = datetime.now(UTC) + timedelta(milliseconds=100)
    lapsed_run, live_run = held("lapsed", clock + 0.05), held("live", clock + 60)
    waits = [gate.hold(r, due, 0.1, launch_of(r.ref)) for r in (lapsed_run, live_run)]
    outcomes = await asyncio.gather(*waits)
    assert outcomes[0] is None and launched == ["live"] and started == ["live"]
    assert await outcomes[1] == "live"

    late = held("late", time.monotonic() - 1)  # a lease read after its deadline
    result = await run_when_due(late, None, gate, launch_of("late"))
    assert result.started_at is None and launched == ["live"] and started == ["live"]


def test_the_collector_stays_off_if_it_was_off() -> None:
    gc.disable()
    try:
        with collector_held_off():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
